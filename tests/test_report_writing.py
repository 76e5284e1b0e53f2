"""Writing a report folder: all or nothing, and never over what a report did not write."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ampbench.report import REPORT_MARKER, write_report
from report_runs import gpu_report_of


@pytest.fixture(scope="module")
def gpu_report():
    return gpu_report_of()


# ---------------------------------------------------------------------------------------------------
# writing: all or nothing


def test_write_report_replaces_an_earlier_report(tmp_path, gpu_report):
    _, files = gpu_report
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old", "stale.png": b"x"})
    write_report(out, files)
    assert (out / "index.html").read_bytes() == files["index.html"]
    assert not (out / "stale.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temp folders left


def test_write_report_refuses_a_folder_that_is_not_a_report(tmp_path, gpu_report):
    _, files = gpu_report
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError):
        write_report(out, files)
    assert (out / "thesis.tex").read_text() == "keep me"


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(self, data):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", boom)
    with pytest.raises(OSError, match="disk full"):
        write_report(tmp_path / "report", {"index.html": b"x", "summary.md": b"y"})
    assert list(tmp_path.iterdir()) == []


def test_write_report_lists_its_files_in_a_marker(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"a", "summary.md": b"b", "speedup.png": b"c"})
    marker = json.loads((out / REPORT_MARKER).read_text())
    assert marker["files"] == ["index.html", "speedup.png", "summary.md"]
    assert sorted(p.name for p in out.iterdir()) == sorted([REPORT_MARKER, *marker["files"]])


@pytest.mark.parametrize("extra", ["notes.txt", "sub/data.csv", "index.html/inside.txt"],
                         ids=["file", "folder", "folder-under-a-report-name"])
def test_write_report_never_deletes_what_it_did_not_write(tmp_path, extra):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    if extra.startswith("index.html/"):
        (out / "index.html").unlink()
    (out / extra).parent.mkdir(parents=True, exist_ok=True)
    (out / extra).write_text("mine")
    with pytest.raises(FileExistsError, match=re.escape(extra.split("/")[0])) as info:
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert str(out) in str(info.value)
    assert (out / extra).read_text() == "mine"


def test_a_folder_without_a_marker_is_not_a_report(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("someone's page")
    (out / "summary.md").write_text("someone's notes")
    with pytest.raises(FileExistsError, match="index.html"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert (out / "index.html").read_text() == "someone's page"


def test_a_failed_write_keeps_the_previous_report(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = Path.write_bytes

    def fail_on_summary(self, data):
        if self.name == "summary.md":
            raise OSError("disk full")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", fail_on_summary)
    with pytest.raises(OSError, match="disk full"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_failed_swap_puts_the_previous_report_back(tmp_path, monkeypatch):
    import os

    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    real = os.replace

    def fail_into_place(src, dst):
        if Path(src).name.endswith(".tmp"):  # the new report into place, after the old one moved aside
            raise OSError("interrupted")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", fail_into_place)
    with pytest.raises(OSError, match="interrupted"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    monkeypatch.undo()
    assert (out / "index.html").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]

