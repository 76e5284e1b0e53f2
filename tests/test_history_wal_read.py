"""A store whose last writer was killed before it checkpointed holds its last runs in its ``-wal`` file.
A reader that may not write beside it (a read-only folder or mount) cannot replay them in place: it
reads them from a copy of the store and its WAL, saying so, rather than showing the older runs alone."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_OK
from ampbench.history import connect

ROOT = Path(__file__).resolve().parents[1]

# two runs checkpointed into the file, three more left in its WAL by a writer killed before it checkpoints
KILLED_WRITER = textwrap.dedent("""
    import os, signal, sqlite3, sys
    from history_runs import speed_record, speed_run
    from ampbench.history.store import open_history

    path = sys.argv[1]
    history = open_history(path)
    for i in range(5):
        if i == 2:
            checkpoint = sqlite3.connect(path)
            checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            checkpoint.close()
        with history.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_autocheckpoint = 0")
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6 + i / 100)], at=i))
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.fixture(scope="module")
def killed_store(tmp_path_factory) -> Path:
    """A store of five runs whose last three are only in its WAL, without the shared-memory file."""
    path = tmp_path_factory.mktemp("killed") / "history.sqlite"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    Path(f"{path}-shm").unlink()
    as_it_lies = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True)
    assert as_it_lies.execute("SELECT count(*) FROM runs").fetchone() == (2,)  # the other three: in the WAL only
    as_it_lies.close()
    return path


def _copy(store: Path, folder: Path) -> Path:
    folder.mkdir(exist_ok=True)
    shutil.copyfile(store, folder / store.name)
    shutil.copyfile(f"{store}-wal", folder / f"{store.name}-wal")
    return folder / store.name


def _listed(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


@pytest.fixture
def no_shared_memory(monkeypatch):
    """SQLite's read-only open of a WAL store failing as it does where the shared-memory file cannot be
    made (a read-only folder), for a reader that may not write there."""
    real_connect, real_access = connect._ReadOnlyStore._connect, os.access

    def connect_(self, path, query):
        conn = real_connect(self, path, query)
        if query == "mode=ro":
            conn.close()
            return real_connect(self, path.with_name("no-such-folder") / "x", "mode=ro")  # fails on first use
        return conn

    monkeypatch.setattr(connect._ReadOnlyStore, "_connect", connect_)
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real_access(p, mode, **kw))


def test_the_runs_in_the_wal_are_read_from_a_copy_with_a_warning(killed_store, tmp_path, no_shared_memory, capsys):
    store = _copy(killed_store, tmp_path / "store")
    before = {p.name: p.read_bytes() for p in store.parent.iterdir()}
    assert main(["history", "runs", "--history", str(store)]) == EXIT_OK
    printed = capsys.readouterr()
    assert _listed(printed.out) == ["run4", "run3", "run2", "run1", "run0"]
    assert "its last writer did not checkpoint" in printed.err and f"may lie only in {store.name}-wal" in printed.err
    # the store and its WAL are left as they were, and the copy is gone
    assert {p.name: p.read_bytes() for p in store.parent.iterdir()} == before


def test_a_store_without_pending_runs_is_read_as_it_lies_without_a_word(killed_store, tmp_path, no_shared_memory,
                                                                        capsys):
    store = _copy(killed_store, tmp_path / "store")
    folded = sqlite3.connect(store)  # a writer folds the WAL into the file
    folded.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    folded.close()
    assert main(["history", "runs", "--history", str(store)]) == EXIT_OK
    printed = capsys.readouterr()
    assert _listed(printed.out) == ["run4", "run3", "run2", "run1", "run0"] and printed.err == ""


def test_a_read_only_mount_shows_every_run_of_a_killed_writer(killed_store, read_only_mount, capsys):
    store = _copy(killed_store, read_only_mount)
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_mount)], check=True)
    assert main(["history", "runs", "--history", str(store)]) == EXIT_OK
    printed = capsys.readouterr()
    assert _listed(printed.out) == ["run4", "run3", "run2", "run1", "run0"]
    assert "its last writer did not checkpoint" in printed.err
