"""ampbench: a regression suite for mixed-precision training speed, memory and loss scaling.

The package, by job (``models/`` is the model zoo, ``ampbench.models``):

- what is measured: ``modes`` (the precision modes' table), ``train`` (one training step), ``fp8``,
  ``loss_scaler``, ``device`` (the device under test);
- the cells: ``speed/``, ``memory/``, ``distributed/``, ``convergence/``, ``pipeline/`` (the input
  pipeline), with ``stats`` and ``verdict`` to judge them and ``progress`` for the lines that say how
  far a cell or a command has got;
- the run: ``settings`` (the ``--perf-*`` options), ``plugin/`` (the pytest plugin, entry point
  ``pytest11``; ``slowdown``, the speed gate's own check, loads its plugin.slowdown), ``suite/`` (the
  cell tests a project collects), ``results/`` (the records), ``baselines/`` and ``history/``;
- the ``ampbench`` command: ``cli/`` (its subcommands, arguments and exit statuses), ``report/`` (pages
  and comparisons of saved runs), ``export/``;
- ``files/``: reading a file a user named, writing atomically, and the default paths.
"""

__version__ = "0.1.0"
