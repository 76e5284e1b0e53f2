"""A pytest plugin for GPU sessions: one line per test as it finishes, with its wall time (setup,
call and teardown together) and the session's elapsed time, flushed at once so a run cut off at a
device call's time limit still says where the time went.

    python3 -m pytest perf/ -p scripts.progress_plugin
"""

from __future__ import annotations

import sys
import time

import pytest

_START = [0.0]


def pytest_sessionstart(session: pytest.Session) -> None:
    _START[0] = time.perf_counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    t0 = time.perf_counter()
    yield
    now = time.perf_counter()
    # through the terminal reporter: pytest captures the process's own stdout and stderr meanwhile
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    line = f"[progress] {now - _START[0]:7.1f}s {now - t0:6.1f}s {item.nodeid}"
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line, flush=True)
    else:
        sys.__stderr__.write(line + "\n")
