"""The commit bisect: in a worktree of the user's repository (``worktree``), the good side's level is
measured (or read from the history), the bad side is checked to regress against it, and ``git bisect
run`` calls the step (``step``) at each commit it picks. Its outcome is the commit git names, with the
figures of the step that found it bad (``outcome``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ampbench
from ampbench.bisect import levels as good_side
from ampbench.bisect.judge import BAD, Level
from ampbench.bisect.measure import CommandMeasurer, SuiteMeasurer, measurer_spec
from ampbench.bisect.outcome import bad_side_why, kept_on_interrupt, step_rows
from ampbench.bisect.step import SCRIPT, progress, run_step, say_removed, steps_taken
from ampbench.children import STOP_GRACE, end_group
from ampbench.worktree import GitError, Worktree, commit_sha, git, repository, subject

_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.MULTILINE)
_CANDIDATES = re.compile(r"first bad commit could be any of:\n((?:[0-9a-f]{40}\n?)+)")


@dataclass
class Plan:
    """What the user asked of a bisect beside the revisions and the measurer."""

    repeats: int = 3  # measurements of the good side that set its level
    tolerance: float = 0.005  # the floor of each level's tolerance
    check_bad: bool = True  # measure the bad side first: a bad side that holds its level names no commit
    history: str | None = None  # a run history to take the levels from instead of measuring
    gpu: str | None = None  # the history's GPU model
    # on a GPU, the good side's baselines recorded for the suite's gate to judge each step by as well
    suite_baseline: bool = False


def tighten(measurer: SuiteMeasurer | CommandMeasurer, levels: dict[str, Level]) -> None:
    """The suite measures each step's cells until their intervals are as tight as the levels' lines ask."""
    if isinstance(measurer, SuiteMeasurer) and levels:
        measurer.tolerance = min(level.tolerance for level in levels.values())


def _levels(plan: Plan, measurer: SuiteMeasurer | CommandMeasurer, wt: Worktree, good: str) -> tuple[dict, list]:
    if plan.history is not None:
        gate = measurer.gate if isinstance(measurer, SuiteMeasurer) else "device"
        found = good_side.history_levels(plan.history, plan.gpu, good_side.keys_of(measurer), plan.tolerance, gate)
        for level in found.values():
            progress(str(level))
        return found, []
    found, runs = good_side.measured_levels(measurer, wt.path, good, plan.repeats, plan.tolerance,
                                            wt.scratch / "baselines" if plan.suite_baseline else None, progress)
    for level in found.values():
        progress(str(level))
    return found, runs


def _run_git_bisect(wt: Worktree, config_path: Path) -> str:
    """``git bisect run`` of the step script in the worktree; its output, streamed as it comes."""
    script = wt.scratch / "step.py"
    script.write_text(SCRIPT.format(root=str(Path(ampbench.__file__).resolve().parents[1])), encoding="utf-8")
    proc = subprocess.Popen(["git", "bisect", "run", sys.executable, str(script), str(config_path)], cwd=wt.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None, "stdout=PIPE gives the process a stdout"
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(("ampbench bisect:", "Bisecting:")) or _FIRST_BAD.match(line):
                print(line.rstrip("\n"), flush=True)
        proc.wait()
    except BaseException:
        end_group(proc, STOP_GRACE)
        raise
    return "".join(lines)


def bisect_commits(repo: Path, good_rev: str, bad_rev: str, measurer: SuiteMeasurer | CommandMeasurer,
                   plan: Plan) -> tuple[dict[str, Any], dict[str, Level]]:
    """Bisect `repo` between `good_rev` and `bad_rev`: (the record of every step and the outcome, the
    levels). GitError where the revisions do not make a bisect."""
    repo = repository(repo)  # git on PATH, and a repository: said first, plainly
    t0 = time.perf_counter()
    good, bad = commit_sha(repo, good_rev), commit_sha(repo, bad_rev)
    if good == bad:
        raise GitError(f"--good {good_rev} and --bad {bad_rev} name the same commit {good[:12]}")
    if subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=repo).returncode != 0:
        raise GitError(f"--good {good_rev} ({good[:12]}) is no ancestor of --bad {bad_rev} ({bad[:12]})")
    count = int(git(repo, "rev-list", "--count", f"{good}..{bad}"))
    progress(f"{count} commits after the good side {good[:12]}, up to the bad side {bad[:12]}; worktree in a "
             "temporary folder")
    record: dict[str, Any] = {"unit": "commit", "good": good, "bad": bad, "cells": list(measurer.cells)}
    with Worktree(repo, good) as wt, kept_on_interrupt(record, wt.scratch / "steps.jsonl", t0):
        say_removed(wt)
        measurer.log_dir = str(wt.scratch / "logs")
        if isinstance(measurer, SuiteMeasurer):
            measurer.tolerance = plan.tolerance
        levels, good_runs = _levels(plan, measurer, wt, good)
        tighten(measurer, levels)
        config = {"measurer": measurer_spec(measurer), "levels": {c: lv.to_json() for c, lv in levels.items()},
                  "steps_file": str(wt.scratch / "steps.jsonl")}
        config_path = wt.scratch / "config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        record.update(levels={c: lv.to_json() for c, lv in levels.items()}, good_runs=good_runs)
        first, why = None, None
        if plan.check_bad:
            wt.checkout(bad)
            code, step = run_step(config, wt.path, bad, subject(repo, bad), kind="bad side")
            if code != BAD:
                why = bad_side_why(bad[:12], step)
        if why is None:
            git(wt.path, "bisect", "start", bad, good)
            output = _run_git_bisect(wt, config_path)
            found = _FIRST_BAD.search(output)
            if found is not None:
                first = {"commit": found[1], "subject": subject(repo, found[1])}
            else:
                candidates = _CANDIDATES.search(output)
                why = (f"only skipped commits are left; the first bad one is one of "
                       f"{', '.join(c[:12] for c in candidates[1].split())}" if candidates
                       else "git bisect run stopped without naming one:\n" + "\n".join(output.splitlines()[-5:]))
        record.update(first_bad=first, why=why, steps=step_rows(steps_taken(config)),
                      seconds=time.perf_counter() - t0)
    return record, levels
