"""The speed cell: a precision mode timed against fp32 in interleaved rounds, in device time (CUDA-graph
replay, the gate) and in wall-clock time (eager steps on this host), and held against its baseline.

Its modules, by job. `cell` takes one cell from its prepared sides to its record (``measure_speed``).
`ratio` builds the cell's ratios (the kinds of ``ampbench.results.ratios``) over its sides and passes each
through its stages, none of which knows the next: `clocks` times its two sides alike (the clock its kind
names); `measurement` keeps what the clock's rounds measured, taking as many as the looks of `sequential`
ask for (the one place where what is measured depends on how it is judged); `judging` judges the
measurement against its check; `writers` writes its figures for the record and a recording's baseline
entry. Under them, `sides` builds and warms up the two trainers; `timing` times the blocks and rounds
and synchronises the device; `devicetime` a step's device time (graph capture, profiled kernel lists);
`held` queues a block whole before the GPU starts it; `compiled` is what a compiled cell adds (dynamo's
graph breaks and recompiles, compile time); `hostload` how far an eager step waits on its host.
"""
