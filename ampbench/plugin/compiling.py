"""A run with compiled cells: how it compiles (``speed.ahead``), from the session's start to its end.

Without --perf-compile-ahead (the CPU smoke pass, or 0) every cache of Inductor is off and each compiled
side compiles cold in its own cell. With it, the run gets an Inductor cache of its own, empty, and once
the cells are collected the compiled sides their speed cells are timed with start compiling in processes
of their own; the first test that times or weighs anything waits for the last of them (a convergence
cell does not: its figures are accuracies), and the cells then read their compiles from that cache. The
cache goes with the session.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from ampbench import progress
from ampbench.speed.ahead import CACHE_ENV, CompileAhead, compile_settings, plan

AHEAD_KEY = pytest.StashKey[CompileAhead]()
CACHE_KEY = pytest.StashKey[tuple[str, str | None]]()  # the run's cache folder, and $TORCHINDUCTOR_CACHE_DIR before
# the kinds of cell (their ``cells`` marker's kind) that run while the sides compile: their figures are
# accuracies, which other processes on the device do not move
BESIDE_COMPILING = ("convergence",)


@pytest.hookimpl(trylast=True)  # after the session's settings are made (``plugin.session``)
def pytest_configure(config: pytest.Config) -> None:
    """Inductor's caches for a run that compiles: off, or the run's own empty folder to compile ahead into."""
    from ampbench.plugin.session import SETTINGS_KEY

    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or True not in settings.compile:
        return
    if not settings.compile_ahead:
        compile_settings(None)
        return
    config.stash[CACHE_KEY] = (tempfile.mkdtemp(prefix="ampbench-inductor-"), os.environ.get(CACHE_ENV))
    compile_settings(config.stash[CACHE_KEY][0])


def _compiled_cells(items: list[pytest.Item]) -> list[tuple[str, str, str]]:
    """(test id, model, mode row) of each compiled speed cell collected."""
    cells = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("compiled_cell") and isinstance(params.get("model_name"), str):
            cells.append((item.name, params["model_name"], params["mode_name"]))
    return cells


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if CACHE_KEY not in config.stash or session.config.option.collectonly:
        return
    from ampbench import device as devices
    from ampbench import models
    from ampbench.modes import compiled, get_mode
    from ampbench.plugin.session import baseline_source_of, perf_settings_of
    from ampbench.speed.ahead import AheadSide

    settings = perf_settings_of(config)
    cells = _compiled_cells(session.items)

    def skips(model: str, mode: str) -> bool:
        spec = models.get_model(model)
        return devices.cell_unsupported_reason(compiled(get_mode(mode)), settings.device, spec,
                                               spec.config_for(settings.smoke)) is not None

    store = baseline_source_of(config)
    costs = {}
    for test_id, model, mode in cells:  # the dearest first: a long compile started last leaves the others idle
        known = (store.figures(test_id) if store is not None else None) or {}
        if isinstance(known.get("compile_s"), (int, float)):
            costs[AheadSide(model, mode)] = float(known["compile_s"])
    sides = plan([(model, mode) for _, model, mode in cells], skips, costs)
    if not sides:
        return
    config.stash[AHEAD_KEY] = CompileAhead(sides, device=str(settings.device), smoke=settings.smoke,
                                           workers=settings.compile_ahead, cache_dir=config.stash[CACHE_KEY][0],
                                           cudnn_benchmark=settings.cudnn_benchmark).start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    ahead = item.config.stash.get(AHEAD_KEY, None)
    if ahead is None or ahead.finished:
        return
    marker = item.get_closest_marker("cells")
    if marker is not None and marker.kwargs.get("kind") in BESIDE_COMPILING:
        return
    ahead.wait(lambda done, count: progress.update(f"compiling ahead: {done} of {count} compiled sides done"))


@pytest.fixture(scope="session")
def compiled_ahead(pytestconfig: pytest.Config) -> CompileAhead | None:
    """The run's compiling ahead, whose cold compile times the compiled cells report; None without it."""
    return pytestconfig.stash.get(AHEAD_KEY, None)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    ahead = config.stash.get(AHEAD_KEY, None)
    if ahead is None:
        return
    if ahead.done < len(ahead.sides):
        ahead.stop()  # the run ended before any cell waited for them
    line = (f"ampbench: {len(ahead.sides)} compiled sides compiled ahead, {ahead.workers} at a time, "
            f"in {ahead.seconds:.0f} s")
    outcomes = ahead.wait()
    failed = sum(outcome.error is not None for outcome in outcomes.values())
    terminalreporter.write_line(line + (f"; {failed} compiled in their cells instead" if failed else ""))
    for side, outcome in outcomes.items():  # each side with -v, the failed ones always
        if outcome.error is not None or config.get_verbosity() > 0:
            terminalreporter.write_line(f"  {side.label}: {outcome.describe()}", yellow=outcome.error is not None)


def pytest_unconfigure(config: pytest.Config) -> None:
    cache = config.stash.get(CACHE_KEY, None)
    if cache is None:
        return
    ahead = config.stash.get(AHEAD_KEY, None)
    if ahead is not None:
        ahead.stop()  # a session stopped early: its processes would still write into the folder
    folder, before = cache
    shutil.rmtree(folder, ignore_errors=True)
    if before is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = before
