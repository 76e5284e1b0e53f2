"""The ``ampbench`` command (the package's ``ampbench`` script, and ``python -m ampbench``): reports and
comparisons of saved runs, the baseline files, the run history, and the checks run outside pytest.

Its modules, by job: `command` is the entry point (``main``), which runs a subcommand by the handler its
parser set and turns what ends it early into its exit status; `args` holds the top-level parser and the
table of command modules; `exits` names the exit statuses; `values` the argument types they share;
`common_args` the options and arguments several commands take, each declared once. One
module per group of subcommands, each declaring its own arguments (``add_parser``) beside what runs them:
`catalog` (list), `runs` (report, compare), `baselines` (spread, baselines show|merge|export), `record`
(baselines record), `history` (history import|runs|accept|explain|changes), `bisect` (runs
``ampbench.bisect``), and ``ampbench.export.cli`` (export). `measuring` declares fidelity and fp8-width,
whose work is `fidelity` (the harness against a plain loop) and `fp8_width` (where fp8 starts to pay):
they import torch, so they are imported only when run.
"""

from ampbench.cli.command import main

__all__ = ["main"]
