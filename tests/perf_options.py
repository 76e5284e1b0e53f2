"""The plugin's ``--perf-*`` options as the tests reach them: a collecting pytest run of perf/test_speed.py
in a child process, the option group declared on a bare argparse parser, and the plugin's configure on a
stand-in config (``configure``), whose usage error a bad command line gets (``usage_error``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_benchmark.plugin

from ampbench.plugin import checks as plugin_checks
from ampbench.plugin import distributed as plugin_distributed
from ampbench.plugin import options as plugin_options
from ampbench.plugin import session as plugin_session

ROOT = Path(__file__).parent.parent


def run_pytest(*args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_speed.py", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


def option_parser() -> tuple[argparse.ArgumentParser, dict[str, dict]]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    options: dict[str, dict] = {}

    class Group:
        @staticmethod
        def addoption(*names, **kwargs):
            options[names[0]] = kwargs
            parser.add_argument(*names, **kwargs)

    class Parser:
        @staticmethod
        def getgroup(*args, **kwargs):
            return Group

    plugin_options.pytest_addoption(Parser, None)
    return parser, options


class FakeConfig:
    def __init__(self, *args: str, **extra):
        parser, _ = option_parser()
        self.option = parser.parse_args(list(args))
        self.option.help = False
        self.option.benchmark_disable = extra.get("benchmark_disable", False)
        self.option.benchmark_json = extra.get("benchmark_json")
        self.stash = pytest.Stash()
        self.pluginmanager = pytest.PytestPluginManager()  # where the summary plugin registers
        self.pluginmanager.register(pytest_benchmark.plugin, "benchmark")  # as its entry point loads it
        self.rootpath = ROOT  # where the default baselines/ is


def configure(*args: str, **extra) -> FakeConfig:
    config = FakeConfig(*args, **extra)
    plugin_checks.check_run(config)  # first, as pytest calls it (tryfirst)
    plugin_session.configure(config)
    plugin_distributed.configure_world_size(config)  # its own pytest_configure, after the settings (trylast)
    return config


def usage_error(*args: str) -> str:
    """What pytest reports for these arguments, found in-process: argparse's message for a bad value of
    one of the suite's options, else the UsageError that pytest_configure raises."""
    parser, _ = option_parser()
    try:
        _, unknown = parser.parse_known_args(list(args))
    except argparse.ArgumentError as exc:
        return str(exc)
    benchmark = argparse.ArgumentParser(exit_on_error=False)  # the two pytest-benchmark options checked here
    benchmark.add_argument("--benchmark-disable", action="store_true")
    benchmark.add_argument("--benchmark-json", type=Path)
    with pytest.raises(pytest.UsageError) as info:
        configure(*[a for a in args if a not in unknown], **vars(benchmark.parse_args(unknown)))
    return str(info.value)
