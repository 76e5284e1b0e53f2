"""The speed cell: a precision mode timed against fp32 in interleaved rounds, in device time (CUDA-graph
replay, the gate) and in wall-clock time (eager steps on this host), and held against its baseline.

Its modules, by job: `cell` takes one cell from its prepared sides to its record (``measure_speed``: the
kinds of ratio of ``ampbench.results.ratios``, each held and timed once); `ratio` is one ratio judged:
a timer's rounds become its estimate, verdict and judgement against its baseline, then its figures for
the record and what a recording stores; `judging` the sequential looks of a judged interval, its
interval across runs and a recording's noise; `sides` builds and warms up the
two trainers and gives the clocks that time them; `compiled` is what a compiled cell adds (dynamo's
graph breaks and recompiles, compile time); `timing` the interleaved blocks and rounds; `devicetime` a
step's device time (graph capture, profiled kernel lists); `held` queues a block whole before the GPU
starts it; `hostload` how far an eager step waits on its host.
"""
