"""The History: a store of runs (SQLAlchemy Core over SQLite or PostgreSQL) that appends a run in one
transaction, reads a cell's figure over runs as a Series, lists runs, and records accepted changes.

A run is all of it or nothing: its row, its cells and their figures are written in one transaction, so
a writer killed half-way leaves nothing of the run behind, and the runs table's ``cell_count`` says what a
complete run holds. A run id already in the store is not written again (``append`` says so), whoever wrote it.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from difflib import get_close_matches
from typing import Any, Iterable, Iterator

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import URL, Connection, Engine

from ampbench.files.write import plain_problem
from ampbench.history.connect import (
    DEFAULT_BUSY_TIMEOUT,
    WRITE,
    HistoryError,
    history_error,
    is_locked,
    make_engine,
    parse_url,
    shown,
    sqlite_path,
)
from ampbench.history.rows import Acceptance, RunRow, RunSummary, now
from ampbench.history.schema import (
    ACCEPTANCES_TABLE,
    CELLS_TABLE,
    FIGURES_TABLE,
    META_TABLE,
    RUNS_TABLE,
    SCHEMA_VERSION,
    VERSION_KEY,
    SchemaProblem,
    bring_up_to_date,
    check_sound,
    check_version,
    read_version,
)
from ampbench.history.series import Point, Series
from ampbench.printable import plural
from ampbench.verdict import Verdict

FAILING = tuple(v.value for v in Verdict if v.failing)
# what puts runs into a store: a CPU run (a smoke pass) keeps no history unless it is named
MAKES_ONE = ("a `pytest perf/` run on a GPU (on the CPU, one given --perf-history) or `ampbench history import "
             "RUN.json` makes one")
# free disk an SQLite store needs before a run: a full tier's run with its kernel tables takes a few MB,
# and a WAL checkpoint writes the pages again
MIN_FREE_BYTES = 32 * 2**20


class History:
    """One store. Every method opens its own transaction; a database failure is a HistoryError."""

    def __init__(self, engine: Engine, url: URL, busy_timeout: float = DEFAULT_BUSY_TIMEOUT):
        self.engine, self.url, self.busy_timeout = engine, url, busy_timeout
        self.lock_waited = 0.0  # seconds its transactions have waited for another writer's lock, in all

    @property
    def name(self) -> str:
        """The store as messages name it: an SQLite file's path, a server's URL without its password."""
        return shown(self.url)

    def __str__(self) -> str:
        return self.name

    def fail(self, problem: str) -> HistoryError:
        """The error to raise about this store."""
        return HistoryError(f"history {self.name}: {problem}")

    @contextmanager
    def transaction(self, write: bool = False) -> Iterator[Connection]:
        """A connection in a transaction, committed at the end of the block; `write` takes SQLite's write
        lock at its start. A database failure inside is a HistoryError naming the store."""
        began = time.monotonic()
        try:
            with self.engine.connect() as conn:
                conn.execution_options(**{WRITE: write})
                with conn.begin():
                    yield conn
        except SchemaProblem as problem:
            raise self.fail(str(problem)) from None
        except (exc.SQLAlchemyError, OSError) as error:
            if is_locked(error):  # the message says how long the command waited in all, not one try's limit
                self.lock_waited += time.monotonic() - began
            raise history_error(error, self.url, self.busy_timeout, self.lock_waited or None) from None

    def prepare(self, create: bool, read_only: bool = False) -> None:
        """Check the schema version; create an empty store's tables where `create`, migrate an older one
        unless `read_only` (a command that only reads refuses it instead)."""
        with self.transaction() as conn:
            version = read_version(conn)
            check_version(version)
            if version is not None:
                check_sound(conn)
        if version == SCHEMA_VERSION:
            return
        if version is None and not create:
            raise self.fail(f"holds no history yet; {MAKES_ONE}")
        if read_only:
            raise self.fail(f"holds history schema {version}, older than this ampbench's {SCHEMA_VERSION}; this "
                            "command only reads and leaves it as it is: a `pytest perf/` run on a GPU or `ampbench "
                            "history import` migrates it")
        with self.transaction(write=True) as conn:
            bring_up_to_date(conn)  # reads the version again under the lock: another writer may have been first

    def check_writable(self) -> None:
        """HistoryError where a run could not be appended now: a store that takes no writes (a read-only
        file or mount, a standby server), or an SQLite file on a disk with less than MIN_FREE_BYTES free.
        The probe commits the schema version over itself, which every store holds."""
        path = sqlite_path(self.url)
        free = shutil.disk_usage(path.parent).free if path is not None else None
        if free is not None and free < MIN_FREE_BYTES:
            raise self.fail(f"its disk is full ({free / 2**20:.1f} MiB free, and a run may need "
                            f"{MIN_FREE_BYTES / 2**20:.0f} MiB): the run could not be appended")
        with self.transaction(write=True) as conn:
            conn.execute(META_TABLE.update().where(META_TABLE.c.key == VERSION_KEY).values(value=META_TABLE.c.value))

    def release(self) -> None:
        """Close pooled connections: none is held open between the session's start and its end."""
        self.engine.dispose()

    # -- writing ------------------------------------------------------------------------------------

    def append(self, run: RunRow) -> bool:
        """Write `run` in one transaction; False where a run of its id is in the store already."""
        try:
            with self.transaction(write=True) as conn:
                if conn.execute(sa.select(RUNS_TABLE.c.id).where(RUNS_TABLE.c.id == run.id)).first() is not None:
                    return False
                conn.execute(RUNS_TABLE.insert(), [run.values()])
                if run.cells:
                    conn.execute(CELLS_TABLE.insert(), [c.values(run.id) for c in run.cells])
                figures = [f.values(run, c) for c in run.cells for f in c.figures]
                if figures:
                    conn.execute(FIGURES_TABLE.insert(), figures)
        except HistoryError as error:
            # a writer beside this one may have appended the same run between the check and the insert
            try:
                there = self.has_run(run.id)
            except HistoryError as again:  # its message tells the whole wait, where both waited for the lock
                raise (again if self.lock_waited else error) from None
            if there:
                return False
            raise
        return True

    def accept(self, run_id: str, test_id: str | None, reason: str) -> Acceptance:
        """Record that `test_id`'s level (every cell's, where None) restarts at `run_id`, and why."""
        reason = reason.strip()
        if not reason:
            raise self.fail("an acceptance needs a reason")
        with self.transaction(write=True) as conn:
            gpu = self._gpu_of(conn, run_id)
            if test_id is not None:
                self._check_cell(conn, run_id, test_id)
            self._check_acceptable(conn, run_id, test_id)
            accepted_at = now()
            inserted = conn.execute(ACCEPTANCES_TABLE.insert().values(
                gpu=gpu, test_id=test_id, run_id=run_id, reason=reason, accepted_at=accepted_at)).inserted_primary_key
            assert inserted is not None, "an insert of one row has its key"
        return Acceptance(id=inserted[0], gpu=gpu, test_id=test_id, run_id=run_id, reason=reason, when=accepted_at)

    def remove(self, run_ids: Iterable[str]) -> int:
        """Delete the runs `run_ids` with their cells, figures and acceptances, in one transaction; how many
        runs were deleted. For a run that must not be learned from: one whose pytest was ended part-way."""
        ids = list(run_ids)
        if not ids:
            return 0
        with self.transaction(write=True) as conn:
            # each table by name: a store without foreign keys enforced has no cascade to rely on
            for table in (FIGURES_TABLE, CELLS_TABLE, ACCEPTANCES_TABLE):
                conn.execute(table.delete().where(table.c.run_id.in_(ids)))
            return conn.execute(RUNS_TABLE.delete().where(RUNS_TABLE.c.id.in_(ids))).rowcount

    # -- reading ------------------------------------------------------------------------------------

    def series(self, gpu: str, test_id: str, figure: str) -> Series:
        """`figure` of `test_id` over the runs on GPU model `gpu`, oldest first."""
        found = self.series_of(gpu, figure, [test_id])
        return found.get(test_id) or Series(gpu=gpu, test_id=test_id, figure=figure, points=())

    def series_of(self, gpu: str, figure: str, test_ids: Iterable[str] | None = None) -> dict[str, Series]:
        """`figure`'s series of every cell with one on `gpu` (of `test_ids`, where given), read at once:
        a session's references in one transaction, not a round trip to a server per cell."""
        query = (sa.select(FIGURES_TABLE.c.test_id, FIGURES_TABLE.c.run_id, RUNS_TABLE.c.run_at, FIGURES_TABLE.c.value,
                           FIGURES_TABLE.c.low,
                           FIGURES_TABLE.c.high, FIGURES_TABLE.c.verdict, CELLS_TABLE.c.injected,
                           RUNS_TABLE.c.smoke, RUNS_TABLE.c.card_uuid)
                 .join(RUNS_TABLE, RUNS_TABLE.c.id == FIGURES_TABLE.c.run_id)
                 .join(CELLS_TABLE,
                       sa.and_(CELLS_TABLE.c.run_id == FIGURES_TABLE.c.run_id,
                               CELLS_TABLE.c.test_id == FIGURES_TABLE.c.test_id))
                 .where(FIGURES_TABLE.c.gpu == gpu, FIGURES_TABLE.c.figure == figure)
                 .order_by(FIGURES_TABLE.c.test_id, RUNS_TABLE.c.run_at, RUNS_TABLE.c.id))
        # an acceptance names its run (and cell): the series' GPU (a cluster's, for a distributed cell) is
        # not always the run's, which the acceptance keeps
        accepted_query = (sa.select(ACCEPTANCES_TABLE.c.run_id, ACCEPTANCES_TABLE.c.test_id,
                                    ACCEPTANCES_TABLE.c.accepted_at)
                          .where(ACCEPTANCES_TABLE.c.run_id.in_(
                              sa.select(FIGURES_TABLE.c.run_id).where(FIGURES_TABLE.c.gpu == gpu))))
        if test_ids is not None:
            wanted = list(test_ids)
            query = query.where(FIGURES_TABLE.c.test_id.in_(wanted))
            accepted_query = accepted_query.where(sa.or_(ACCEPTANCES_TABLE.c.test_id.in_(wanted),
                                                         ACCEPTANCES_TABLE.c.test_id.is_(None)))
        with self.transaction() as conn:
            rows = conn.execute(query).all()
            accepted = {(r.run_id, r.test_id): r.accepted_at for r in conn.execute(accepted_query)}
        points: dict[str, list[Point]] = {}
        since: dict[str, str] = {}  # by cell: when the acceptance of its current level's run was made
        for r in rows:
            at = accepted.get((r.run_id, r.test_id)) or accepted.get((r.run_id, None))
            restart = at is not None
            if at is not None:
                since[r.test_id] = at
            # a run judged before the change it follows was accepted failed against the level it replaced:
            # the replay holds it to the new level by its value, as any run
            before_accept = not restart and r.test_id in since and r.run_at < since[r.test_id]
            points.setdefault(r.test_id, []).append(Point(
                run_id=r.run_id, when=r.run_at, value=r.value, low=r.low, high=r.high,
                counts=_counts(r, restart or before_accept), restart=restart, card=r.card_uuid, verdict=r.verdict,
                excluded=bool(r.smoke or r.injected)))
        return {t: Series(gpu=gpu, test_id=t, figure=figure, points=tuple(p)) for t, p in points.items()}

    def series_gpus(self) -> list[str]:
        """The GPUs (a GPU model, or N of one for distributed cells) that series are filed under, smoke
        runs left out, sorted."""
        with self.transaction() as conn:
            query = (sa.select(FIGURES_TABLE.c.gpu).join(RUNS_TABLE, RUNS_TABLE.c.id == FIGURES_TABLE.c.run_id)
                     .where(RUNS_TABLE.c.smoke.is_(False)).distinct().order_by(FIGURES_TABLE.c.gpu))
            return list(conn.execute(query).scalars())

    def run_gpus(self) -> list[str]:
        """The GPU models (and "cpu", for smoke runs) the store holds runs on, sorted."""
        with self.transaction() as conn:
            return list(conn.execute(sa.select(RUNS_TABLE.c.gpu).distinct().order_by(RUNS_TABLE.c.gpu)).scalars())

    def check_gpu(self, gpu: str, option: str = "--gpu") -> None:
        """HistoryError where the store holds no run or series on `gpu`, naming those it holds: a misspelt
        GPU would read as "no runs" or "no trends"."""
        held = sorted(set(self.run_gpus()) | set(self.series_gpus()))
        if gpu in held:
            return
        near = get_close_matches(gpu, held, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise self.fail(f"{option} {gpu!r}: no run on that GPU; {hint}it holds runs on "
                        f"{', '.join(repr(g) for g in held) or 'none'}")

    def cells(self, gpu: str) -> list[str]:
        """The test ids with figures on GPU model `gpu`, sorted."""
        with self.transaction() as conn:
            return list(conn.execute(sa.select(FIGURES_TABLE.c.test_id).where(FIGURES_TABLE.c.gpu == gpu).distinct()
                                     .order_by(FIGURES_TABLE.c.test_id)).scalars())

    def runs(self, gpu: str | None = None, limit: int | None = None) -> list[RunSummary]:
        """Summaries of the runs (on GPU model `gpu`, where given), newest first, at most `limit`."""
        query = sa.select(RUNS_TABLE).order_by(RUNS_TABLE.c.run_at.desc(), RUNS_TABLE.c.id.desc()).limit(limit)
        if gpu is not None:
            query = query.where(RUNS_TABLE.c.gpu == gpu)
        failing = (sa.select(CELLS_TABLE.c.run_id, sa.func.count()).where(CELLS_TABLE.c.verdict.in_(FAILING))
                   .group_by(CELLS_TABLE.c.run_id))
        with self.transaction() as conn:
            rows = conn.execute(query).all()
            failed = conn.execute(failing.where(CELLS_TABLE.c.run_id.in_([r.id for r in rows]))).all()
            counts: dict[str, int] = dict(failed)
        return [RunSummary.of_row(r, counts.get(r.id, 0)) for r in rows]

    def run(self, run_id: str) -> RunSummary:
        with self.transaction() as conn:
            row = conn.execute(sa.select(RUNS_TABLE).where(RUNS_TABLE.c.id == run_id)).first()
            if row is None:
                raise self._no_run(conn, run_id)
            failing = conn.execute(sa.select(sa.func.count()).where(CELLS_TABLE.c.run_id == run_id,
                                                                    CELLS_TABLE.c.verdict.in_(FAILING))).scalar_one()
        return RunSummary.of_row(row, failing)

    def record(self, run_id: str, test_id: str) -> dict:
        """The cell's whole record as the run wrote it (its extra_info)."""
        with self.transaction() as conn:
            self._gpu_of(conn, run_id)
            return json.loads(self._check_cell(conn, run_id, test_id))

    def kernels(self, run_id: str, test_id: str) -> list[dict]:
        """The cell's kernel summary (its mode's top kernels, {"name", "ms"} per step); [] where it has none."""
        kernels = self.record(run_id, test_id).get("kernels")
        return [k for k in kernels if isinstance(k, dict)] if isinstance(kernels, list) else []

    def figures_of_run(self, run_id: str) -> dict[str, dict[str, float]]:
        """Each cell's figures in run `run_id`, by test id: {test_id: {figure: value}}; a cell without
        figures is there with none."""
        with self.transaction() as conn:
            cells = conn.execute(sa.select(CELLS_TABLE.c.test_id).where(CELLS_TABLE.c.run_id == run_id)).scalars()
            figures: dict[str, dict[str, float]] = {t: {} for t in cells}
            for r in conn.execute(sa.select(FIGURES_TABLE.c.test_id, FIGURES_TABLE.c.figure, FIGURES_TABLE.c.value)
                                  .where(FIGURES_TABLE.c.run_id == run_id)):
                figures.setdefault(r.test_id, {})[r.figure] = r.value
        return figures

    def counts(self) -> tuple[int, int]:
        """(runs, cells) in the store."""
        with self.transaction() as conn:
            return (conn.execute(sa.select(sa.func.count()).select_from(RUNS_TABLE)).scalar_one(),
                    conn.execute(sa.select(sa.func.count()).select_from(CELLS_TABLE)).scalar_one())

    # -- helpers ------------------------------------------------------------------------------------

    def has_run(self, run_id: str) -> bool:
        with self.transaction() as conn:
            return conn.execute(sa.select(RUNS_TABLE.c.id).where(RUNS_TABLE.c.id == run_id)).first() is not None

    def _gpu_of(self, conn: Connection, run_id: str) -> str:
        gpu = conn.execute(sa.select(RUNS_TABLE.c.gpu).where(RUNS_TABLE.c.id == run_id)).scalar()
        if gpu is None:
            raise self._no_run(conn, run_id)
        return gpu

    def _no_run(self, conn: Connection, run_id: str) -> HistoryError:
        near = get_close_matches(run_id, conn.execute(sa.select(RUNS_TABLE.c.id)).scalars().all(), n=1)
        hint = f" (did you mean {near[0]}?)" if near else "; `ampbench history runs` lists the runs"
        return self.fail(f"no run {run_id!r}{hint}")

    def _check_acceptable(self, conn: Connection, run_id: str, test_id: str | None) -> None:
        """Refuse an acceptance that would change nothing: of a smoke run, whose figures count for nothing,
        or of a run (and cell) accepted already, by itself or with every cell of its run."""
        if conn.execute(sa.select(RUNS_TABLE.c.smoke).where(RUNS_TABLE.c.id == run_id)).scalar():
            raise self.fail(f"run {run_id} is a CPU smoke run: its figures count for nothing, so there is no level to "
                            "accept")
        done = conn.execute(sa.select(ACCEPTANCES_TABLE.c.test_id, ACCEPTANCES_TABLE.c.reason)
                            .where(ACCEPTANCES_TABLE.c.run_id == run_id,
                                   sa.or_(ACCEPTANCES_TABLE.c.test_id.is_(None),
                                          ACCEPTANCES_TABLE.c.test_id == test_id))).first()
        if done is not None:
            what = "every cell of it" if done.test_id is None else f"its cell {done.test_id}"
            raise self.fail(f"run {run_id} is accepted already ({what}: {done.reason!r}); nothing to add")

    def _check_cell(self, conn: Connection, run_id: str, test_id: str) -> str:
        record = conn.execute(sa.select(CELLS_TABLE.c.record).where(CELLS_TABLE.c.run_id == run_id,
                                                               CELLS_TABLE.c.test_id == test_id)).scalar()
        if record is None:
            ids = conn.execute(sa.select(CELLS_TABLE.c.test_id).where(CELLS_TABLE.c.run_id == run_id)).scalars().all()
            near = get_close_matches(test_id, ids, n=1)
            hint = f" (did you mean {near[0]}?)" if near else f" (it holds {plural(len(ids), 'cell')})"
            raise self.fail(f"run {run_id} has no cell {test_id!r}{hint}")
        return record


def _counts(row: Any, accepted: bool) -> bool:
    if row.smoke or row.injected:
        return False
    return accepted or row.verdict not in FAILING


def open_history(url: str, *, create: bool = True, busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
                 read_only: bool = False) -> History:
    """The History at `url` (an SQLAlchemy URL, ``postgresql://`` meaning psycopg 3, or a path to an
    SQLite file), its schema checked: an empty store is created where `create`, an older one migrated
    (refused where `read_only`), a newer one refused. HistoryError, naming the store, where it cannot be
    used."""
    parsed = parse_url(url)
    path = sqlite_path(parsed)
    if path is not None:
        if path.is_dir():
            raise HistoryError(f"history {path}: is a folder; give the SQLite file's path")
        if not path.exists():
            if not create:
                raise HistoryError(f"history {path}: no such file; {MAKES_ONE}, or give --history")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise HistoryError(f"history {path}: {plain_problem(error, path)}") from None
    history = History(make_engine(parsed, busy_timeout, read_only), parsed, busy_timeout)
    history.prepare(create, read_only)
    return history
