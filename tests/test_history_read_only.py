"""Commands that only read a history write nothing to it: not into an empty file, not a store for input
that holds no run, and a store on a read-only folder or mount is read as it lies."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.history.store import open_history
from history_runs import speed_record, speed_run

CELL = "test_speed[gpt-amp_bf16]"
READS = {"runs": ["history", "runs"], "changes": ["history", "changes"], "explain": ["history", "explain", CELL]}


def _series(path: Path) -> None:
    history = open_history(str(path))
    for i in range(4):
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6 + i / 100)], at=i))
    history.release()


@pytest.mark.parametrize("command", list(READS))
def test_a_read_writes_nothing_into_an_empty_file(tmp_path, capsys, command):
    empty = tmp_path / "history.sqlite"
    empty.touch()
    assert main([*READS[command], "--history", str(empty)]) == EXIT_BAD_INPUT
    assert "holds no history yet" in capsys.readouterr().err
    assert empty.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["history.sqlite"]


def test_an_import_of_nothing_usable_makes_no_store(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    store = tmp_path / "nd" / "a" / "b" / "x.sqlite"
    assert main(["history", "import", str(bad), "--history", str(store)]) == EXIT_BAD_INPUT
    printed = capsys.readouterr()
    assert f"{bad}: is not ampbench output" in printed.err
    assert "no file given is a usable run" in printed.out
    assert not (tmp_path / "nd").exists()


@pytest.mark.parametrize("command", list(READS))
def test_a_store_its_reader_may_not_write_is_read(tmp_path, monkeypatch, capsys, command):
    path = tmp_path / "history.sqlite"
    _series(path)
    before = path.read_bytes()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: False if mode & os.W_OK else real(p, mode, **kw))
    assert main([*READS[command], "--history", str(path)]) == EXIT_OK, capsys.readouterr().err
    assert path.read_bytes() == before


def test_a_store_on_a_read_only_mount_is_read_by_every_read_command(tmp_path, read_only_mount, capsys):
    path = read_only_mount / "history.sqlite"
    _series(tmp_path / "history.sqlite")
    shutil.copyfile(tmp_path / "history.sqlite", path)
    subprocess.run(["mount", "-o", "remount,ro", str(read_only_mount)], check=True)
    for command in READS.values():
        assert main([*command, "--history", str(path)]) == EXIT_OK, capsys.readouterr().err
    assert "run3" in capsys.readouterr().out
    out = tmp_path / "baselines"
    assert main(["baselines", "export", "--history", str(path), "--baseline-dir", str(out)]) == EXIT_OK
    assert [p.name for p in out.iterdir()] == ["nvidia-h100-80gb-hbm3.json"]
