"""The ``ampbench`` command's parser: its description and exit statuses, and the table of the modules
that declare its subcommands (``COMMAND_MODULES``). Each module's ``add_parser`` declares its own
subcommands, their options, validators and help, and sets on each the ``handler`` that runs it, which
``command.main`` calls."""

from __future__ import annotations

import argparse
from types import ModuleType

from ampbench.cli import ab as ab_cli
from ampbench.cli import baselines, catalog, measuring, runs
from ampbench.cli import bisect as bisect_cli
from ampbench.cli import history as history_cli
from ampbench.export import cli as export_cli

# in the order --help lists their subcommands; `baselines` adds ``record``'s action (baselines record)
COMMAND_MODULES: tuple[ModuleType, ...] = (catalog, runs, baselines, measuring, history_cli, export_cli, bisect_cli,
                                              ab_cli)


# what each command's help says of it (argparse fills the text to the terminal's width)
_AMPBENCH_ABOUT = """Reports and comparisons of ampbench runs, i.e. of the JSON written by `pytest perf/
--benchmark-json RUN.json`, and their export to dashboards; the per-GPU baseline files (show, merge, export from the
history, record); the run history; the fidelity and fp8 width checks; bisecting a slowdown; two trees compared
in paired runs on one card."""

_AMPBENCH_EXITS = """Exit status: 0 fine, 1 a failing verdict: a regression, a non-finite or failed-reference
convergence cell (or an inconclusive verdict under --strict, a test the new run lost, a fidelity difference beyond
--target), 2 bad usage, a file that is not a usable ampbench run or baseline file, or runs from different devices."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ampbench",
        description=_AMPBENCH_ABOUT, epilog=_AMPBENCH_EXITS)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_parser(sub)
    return parser
