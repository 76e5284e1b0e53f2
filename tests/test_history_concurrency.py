"""The history under several writers and a killed one, on SQLite and a real PostgreSQL server: writer
processes appending at once into a store none of them has made yet lose no run and double none, and a
writer killed in the middle of an append leaves nothing of that run, to a reader then or after."""

from __future__ import annotations

import collections
import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from ampbench.history.schema import CELLS_TABLE, FIGURES_TABLE, RUNS_TABLE
from ampbench.history.store import open_history
from history_runs import cells_of, speed_run

pytest_plugins = ("history_stores",)

WRITERS, RUNS_EACH, SHARED, CELLS_EACH = 8, 50, 10, 4
# forked: each writer has the parent's modules already imported, so they start at once and cheaply
FORK = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
pytestmark = pytest.mark.skipif(FORK is None, reason="needs fork() to start writer processes")


def _write(url: str, worker: int, start, folder: Path) -> None:
    """A writer process: its own runs and the shared ones, each appended as it comes; the ids it appended
    into folder/appended-<worker>."""
    history = open_history(url)  # every writer makes the empty store's tables at once
    ids = [f"w{worker}-{k}" for k in range(RUNS_EACH)]
    for k in range(SHARED):  # runs every writer appends, spread among its own
        ids.insert(k * 5, f"shared-{k}")
    start.wait(timeout=60)
    appended = [i
                for n, i in enumerate(ids) if history.append(speed_run(i, cells_of(CELLS_EACH), at=worker * 1000 + n))]
    (folder / f"appended-{worker}").write_text("\n".join(appended))


def _stall_then_append(url: str, cells: int, stalled) -> None:
    """A writer that stops in the middle of its append, its run's row and cells written and its figures
    begun, until it is killed."""
    history = open_history(url)

    def stall(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith("INSERT INTO FIGURES"):
            stalled.set()
            time.sleep(600)

    sa.event.listen(sa.engine.Engine, "after_cursor_execute", stall)
    history.append(speed_run("killed", cells_of(cells), at=1))


def incomplete_runs(history) -> list[str]:
    """Runs whose cells or figures are not all there."""
    cells = sa.select(CELLS_TABLE.c.run_id, sa.func.count().label("n")).group_by(CELLS_TABLE.c.run_id).subquery()
    query = (sa.select(RUNS_TABLE.c.id).outerjoin(cells, cells.c.run_id == RUNS_TABLE.c.id)
             .where(sa.func.coalesce(cells.c.n, 0) != RUNS_TABLE.c.cell_count))
    orphans = sa.select(FIGURES_TABLE.c.run_id).where(FIGURES_TABLE.c.run_id.not_in(sa.select(RUNS_TABLE.c.id)))
    with history.transaction() as conn:
        return list(conn.execute(query).scalars()) + list(conn.execute(orphans).scalars())


def test_concurrent_writers_lose_nothing_and_double_nothing(store_url, tmp_path):
    start = FORK.Barrier(WRITERS + 1)
    writers = [FORK.Process(target=_write, args=(store_url, i, start, tmp_path)) for i in range(WRITERS)]
    for w in writers:
        w.start()
    start.wait(timeout=60)
    for w in writers:
        w.join(timeout=120)
    assert [w.exitcode for w in writers] == [0] * WRITERS
    appended = collections.Counter(i for w in range(WRITERS) for i in (tmp_path / f"appended-{w}").read_text().split())
    expected = {f"w{i}-{k}" for i in range(WRITERS) for k in range(RUNS_EACH)} | {f"shared-{k}" for k in range(SHARED)}
    assert set(appended) == expected and max(appended.values()) == 1, "each run appended by exactly one writer"
    history = open_history(store_url)
    assert history.counts() == (len(expected), len(expected) * CELLS_EACH)
    with history.transaction() as conn:
        assert (conn.execute(sa.select(sa.func.count()).select_from(FIGURES_TABLE)).scalar()
                == len(expected) * CELLS_EACH * 2)
    assert incomplete_runs(history) == []


def test_a_writer_killed_mid_append_leaves_nothing_of_its_run(store_url):
    history = open_history(store_url)
    history.append(speed_run("before", cells_of(3)))
    history.release()  # no connection of this process's carried into the writer
    stalled = FORK.Event()
    writer = FORK.Process(target=_stall_then_append, args=(store_url, 400, stalled))
    writer.start()
    try:
        assert stalled.wait(timeout=60), f"the writer never reached its figures (exit code {writer.exitcode})"
        # a reader meanwhile sees the store as it was: none of the run being written
        assert history.counts() == (1, 3)
    finally:
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(timeout=30)
    assert writer.exitcode == -signal.SIGKILL
    after = open_history(store_url)
    assert after.counts() == (1, 3) and [r.id for r in after.runs()] == ["before"]
    assert incomplete_runs(after) == []
    # the killed writer's lock went with it: the same run goes in whole
    assert after.append(speed_run("killed", cells_of(400), at=1)) is True
    assert after.counts() == (2, 403) and incomplete_runs(after) == []
