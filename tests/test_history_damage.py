"""A store the database opens but that cannot be trusted (an SQLite file failing its integrity check, a
ratio no run writes): every command that opens it says so in one line naming the store, and nothing is
appended to it."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT
from ampbench.history.connect import parse_url
from ampbench.history.store import HistoryError, open_history
from history_runs import speed_record, speed_run

pytest_plugins = ("history_stores",)

DATA = Path(__file__).parent / "data"
CELL = "test_speed[gpt-amp_bf16]"
READERS = {"runs": ["history", "runs"], "changes": ["history", "changes"], "explain": ["history", "explain", CELL],
           "import": ["history", "import", str(DATA / "h100_speed_device.json")]}


def _series(url: str) -> None:
    history = open_history(url)
    for i in range(4):
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6 + i / 100)], at=i))
    history.release()


def _sql(url: str, statement: str) -> None:
    engine = sa.create_engine(parse_url(url))
    with engine.begin() as conn:
        conn.exec_driver_sql(statement)
    engine.dispose()


def _runs(url: str) -> int:
    engine = sa.create_engine(parse_url(url))
    with engine.connect() as conn:
        count = conn.exec_driver_sql("SELECT count(*) FROM runs").scalar()
    engine.dispose()
    return count


@pytest.mark.parametrize("value", ["-5.6", "0", "'Infinity'"])
@pytest.mark.parametrize("command", list(READERS))
def test_a_ratio_no_run_writes_is_a_one_line_error_naming_the_store(store_url, capsys, command, value):
    _series(store_url)
    if value == "'Infinity'" and store_url.startswith("sqlite"):
        value = "9e999"  # SQLite's spelling of infinity
    _sql(store_url, f"UPDATE figures SET value = {value} WHERE run_id = 'run2' AND figure = 'device_speedup'")
    assert main([*READERS[command], "--history", store_url]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ampbench: error: history "), err
    assert "run run2 holds device_speedup " in err and f"of {CELL}, where a run writes a finite positive ratio" in err
    assert _runs(store_url) == 4  # the import appended nothing


def test_an_accuracy_difference_may_be_negative(store_url):
    _series(store_url)
    _sql(store_url, "UPDATE figures SET figure = 'accuracy_delta', value = -0.01 WHERE run_id = 'run2' "
         "AND figure = 'device_speedup'")
    assert open_history(store_url, create=False, read_only=True).counts() == (4, 4)


def _damage(path: Path) -> None:
    """An index whose entries no longer sort as its schema says: SQLite opens the file and reads rows
    wrongly (a cell's series comes back empty), and only its integrity check finds it."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX figures_by_cell ON figures (figure, gpu, test_id)' "
                 "WHERE name = 'figures_by_cell'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("command", list(READERS))
def test_a_file_failing_its_integrity_check_is_a_one_line_error(tmp_path, capsys, command):
    path = tmp_path / "history.sqlite"
    _series(str(path))
    _damage(path)
    before = path.read_bytes()
    assert main([*READERS[command], "--history", str(path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == (f"ampbench: error: history {path}: the file fails SQLite's integrity check (row 1 missing from "
                   "index figures_by_cell): it is damaged; move it aside (`sqlite3 FILE .recover` may save its "
                   "runs into a new file)\n"), err
    assert path.read_bytes() == before


def test_a_run_is_not_appended_to_a_damaged_file(tmp_path):
    path = tmp_path / "history.sqlite"
    _series(str(path))
    _damage(path)
    with pytest.raises(HistoryError, match="fails SQLite's integrity check"):
        open_history(str(path), create=True)  # how the plugin opens it at the session's start
    shutil.copyfile(path, tmp_path / "copy.sqlite")
    assert _runs(f"sqlite:///{tmp_path / 'copy.sqlite'}") == 4
