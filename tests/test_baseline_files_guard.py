"""Baseline files are written where they belong and nowhere else: `baselines export` refuses a run whose
gpu_slug its GPU's name does not make (one outside the folder, or another GPU's file), a baseline store
refuses a stem that is no file name; and a writer's temp file never outlives it for long: removed on any
exception, and one a killed writer left is removed by the next write once it is an hour old."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from ampbench.baselines.file import BaselineError, BaselineFile
from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.files import write
from ampbench.files.write import STALE_TEMP_S, write_atomic
from ampbench.history.store import open_history
from history_runs import speed_record, speed_run

A100_FILE = "nvidia-a100-sxm4-80gb.json"


def _store(path: Path, slug: str | None = None) -> Path:
    """A history of four runs of one cell; `slug`: the stem its runs carry, as a store an earlier version
    filled may hold one."""
    history = open_history(str(path))
    for i in range(4):
        run = speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6 + i / 100)], at=i)
        history.append(dataclasses.replace(run, gpu_slug=slug) if slug is not None else run)
    history.release()
    return path


def _files(folder: Path) -> list[str]:
    """Every file under `folder` but the store's own (its WAL and shared memory come and go)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.name.startswith("h.sqlite"))


@pytest.mark.parametrize("slug", ["../outside", "ABSOLUTE", "nvidia-a100-sxm4-80gb"])
def test_export_refuses_a_slug_its_gpu_does_not_make(tmp_path, capsys, slug):
    slug = str(tmp_path / "absolute") if slug == "ABSOLUTE" else slug
    store = _store(tmp_path / "h.sqlite", slug)
    folder = tmp_path / "baselines"
    folder.mkdir()
    other = folder / A100_FILE
    other.write_text("another GPU's file\n")
    before = _files(tmp_path)
    assert main(["baselines", "export", "--history", str(store), "--baseline-dir", str(folder)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"run run3 (pytest): its gpu_slug {slug!r}" in err and "'nvidia-h100-80gb-hbm3'" in err
    assert _files(tmp_path) == before and other.read_text() == "another GPU's file\n"


def test_export_writes_the_file_its_gpus_name_makes(tmp_path, capsys):
    store = _store(tmp_path / "h.sqlite")
    folder = tmp_path / "baselines"
    assert main(["baselines", "export", "--history", str(store), "--baseline-dir", str(folder)]) == EXIT_OK
    assert [p.name for p in folder.iterdir()] == ["nvidia-h100-80gb-hbm3.json"]
    assert "1 entry written from the history" in capsys.readouterr().out


@pytest.mark.parametrize("stem", ["../x", "/etc/x", "a/b", "", "UPPER", "x.json"])
def test_a_baseline_store_refuses_a_stem_that_is_no_file_name(tmp_path, stem):
    with pytest.raises(BaselineError, match="is no baseline file's stem"):
        BaselineFile.open(tmp_path, "NVIDIA H100 80GB HBM3", stem)


# -- a writer's temp file ---------------------------------------------------------------------------------

def _temps(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_a_write_stopped_part_way_leaves_no_temp_file(tmp_path, monkeypatch, stop):
    target = tmp_path / "nvidia-h100-80gb-hbm3.json"
    write_atomic(target, {"first": 1})

    def stopped(fd):
        raise stop()

    monkeypatch.setattr(os, "fsync", stopped)
    with pytest.raises(stop):
        write_atomic(target, {"second": 2})
    assert _temps(tmp_path) == [] and json.loads(target.read_text()) == {"first": 1}


def test_a_killed_writers_temp_file_is_removed_by_the_next_write_once_stale(tmp_path):
    target = tmp_path / "nvidia-h100-80gb-hbm3.json"
    stale, fresh = tmp_path / f".{target.name}.abcd_123.tmp", tmp_path / f".{target.name}.efgh_456.tmp"
    unrelated = [tmp_path / f".{target.name}.tmp", tmp_path / ".other.json.abcd_123.tmp"]
    for path in (stale, fresh, *unrelated):
        path.write_text("x" * 1000)
    old = time.time() - STALE_TEMP_S - 60
    for path in (stale, *unrelated):
        os.utime(path, (old, old))
    write_atomic(target, {"entries": {}})
    # the stale one is gone; a fresh one may be another writer's, still writing; others are not its own
    assert _temps(tmp_path) == sorted(p.name for p in (fresh, *unrelated))
    assert write.remove_stale_temps(target, now=time.time() + 2 * STALE_TEMP_S) == [fresh]
