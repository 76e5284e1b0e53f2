"""ampbench: a regression suite for mixed-precision training speed, memory and loss scaling.

The package, by job (``models/`` is the model zoo, ``ampbench.models``):

- what is measured: ``modes`` (the precision modes' table), ``train`` (one training step), ``fp8``,
  ``loss_scaler``, ``device`` (the device under test), ``data`` and ``inputs`` (files read);
- the cells: ``speed/``, ``memory/``, ``distributed/``, ``convergence``, ``pipeline`` (the input
  pipeline), ``underflow``, with ``stats`` and ``verdict`` to judge them and ``progress`` for their
  one-line progress;
- the run: ``settings`` (the ``--perf-*`` options), ``plugin/`` (the pytest plugin, entry point
  ``pytest11``), ``suite/`` (the cell tests a project collects), ``slowdown`` (the speed gate's own
  check), ``results/`` (the records), ``baselines/`` and ``history/``;
- the ``ampbench`` command: ``cli`` and ``cli_args``, ``report/`` and ``compare`` (``text`` writes
  figures for both, ``command_progress`` tells how far they got), ``catalog``, ``fidelity``,
  ``fp8_width``.
"""

__version__ = "0.1.0"
