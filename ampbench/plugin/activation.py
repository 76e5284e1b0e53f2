"""Whether ampbench acts in this pytest run. Installed, the plugin is loaded into every pytest run of the
environment; it acts only in a run that asks for it, so that another project's tests see no header, no
summary, no check of their options and no torch import:

- the run's configuration lists ampbench in pytest's ``required_plugins`` (this repository's
  pyproject.toml does, and so does a project of the user's own that runs the suite's cells), or
- the command line names one of ampbench's options (``--perf-*``, ``--loss-scaler``).

Elsewhere the options and fixtures exist but nothing runs at configure time; a test that asks for a cell
(``model_name`` and ``mode_name``) or for the suite's settings is a usage error saying how to ask.
"""

from __future__ import annotations

import re

import pytest

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
