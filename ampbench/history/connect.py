"""Where a history lives: the store a user names (a path, ``sqlite:///PATH`` or ``postgresql://...``) made
into an SQLAlchemy engine, and a database's failures made into one-line ``HistoryError``s that name the
store, its password masked.

SQLite runs in WAL mode (readers do not wait for a writer) and a writing transaction takes the write
lock when it begins (``BEGIN IMMEDIATE``), so that two writers queue on the busy timeout instead of one
failing half-way; PostgreSQL needs neither. WAL's ``synchronous = NORMAL`` keeps every committed run
through a killed process and never leaves a half-written one; only a power cut may lose the last runs
committed, and it spares a flush to disk per run. psycopg 3 is PostgreSQL's driver: a plain ``postgresql://``
URL uses it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import URL, Engine, make_url

from ampbench.outputs import memory_store_problem

BACKENDS = ("sqlite", "postgresql")
DEFAULT_BUSY_TIMEOUT = 30.0  # seconds a writer waits for another's lock on an SQLite store
CONNECT_TIMEOUT = 10  # seconds to reach a PostgreSQL server
WRITE = "ampbench_write"  # a connection's execution option: its transactions write
EXAMPLES = "a path, sqlite:///PATH or postgresql://USER:PASSWORD@HOST/DATABASE"


class HistoryError(Exception):
    """A store that cannot be used, or a request it cannot answer: one line naming the store."""


# a scheme a misspelt URL begins with ("postgresql:/db", "sqlite:/x"): read as a path, it would make a
# folder named after the scheme and a store in it
_SCHEME_TYPO = re.compile(r"(sqlite|postgres(ql)?)(\+\w+)?:(?!//)", re.IGNORECASE)
# schemes other tools write for the databases the history runs on
_ALIASES = {"postgres": "postgresql", "pgsql": "postgresql", "psql": "postgresql", "sqlite3": "sqlite"}
_FORMS = {"sqlite": "sqlite:///PATH (three slashes)", "postgresql": "postgresql://USER:PASSWORD@HOST/DATABASE"}


def parse_url(text: str) -> URL:
    """The SQLAlchemy URL of a store: a plain path is an SQLite file, ``postgresql://`` uses psycopg 3.
    HistoryError where `text` is no URL or names a database the history does not run on."""
    if "://" not in text:
        if not text.strip():
            raise HistoryError(f"history store {text!r}: empty; give {EXAMPLES}")
        typo = _SCHEME_TYPO.match(text.strip())
        if typo:
            scheme = _ALIASES.get(typo.group(1).lower(), typo.group(1).lower())
            raise HistoryError(f"history store {text!r}: a database URL needs '://' after its scheme: did you mean "
                               f"{_FORMS[scheme]}? (a path must not begin with '{typo.group(0)}')")
        return URL.create("sqlite", database=str(Path(text).expanduser().absolute()))
    try:
        url = make_url(text)
    except exc.ArgumentError:
        raise HistoryError(f"history store {text!r}: not a database URL; give {EXAMPLES}") from None
    backend = url.get_backend_name()
    if backend in _ALIASES:
        raise HistoryError(f"history store {shown(url)}: the scheme is spelt {_ALIASES[backend]!r}, not "
                           f"{backend!r}: did you mean {_FORMS[_ALIASES[backend]]}?")
    if backend not in BACKENDS:
        raise HistoryError(f"history store {shown(url)}: unknown database {backend!r}; give {EXAMPLES}")
    if backend == "postgresql" and url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    memory = memory_store_problem(text) if backend == "sqlite" else None
    if memory or (backend == "sqlite" and not url.database):
        # a database that dies with its connection: what is appended to it is gone when the command ends
        raise HistoryError(memory or f"history store {text!r}: an in-memory SQLite database keeps nothing; give a "
                                     "file, sqlite:///PATH")
    return url


def store_url(value: str) -> str:
    """argparse's type of a --history URL: checked as a URL, the store opened later."""
    try:
        parse_url(value)
    except HistoryError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def shown(url: URL) -> str:
    """How a store is named in messages: an SQLite file by its path, a server by its URL, password masked."""
    if url.get_backend_name() == "sqlite" and url.database:
        return url.database
    return url.render_as_string(hide_password=True)


def sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite":
        return None
    assert url.database, "parse_url refuses an in-memory SQLite database"
    return Path(url.database)


def make_engine(url: URL, busy_timeout: float, read_only: bool = False) -> Engine:
    """An engine for `url`; HistoryError where its driver is not installed. `read_only`: its connections
    write nothing, not even SQLite's journal mode into an empty file, and read a file on a read-only
    folder or mount."""
    try:
        if url.get_backend_name() == "sqlite":
            return _sqlite_engine(url, busy_timeout, read_only)
        return sa.create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT})
    except (ImportError, exc.NoSuchModuleError) as error:
        raise HistoryError(f"history store {shown(url)}: its driver {url.get_driver_name()!r} is not installed "
                           f"({_first_line(error)}); PostgreSQL runs on psycopg: postgresql://...") from None


WAL_HEADER_BYTES = 32  # a WAL file this short holds no page: nothing beside the store is left to read


class _ReadOnlyStore:
    """The connections of a store its reader may not write (a read-only file, folder or mount). SQLite reads
    a WAL store through a shared-memory file beside it (``-shm``), which it cannot make there. Where the
    store's last writer was killed before it checkpointed, its last runs lie in the ``-wal`` file: reading
    the store as it lies (``immutable``) would silently leave them out, so the store and its WAL are read
    from a copy in a temp folder (removed when the command ends), with a warning."""

    def __init__(self, path: Path, busy_timeout: float):
        self.path, self.busy_timeout = path, busy_timeout
        self.copy: tempfile.TemporaryDirectory | None = None  # made at the first connection that needs it

    def _connect(self, path: Path, query: str) -> sqlite3.Connection:
        uri = path.absolute().as_uri() + (f"?{query}" if query else "")
        return sqlite3.connect(uri, uri=True, timeout=self.busy_timeout, check_same_thread=False)

    def __call__(self) -> sqlite3.Connection:
        if self.copy is not None:
            return self._connect(Path(self.copy.name) / self.path.name, "")
        conn = None
        try:
            conn = self._connect(self.path, "mode=ro")
            conn.execute("PRAGMA schema_version").fetchone()
            return conn
        except sqlite3.OperationalError:
            if conn is not None:
                conn.close()
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            pending = wal.stat().st_size > WAL_HEADER_BYTES
        except OSError:
            pending = False
        if not pending:  # every committed run is in the file: it is read as it lies
            return self._connect(self.path, "immutable=1")
        self.copy = tempfile.TemporaryDirectory(prefix="ampbench-history-")
        copy = Path(self.copy.name) / self.path.name
        shutil.copyfile(self.path, copy)
        shutil.copyfile(wal, copy.with_name(wal.name))
        print(f"ampbench: warning: history {self.path}: its last writer did not checkpoint, so the runs it appended "
              f"last may lie only in {wal.name}, which SQLite cannot replay where this user may not write: read from "
              "a copy of the two (opening the store once with write access folds them in)", file=sys.stderr)
        return self._connect(copy, "")


def _sqlite_engine(url: URL, busy_timeout: float, read_only: bool = False) -> Engine:
    assert url.database, "parse_url refuses an in-memory SQLite database"
    path = Path(url.database)
    if read_only and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        engine = sa.create_engine(url, creator=_ReadOnlyStore(path, busy_timeout))
    else:
        engine = sa.create_engine(url, connect_args={"timeout": busy_timeout})

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record) -> None:
        # the driver's own transaction handling would begin late and deferred: SQLAlchemy's "begin"
        # event below says BEGIN itself
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        if not read_only:  # a store's first writer sets WAL, which the file keeps
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection) -> None:
        # a deferred transaction that writes later can fail on a lock without waiting for it
        immediate = connection.get_execution_options().get(WRITE)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].strip() if text else type(error).__name__


def is_locked(error: BaseException) -> bool:
    """Whether a database failure is SQLite's lock timeout: another writer held the store throughout."""
    cause = getattr(error, "orig", None) or error
    return isinstance(cause, sqlite3.Error) and any(w in _first_line(cause) for w in ("locked", "busy"))


def _seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def problem(error: BaseException, url: URL, busy_timeout: float, waited: float | None = None) -> str:
    """What a database failure says about the store, in a few words; `waited`: how long the command has
    waited for the store's lock in all, where it knows (a command may try more than once)."""
    cause = getattr(error, "orig", None) or error
    text = _first_line(cause)
    if url.password:
        text = text.replace(str(url.password), "***")
    if isinstance(cause, sqlite3.Error):
        if is_locked(error):
            if waited is None:
                return f"locked by another writer for more than {busy_timeout:g} s; try again when it has finished"
            tries = f" (in tries of up to {busy_timeout:g} s each)" if waited > 1.5 * busy_timeout else ""
            return (f"locked by another writer: waited {_seconds(waited)} for it{tries}; try again when it has "
                    "finished")
        if "not a database" in text or "malformed" in text:
            return f"not a usable SQLite database ({text}): a corrupt or foreign file; move it aside"
        if "unable to open" in text:
            return "cannot be opened: its folder is missing or not writable"
        if "readonly" in text:
            return "is read-only: the history cannot be written"
    if isinstance(error, exc.OperationalError) and url.get_backend_name() == "postgresql":
        return f"cannot be reached: {text}"
    return text


def history_error(error: BaseException, url: URL, busy_timeout: float, waited: float | None = None) -> HistoryError:
    return HistoryError(f"history {shown(url)}: {problem(error, url, busy_timeout, waited)}")
