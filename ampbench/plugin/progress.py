"""``--perf-progress``: the one-line progress display (``ampbench.progress``) on pytest's terminal, drawn
after the current line's dots while a test runs and blanked before pytest writes again. A pytest
plugin, loaded by ``ampbench.plugin``; it draws where ampbench acts (``ampbench.plugin.acts``)."""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest

from ampbench import progress
from ampbench.plugin import acts
from ampbench.plugin.options import GROUP

CHOICES = ("auto", "on", "off")
_BEFORE = pytest.StashKey["progress.Line | None"]()  # the display this pytest run replaced


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(*GROUP)
    group.addoption("--perf-progress", metavar="AUTO|ON|OFF", default="auto", type=str.lower, choices=CHOICES,
                    help="a line of progress while a cell measures (its rounds, a memory search's steps): auto "
                         "draws it where the output is a terminal, without -q, -s or $CI (default: auto)")


def wanted(choice: str, tty: bool, verbosity: int, capture: str, ci: bool) -> bool:
    """Whether to draw: `choice` on or off says so; auto, only where nobody reads the output as a log
    (a terminal, no CI), pytest is not asked to be quiet, and tests' own output is captured (else it
    would land in the middle of the line)."""
    if choice != "auto":
        return choice == "on"
    return tty and not ci and verbosity >= 0 and capture != "no"


@pytest.hookimpl(trylast=True)  # after the terminal reporter and the capture manager exist
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    stream = sys.stdout  # the terminal's, as the reporter took it: capturing is suspended here
    if reporter is None or capture is None or hasattr(config, "workerinput") or not acts(config):
        return
    if not wanted(config.getoption("perf_progress"), stream.isatty(), config.get_verbosity(),
                  config.getoption("capture", "fd"), bool(os.environ.get("CI"))):
        return
    writer = reporter._tw  # its width and how much of the line pytest has written

    def write(text: str) -> None:
        with capture.global_and_fixture_disabled():  # while a test runs, its capture owns the stream
            stream.write(text)
            stream.flush()

    config.stash[_BEFORE] = progress.install(progress.Line(write,
                                                           lambda: writer.fullwidth - writer.width_of_current_line - 1))


def pytest_unconfigure(config: pytest.Config) -> None:
    if _BEFORE in config.stash:  # a session inside a session (pytester) hands the display back
        progress.install(config.stash[_BEFORE])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    callspec = getattr(item, "callspec", None)
    with progress.scope(callspec.id if callspec is not None else item.name):
        yield


# everything pytest writes during a session's tests comes from one of these: the line goes first
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart() -> None:
    progress.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport() -> None:
    progress.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logfinish() -> None:
    progress.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_warning_recorded() -> None:
    progress.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish() -> None:
    progress.clear()
