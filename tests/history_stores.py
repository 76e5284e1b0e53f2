"""The stores the history tests run against, as fixtures (``pytest_plugins = ("history_stores",)``):
an SQLite file always, and a real PostgreSQL server:

- the one ``$AMPBENCH_TEST_POSTGRES_URL`` names (a database of it that the tests may create databases
  beside: CREATEDB);
- else a throwaway server of Debian's binaries (``/usr/lib/postgresql/*/bin``, as ``.ci/run`` installs
  them), started for the session on a free loopback port with its socket and data in a temporary
  folder, and stopped at the end; as root it runs as the ``postgres`` user, since PostgreSQL refuses
  to run as root;
- else the PostgreSQL tests skip, saying why (fail, under ``$CI``: CI tests against a real server).

Every test gets a store of its own: a new SQLite file, or a new database on the server.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

POSTGRES_ENV = "AMPBENCH_TEST_POSTGRES_URL"
BINARIES = "/usr/lib/postgresql/*/bin/initdb"
BACKENDS = ("sqlite", "postgresql")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayServer:
    """A PostgreSQL server in a temporary folder, trusting loopback connections, without fsync."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.folder = Path(tempfile.mkdtemp(prefix="ampbench-pg-"))
        self.data, self.log, self.port = self.folder / "data", self.folder / "server.log", _free_port()
        self.user = self._user()

    @staticmethod
    def _user() -> str | None:
        """Whom the server runs as: postgres where this is root, the current user otherwise."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("PostgreSQL refuses to run as root and there is no postgres user to run it as")
        return "postgres"

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    def start(self) -> str:
        if self.user:
            shutil.chown(self.folder, user=self.user)
        steps = [("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"),
                 ("pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log), "-o",
                  f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -F")]
        for step in steps:
            done = self._run(*step)
            if done.returncode != 0:
                log = self.log.read_text(errors="replace") if self.log.exists() else ""
                tail = " | ".join((done.stderr + log).strip().splitlines()[-3:])
                pytest.fail(f"PostgreSQL at {self.bindir} did not start ({step[0]}: {tail}); set {POSTGRES_ENV} "
                            "to a server instead", pytrace=False)
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server():
    """The URL of a PostgreSQL server's maintenance database; skips where there is none to be had."""
    given = os.environ.get(POSTGRES_ENV)
    if given:
        yield given
        return
    found = sorted(glob.glob(BINARIES), key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    if not found:
        why = f"no PostgreSQL: set {POSTGRES_ENV}, or install Debian's postgresql package (.ci/run does)"
        if os.environ.get("CI"):  # in CI the history must be tested against a real server, not skipped
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    server = ThrowawayServer(Path(found[-1]).parent)
    try:
        yield server.start()
    finally:
        server.stop()


def _admin(base: str) -> sa.Engine:
    return sa.create_engine(make_url(base).set(drivername="postgresql+psycopg"), isolation_level="AUTOCOMMIT")


@pytest.fixture
def postgres_url(postgres_server):
    """A new, empty database on the server, dropped after the test."""
    name = f"ampbench_test_{uuid.uuid4().hex[:12]}"
    admin = _admin(postgres_server)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield make_url(postgres_server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def store_url(request, tmp_path) -> str:
    """The URL of an empty store of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    return request.getfixturevalue("postgres_url")

