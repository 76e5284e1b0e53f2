"""The commit bisect: in a worktree of the user's repository (``ampbench.worktree``), the bad side is checked
to regress against the good side, and ``git bisect run`` calls the step (``step``) at each commit it picks.
The good side is a second worktree, at the good commit, kept for the whole bisect: every step is paired
against it (``pairs``); with ``--history``, a step is held to the history's level instead. Both worktrees
are removed however the bisect ends. Its outcome is the commit git names, with the figures of the step
that found it bad (``outcome``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ampbench
from ampbench.ab.paired import MAX_PAIRS
from ampbench.bisect import levels as good_side
from ampbench.bisect.judge import BAD, Level
from ampbench.bisect.measure import CommandMeasurer, SuiteMeasurer, measurer_spec
from ampbench.bisect.outcome import bad_side_why, kept_on_interrupt, step_rows
from ampbench.bisect.pairs import GoodSide, pair_rule
from ampbench.bisect.step import SCRIPT, progress, run_step, say_removed, steps_taken
from ampbench.children import STOP_GRACE, end_group
from ampbench.worktree import GitError, Worktree, commit_sha, git, repository, subject

_FIRST_BAD = re.compile(r"^([0-9a-f]{40}) is the first bad commit", re.MULTILINE)
_CANDIDATES = re.compile(r"first bad commit could be any of:\n((?:[0-9a-f]{40}\n?)+)")


@dataclass
class Plan:
    """What the user asked of a bisect beside the revisions and the measurer."""

    tolerance: float = 0.005  # the least drop that is bad (the speedup's paired rule's own where wider)
    check_bad: bool = True  # measure the bad side first: a bad side that does not regress names no commit
    history: str | None = None  # a run history to take the levels from, instead of pairing with the good side
    gpu: str | None = None  # the history's GPU model
    max_pairs: int = MAX_PAIRS  # the most pairs a step's undecided cell takes
    # the record of an earlier run of the same bisect (--resume): its steps are taken as they were, not measured
    resume: dict[str, Any] | None = None


def resumed_steps(resume: dict[str, Any] | None, good: str, bad: str, cells: list[str]) -> list[dict]:
    """The steps of `resume`, an earlier record of this bisect (the same good and bad commits and cells), to
    go on from; GitError saying how it differs where it is another's."""
    if resume is None:
        return []
    if resume.get("unit") != "commit":
        raise GitError("--resume goes on from a commit bisect's record; this one is of "
                       f"{resume.get('unit') or 'no known'} bisect")
    theirs = {"good": resume.get("good"), "bad": resume.get("bad"), "cells": resume.get("cells")}
    ours = {"good": good, "bad": bad, "cells": cells}
    differ = [f"{k} {str(theirs[k])[:40]} (now {str(ours[k])[:40]})" for k in ours if theirs[k] != ours[k]]
    if differ:
        raise GitError(f"--resume: the record is of another bisect: its {', '.join(differ)}")
    steps = resume.get("steps")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and {"kind", "commit", "answer"} <= set(s)
                                               for s in steps):
        raise GitError("--resume: the record holds no readable steps")
    return steps


def _marked(wt: Worktree, steps: list[dict]) -> str:
    """Tell git bisect the answers the resumed `steps` gave (good, bad or skip) before it picks a commit; what
    it said to the last, which names the first bad commit where those answers already find it."""
    said = ""
    for step in steps:
        if step["kind"] == "step":
            said = git(wt.path, "bisect", step["answer"], step["commit"])
    return said


def tighten(measurer: SuiteMeasurer | CommandMeasurer, levels: dict[str, Level]) -> None:
    """The suite measures each held step's cells until their intervals are as tight as the levels' lines ask."""
    if isinstance(measurer, SuiteMeasurer) and levels:
        measurer.tolerance = min(level.tolerance for level in levels.values())


def prepare(measurer: SuiteMeasurer | CommandMeasurer, plan: Plan, scratch: Path) -> None:
    """Logs in the scratch folder; the suite judges nothing itself (an empty baseline folder, as each side
    of an A/B run) and takes rounds until its interval is as tight as the bisect's tolerance asks."""
    measurer.log_dir = str(scratch / "logs")
    if isinstance(measurer, SuiteMeasurer):
        empty = scratch / "no-baselines"
        empty.mkdir(parents=True, exist_ok=True)
        measurer.baseline_dir = str(empty)
        measurer.tolerance = pair_rule(plan.tolerance).tolerance


def history_config(plan: Plan, measurer: SuiteMeasurer | CommandMeasurer) -> dict[str, Any]:
    """The steps' configuration of a bisect held to the history's levels (read, and said, here)."""
    assert plan.history is not None, "a bisect without --history pairs its steps"
    gate = measurer.gate if isinstance(measurer, SuiteMeasurer) else "device"
    levels = good_side.history_levels(plan.history, plan.gpu, good_side.keys_of(measurer), plan.tolerance, gate)
    for level in levels.values():
        progress(str(level))
    tighten(measurer, levels)
    return {"levels": {c: lv.to_json() for c, lv in levels.items()}}


def paired_config(plan: Plan, good: GoodSide) -> dict[str, Any]:
    """The steps' configuration of a bisect paired against `good`."""
    rule = pair_rule(plan.tolerance)
    progress(f"each step paired against the good side {good.label} ({good.tree}), on the same card, at most "
             f"{plan.max_pairs} pairs a step; tolerance {rule.tolerance:.2%}")
    return {"good": asdict(good), "tolerance": plan.tolerance, "max_pairs": plan.max_pairs}


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
                   plan: Plan) -> dict[str, Any]:
    """Bisect `repo` between `good_rev` and `bad_rev`: the record of every step and the outcome. GitError
    where the revisions do not make a bisect."""
    repo = repository(repo)  # git on PATH, and a repository: said first, plainly
    t0 = time.perf_counter()
    good, bad = commit_sha(repo, good_rev), commit_sha(repo, bad_rev)
    if good == bad:
        raise GitError(f"--good {good_rev} and --bad {bad_rev} name the same commit {good[:12]}")
    if subprocess.run(["git", "merge-base", "--is-ancestor", good, bad], cwd=repo).returncode != 0:
        raise GitError(f"--good {good_rev} ({good[:12]}) is no ancestor of --bad {bad_rev} ({bad[:12]})")
    count = int(git(repo, "rev-list", "--count", f"{good}..{bad}"))
    progress(f"{count} commits after the good side {good[:12]}, up to the bad side {bad[:12]}; worktrees in "
             "temporary folders")
    record: dict[str, Any] = {"unit": "commit", "good": good, "bad": bad, "cells": list(measurer.cells)}
    with ExitStack() as stack:
        wt = stack.enter_context(Worktree(repo, good))
        stack.enter_context(kept_on_interrupt(record, wt.scratch / "steps.jsonl", t0))
        say_removed(wt)
        prepare(measurer, plan, wt.scratch)
        if plan.history is not None:
            config = history_config(plan, measurer)
            record.update(levels=config["levels"])
        else:  # the good side's tree for the whole bisect, removed with the other (the stack closes both)
            good_tree = stack.enter_context(Worktree(repo, good))
            config = paired_config(plan, GoodSide(str(good_tree.path), None, good[:12]))
            record.update(max_pairs=plan.max_pairs, tolerance=pair_rule(plan.tolerance).tolerance)
        config.update(measurer=measurer_spec(measurer), steps_file=str(wt.scratch / "steps.jsonl"))
        config_path = wt.scratch / "config.json"
        config_path.write_text(json.dumps(config), encoding="utf-8")
        resumed = resumed_steps(plan.resume, good, bad, list(measurer.cells))
        if resumed:  # its steps go first in the steps file: the record keeps them, later steps count on from them
            (wt.scratch / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in resumed), encoding="utf-8")
            progress(f"going on from {len(resumed)} steps of the record, none measured again")
        first, why = None, None
        if plan.check_bad and not any(s["kind"] == "bad side" and s["answer"] == "bad" for s in resumed):
            wt.checkout(bad)
            code, step = run_step(config, wt.path, bad, subject(repo, bad), kind="bad side")
            if code != BAD:
                why = bad_side_why(bad[:12], step)
        if why is None:
            git(wt.path, "bisect", "start", bad, good)
            output = _marked(wt, resumed)
            if not _FIRST_BAD.search(output):
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
    return record
