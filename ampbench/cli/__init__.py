"""The ``ampbench`` command (the package's ``ampbench`` script, and ``python -m ampbench``): reports and
comparisons of saved runs, the baseline files, the run history, and the checks run outside pytest.

Its modules, by job: `command` is the entry point (``main``), which runs a subcommand and turns what ends
it early into its exit status; `args` declares every subcommand's arguments; `exits` names the exit
statuses; one module per group of subcommands: `runs` (report, compare), `baselines` (spread, baselines
show|merge|export), `history` (history import|runs|accept|explain|changes), `catalog` (list),
`fidelity` (the harness against a plain loop) and `fp8_width` (where fp8 starts to pay); the last two
measure, and import torch only when run. ``ampbench export`` is ``ampbench.export.cli``'s; `bisect`
declares its own arguments and runs ``ampbench.bisect``.
"""

from ampbench.cli.command import main

__all__ = ["main"]
