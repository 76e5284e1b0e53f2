"""``ampbench bisect --resume`` on the CPU, in a real git repository made here: a bisect cut short goes on from
the steps its record holds, measuring none of them again, and a record of another bisect is refused."""

from __future__ import annotations

import json

import pytest

from ampbench.cli import main
from tests.bisect_repos import FROM_FILE, MEASURE, STEP, make_repo, repo_state


@pytest.fixture
def delay_repo(tmp_path):
    files = {"measure.py": MEASURE.format(import_delay=FROM_FILE), "delay.txt": "0\n"}
    shas = make_repo(tmp_path / "repo", 7, 4, files, {"delay.txt": "0.004\n"})
    return tmp_path / "repo", shas


def test_a_resumed_bisect_measures_no_step_again_and_names_the_same_commit(delay_repo, tmp_path, monkeypatch,
                                                                          capsys):
    """A bisect cut short (an interrupt, a job's time limit) leaves its steps in --record; --resume goes on
    from them: the bad side and the steps taken are told to git bisect as they were, not measured again."""
    repo, shas = delay_repo
    before = repo_state(repo)
    full, cut = tmp_path / "full.json", tmp_path / "cut.json"
    args = ["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--step-command", STEP,
            "--tolerance", "0.3"]
    assert main([*args, "--record", str(full)]) == 0, capsys.readouterr().out
    record = json.loads(full.read_text())
    taken = record["steps"][:2]  # the bad side and the first step, as an interrupted run leaves them
    cut.write_text(json.dumps({**record, "steps": taken, "first_bad": None, "interrupted": True}))
    sides = tmp_path / "sides.log"
    monkeypatch.setenv("SIDES_LOG", str(sides))
    capsys.readouterr()
    assert main([*args, "--record", str(cut), "--resume"]) == 0
    out = capsys.readouterr().out
    assert "going on from 2 steps of the record, none measured again" in out
    assert f"first bad commit: {shas[4]} 'change 4 (the slow one)'" in out
    resumed = json.loads(cut.read_text())
    assert resumed["steps"][:2] == taken, "the record keeps the steps it went on from, first"
    measured = {line.rsplit(" ", 2)[2] for line in sides.read_text().splitlines()} - {"0"}
    later = [s for s in resumed["steps"][2:] if s["kind"] == "step"]
    assert measured == {str(shas.index(s["commit"])) for s in later}, "only the later steps' commits are measured"
    assert all(s["commit"] != taken[1]["commit"] for s in later) and later[0]["step"] == 2
    assert repo_state(repo) == before


def test_resume_refuses_another_bisects_record(delay_repo, tmp_path, capsys):
    repo, shas = delay_repo
    record = tmp_path / "b.json"
    args = ["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--step-command", STEP,
            "--record", str(record), "--resume"]
    assert main(args) == 2 and "--resume: no record at" in capsys.readouterr().err
    record.write_text(json.dumps({"unit": "commit", "good": shas[1], "bad": shas[-1], "cells": ["command"],
                                  "steps": []}))
    assert main(args) == 2
    assert f"--resume: the record is of another bisect: its good {shas[1]}" in capsys.readouterr().err
