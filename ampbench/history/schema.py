"""The history's tables, its schema version and the migrations from each older version.

- `meta`: the schema version (``schema_version``);
- `runs`: one row per run: when, on which GPU model and card, the software, the suite's revision, the
  label of the stack under test, the host's load, where it came from, how many cells it holds;
- `cells`: one row per cell of a run, with the record's whole extra_info as JSON;
- `figures`: each cell's figures (speedups with their intervals, ratios), with the figure's own verdict
  and the GPU its series is filed under (the run's GPU model; N of them for a distributed cell), so that
  a cell's series reads one index;
- `acceptances`: a moved cell (or every cell of a run) accepted as a new level, with the reason.

A store of an older version is migrated when opened, one step per version, in one transaction; a store
of a newer version is refused. Creating or migrating takes a lock (PostgreSQL's advisory lock, SQLite's
write lock), so that runners opening a new store at once create it once.
"""

from __future__ import annotations

from typing import Callable

import sqlalchemy as sa
from sqlalchemy import Boolean, Column, Float, ForeignKey, ForeignKeyConstraint, Index, Integer, String, Text
from sqlalchemy.engine import Connection

SCHEMA_VERSION = 3
VERSION_KEY = "schema_version"
# pg_advisory_xact_lock's key for creating and migrating the tables: any fixed number of the suite's own
LOCK_KEY = 0x616D7062


def build_metadata(version: int = SCHEMA_VERSION) -> sa.MetaData:
    """The tables as schema `version` has them (older versions: for migrating, and for tests that make
    an old store)."""
    md = sa.MetaData()
    sa.Table("meta", md, Column("key", String(64), primary_key=True), Column("value", Text, nullable=False))
    sa.Table(
        "runs", md,
        Column("id", String(80), primary_key=True),  # the plugin's uuid, or an imported file's content hash
        Column("run_at", String(40), nullable=False),  # ISO-8601 UTC, one width throughout: sorts as time does
        Column("gpu", String(200), nullable=False),  # the GPU model, "cpu" for a smoke run
        Column("gpu_slug", String(200), nullable=False),
        Column("card_uuid", String(100)),
        Column("world_size", Integer, nullable=False),
        Column("smoke", Boolean, nullable=False),
        Column("label", Text),
        Column("suite_revision", Text),
        Column("software", Text, nullable=False),  # JSON: torch, cuda, cudnn, driver, triton, torchao
        Column("host_load", Text),  # JSON: load averages and CPU count at the end of the run
        Column("source", Text, nullable=False),  # "pytest", or the imported file's name
        Column("cell_count", Integer, nullable=False),  # what a complete run holds
        Column("appended_at", String(40), nullable=False),
        Index("runs_by_gpu", "gpu", "run_at"),
    )
    sa.Table(
        "cells", md,
        Column("run_id", String(80), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        Column("test_id", String(500), primary_key=True),
        Column("kind", String(64), nullable=False),
        Column("model", String(200)),
        Column("mode", String(200)),
        Column("verdict", String(32)),
        Column("injected", Boolean, nullable=False),  # slowed on purpose (ampbench.slowdown): no sample
        Column("record", Text, nullable=False),  # the cell's extra_info, JSON
    )
    gpu = [Column("gpu", String(200))] if version >= 2 else []
    by_cell = (Index("figures_by_cell", "gpu", "test_id", "figure") if version >= 2
               else Index("figures_by_test", "test_id", "figure"))
    sa.Table(
        "figures", md,
        Column("run_id", String(80), primary_key=True),
        Column("test_id", String(500), primary_key=True),
        Column("figure", String(64), primary_key=True),
        *gpu,
        Column("value", Float, nullable=False),
        Column("low", Float),
        Column("high", Float),
        Column("verdict", String(32)),
        ForeignKeyConstraint(["run_id", "test_id"], ["cells.run_id", "cells.test_id"], ondelete="CASCADE"),
        by_cell,
    )
    sa.Table(
        "acceptances", md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("gpu", String(200), nullable=False),
        Column("test_id", String(500)),  # None: every cell of the run
        Column("run_id", String(80), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        Column("reason", Text, nullable=False),
        Column("accepted_at", String(40), nullable=False),
        Index("acceptances_by_gpu", "gpu", "test_id"),
    )
    return md


METADATA = build_metadata()
META_TABLE, RUNS_TABLE, CELLS_TABLE, FIGURES_TABLE, ACCEPTANCES_TABLE = (METADATA.tables[n] for n in
                                           ("meta", "runs", "cells", "figures", "acceptances"))


def _figures_know_their_gpu(conn: Connection) -> None:
    """v1 -> v2: a figure carries its run's GPU model, and a cell's series is read from one index on
    (gpu, test_id, figure) where v1 joined every run of the test id."""
    conn.execute(sa.text("ALTER TABLE figures ADD COLUMN gpu VARCHAR(200)"))
    conn.execute(FIGURES_TABLE.update().values(
        gpu=sa.select(RUNS_TABLE.c.gpu).where(RUNS_TABLE.c.id == FIGURES_TABLE.c.run_id).scalar_subquery()))
    conn.execute(sa.text("DROP INDEX figures_by_test"))
    next(i for i in FIGURES_TABLE.indexes if i.name == "figures_by_cell").create(conn)


def _distributed_series_by_cluster(conn: Connection) -> None:
    """v2 -> v3: a distributed cell's figures are filed under its run's N GPUs ('NVIDIA H200 x2',
    ``results.cluster_name``), so that two world sizes never share a series."""
    distributed = sa.exists().where(CELLS_TABLE.c.run_id == FIGURES_TABLE.c.run_id,
                                    CELLS_TABLE.c.test_id == FIGURES_TABLE.c.test_id,
                                    CELLS_TABLE.c.kind == "distributed")
    several = sa.exists().where(RUNS_TABLE.c.id == FIGURES_TABLE.c.run_id, RUNS_TABLE.c.world_size > 1)
    cluster = (sa.select(RUNS_TABLE.c.gpu + " x" + sa.cast(RUNS_TABLE.c.world_size, String))
               .where(RUNS_TABLE.c.id == FIGURES_TABLE.c.run_id).scalar_subquery())
    conn.execute(FIGURES_TABLE.update().where(distributed, several).values(gpu=cluster))


# the step from each version to the next
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _figures_know_their_gpu, 2: _distributed_series_by_cluster}


class SchemaProblem(Exception):
    """Why a store's tables cannot be used by this version (a newer schema, a foreign database)."""


def read_version(conn: Connection) -> int | None:
    """The store's schema version; None where it holds no tables yet."""
    # one look at the catalogue: two would see a store another writer is making half-made
    tables = sa.inspect(conn).get_table_names()
    if "meta" not in tables:
        if tables:
            raise SchemaProblem(f"holds other tables ({', '.join(sorted(tables)[:3])}) and no ampbench schema "
                                "version: not an ampbench history")
        return None
    value = conn.execute(sa.select(META_TABLE.c.value).where(META_TABLE.c.key == VERSION_KEY)).scalar()
    try:
        if value is not None:
            return int(value)
    except (TypeError, ValueError):
        pass
    raise SchemaProblem(f"its schema version is {value!r}, not a number: not an ampbench history") from None


def check_version(version: int | None) -> None:
    if version is not None and version > SCHEMA_VERSION:
        raise SchemaProblem(f"written with history schema {version}; this ampbench reads schema {SCHEMA_VERSION} "
                            "and older: upgrade ampbench to use it")


# figures that are differences, not ratios: the only ones a run may write as zero or below
SIGNED_FIGURES = ("accuracy_delta",)
_LARGEST_FLOAT = 1.7976931348623157e308


def check_sound(conn: Connection) -> None:
    """SchemaProblem where the database opens the store but it cannot be trusted: an SQLite file that fails
    its integrity check (it reads rows wrongly or fails half-way through a command), or a ratio no run
    writes (not finite and positive), which every reader would take the logarithm of."""
    if conn.dialect.name == "sqlite":
        first = conn.exec_driver_sql("PRAGMA integrity_check(1)").scalar()
        if first != "ok":
            raise SchemaProblem(f"the file fails SQLite's integrity check ({first}): it is damaged; move it aside "
                                "(`sqlite3 FILE .recover` may save its runs into a new file)")
    figures = METADATA.tables["figures"]
    bad = conn.execute(sa.select(figures.c.run_id, figures.c.test_id, figures.c.figure, figures.c.value)
                       .where(figures.c.figure.not_in(SIGNED_FIGURES),
                              sa.or_(figures.c.value <= 0, figures.c.value > _LARGEST_FLOAT)).limit(1)).first()
    if bad is not None:
        raise SchemaProblem(f"run {bad.run_id} holds {bad.figure} {bad.value!r} of {bad.test_id}, where a run "
                            "writes a finite positive ratio: the store was edited or damaged; move it aside")


def lock(conn: Connection) -> None:
    """Serialise creating and migrating across writers (SQLite's write transaction is serial already)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.select(sa.func.pg_advisory_xact_lock(LOCK_KEY)))


def bring_up_to_date(conn: Connection) -> int | None:
    """Create the tables of an empty store, or migrate an older one, inside the caller's locked write
    transaction; the version found (None: the store was empty)."""
    lock(conn)
    found = read_version(conn)
    check_version(found)
    if found is None:
        METADATA.create_all(conn)
        conn.execute(META_TABLE.insert().values(key=VERSION_KEY, value=str(SCHEMA_VERSION)))
        return None
    for version in range(found, SCHEMA_VERSION):
        MIGRATIONS[version](conn)
    if found < SCHEMA_VERSION:
        conn.execute(META_TABLE.update().where(META_TABLE.c.key == VERSION_KEY).values(value=str(SCHEMA_VERSION)))
    return found
