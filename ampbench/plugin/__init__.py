"""ampbench's pytest plugin, registered by the package's ``pytest11`` entry point (``ampbench =
"ampbench.plugin"``): installing ampbench gives every pytest run of the environment its options and
fixtures. It acts only where a run asks for it (``acts``): pytest's ``required_plugins`` lists ampbench
(this repository's pyproject.toml does, and so does a project of the user's own that runs the suite's
cells), or the command line names one of its options (``--perf-*``, ``--loss-scaler``). In any other run
it imports no torch, probes no device, reads no baseline and opens no history, and prints nothing: the
options and fixtures exist but nothing runs at configure time, and a test that asks for a cell
(``model_name`` and ``mode_name``) or for the suite's settings is a usage error saying how to ask.

Its modules, by job: `options` declares the ``--perf-*`` options; `session` turns them into the
session's settings at configure time (usage errors before the first cell, the hypothesis profiles),
parametrizes the cells (from `parametrize`), says when the run is the CPU smoke pass and writes recorded
baselines; `fixtures` are what a cell test takes; `distributed` holds the distributed cells' ranks and the
hosts their launches span (node 0 runs the tests, the others follow); `compiling` sets Inductor's caches
for a run with compiled cells and compiles their sides ahead, several at once (``speed.ahead``);
`checks` refuses options under which a run would lose its results; `entries` gives each cell's JSON
entry its group, keeps the untimed cells beside the timed ones and the cells whose test stopped with an
error as failing records; `held` lets go of what a cell leaves behind and records what each cell found held;
`progress` draws the progress line; `summary` writes the end-of-run tables; `history` checks the run
history's store before the first cell, appends the run at the end and says how far its cells have
learned. Not loaded with them: `slowdown`, the speed gate's own check, which slows chosen cells on
purpose (`slowed_steps`) where a run asks for it with ``-p ampbench.slowdown``. The cell tests
themselves are ``ampbench.suite``.

Importing this module (or any of the others for its functions) costs nothing more than pytest.
"""

from __future__ import annotations

import re

import pytest

# pytest marks each for assertion rewriting as it loads it, in this order: none imports one after it at
# its top (that one would be loaded unrewritten, and every pytest run of the environment would warn)
pytest_plugins = (
    "ampbench.plugin.options",
    "ampbench.plugin.session",
    "ampbench.plugin.fixtures",
    "ampbench.plugin.distributed",
    "ampbench.plugin.compiling",
    # that the run keeps its results (output paths, options that lose them); the cells' JSON entries and
    # their errors as failing records; the progress line; the run history (--perf-history, --perf-label,
    # each run appended at the session's end)
    "ampbench.plugin.checks",
    "ampbench.plugin.entries",
    "ampbench.plugin.leftover",
    "ampbench.plugin.budget",  # --perf-time-budget: once it is spent no cell begins
    "ampbench.plugin.progress",
    "ampbench.plugin.history",
)

NAME = "ampbench"
OPTION_PREFIXES = ("--perf-", "--loss-scaler")
HOW = ("list ampbench in pytest's required_plugins (e.g. required_plugins = [\"ampbench\"] under "
       "[tool.pytest.ini_options]) or pass a --perf-* option")
_ACTIVE = pytest.StashKey[bool]()


def declared(required_plugins: list[str]) -> bool:
    """Whether pytest's ``required_plugins`` lists ampbench, with or without a version range."""
    return any(re.split(r"[<>=!~;\[\s]", spec.strip(), maxsplit=1)[0].lower() == NAME for spec in required_plugins)


def asked(args: tuple[str, ...] | list[str]) -> bool:
    """Whether the command line names an ampbench option."""
    return any(arg.startswith(OPTION_PREFIXES) for arg in args)


def acts(config: pytest.Config) -> bool:
    """Whether ampbench acts in this run (decided once, at the first question)."""
    if _ACTIVE not in config.stash:
        config.stash[_ACTIVE] = declared(config.getini("required_plugins")) or asked(config.invocation_params.args)
    return config.stash[_ACTIVE]
