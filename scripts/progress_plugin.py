"""A pytest plugin for GPU runs: one line per test as it finishes, with its wall time (setup,
call and teardown together) and the elapsed time since the run started, flushed at once so a run cut off at a
time limit still says where the time went.

    python3 -m pytest perf/ -p scripts.progress_plugin
"""

from __future__ import annotations

import sys
import time

import pytest

_START = [0.0]


def pytest_sessionstart(session: pytest.Session) -> None:
    _START[0] = time.perf_counter()


def _figures(item: pytest.Item) -> str:
    """The headline figures of an ampbench cell, from its benchmark's extra_info, if it got that far."""
    bench = (getattr(item, "funcargs", None) or {}).get("benchmark")
    info = getattr(bench, "extra_info", None) or {}
    if "speedup" in info:
        second = info.get("confirm_speedup")
        return (f" speedup {info['speedup']:.3f} [{info['speedup_low']:.3f},{info['speedup_high']:.3f}] "
                f"n={info['rounds']} prep {info.get('prepare_s', 0):.1f}s {info['verdict']}"
                + (f" confirm {second:.3f}" if second else ""))
    keys = ("memory_ratio", "max_batch", "max_batch_ratio", "search_seconds", "cell_seconds", "accuracy",
            "loader_ratio", "input_bound", "verdict", "search")
    return "".join(f" {k}={info[k]:.4g}" if isinstance(info[k], float) else f" {k}={info[k]}" for k in keys if k in info)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    item._ampbench_figures = _figures(item)  # the fixtures, and extra_info with them, go in teardown


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    t0 = time.perf_counter()
    yield
    now = time.perf_counter()
    # through the terminal reporter: pytest captures the process's own stdout and stderr meanwhile
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    line = f"[progress] {now - _START[0]:7.1f}s {now - t0:6.1f}s {item.nodeid}" + getattr(item, "_ampbench_figures", "")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line, flush=True)
    else:
        sys.__stderr__.write(line + "\n")
