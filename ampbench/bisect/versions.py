"""The package bisect: the same cells measured with each version of a package (torch, torchvision,
torchao, ...) that pip installs, each in a virtual environment of its own, the project (a worktree of
the repository at one revision) installed there with --no-deps. The first version is the good side,
the last the bad side; the versions between are bisected in Python, the way ``git bisect`` goes
through commits: halving, and stepping past a version whose step is skipped. Each step is paired
against the good side (``bisect.pairs``): the same project tree, run by the first version's interpreter,
measured beside the version under test on the same card. The environments are
``ampbench.environments.Environments``, removed with the worktree's temporary folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ampbench.bisect.commits import Plan, paired_config, prepare
from ampbench.bisect.judge import BAD, GOOD, SKIP
from ampbench.bisect.measure import CommandMeasurer, SuiteMeasurer, measurer_spec
from ampbench.bisect.outcome import bad_side_why, kept_on_interrupt, step_rows
from ampbench.bisect.pairs import GoodSide, pair_rule
from ampbench.bisect.step import progress, run_step, say_removed, steps_taken
from ampbench.environments import Environments, InstallError
from ampbench.worktree import Worktree, commit_sha, repository


def _use(config: dict, measurer: SuiteMeasurer | CommandMeasurer, python: str) -> None:
    """Point the measurer, and the steps' copy of it, at `python`'s environment."""
    measurer.python = python
    config["measurer"] = measurer_spec(measurer)
    Path(config["path"]).write_text(json.dumps(config), encoding="utf-8")


def _step(config: dict, measurer, envs: Environments, tree: Path, version: str,
          kind: str = "step") -> tuple[int, dict]:
    """(the answer, the record) of `version`'s step."""
    label = f"{envs.package}=={version}"
    try:
        _use(config, measurer, envs.python(version))
    except InstallError as exc:
        progress(f"{kind}: {label}: skipped, its environment could not be made: {exc}")
        record = {"step": 0, "kind": kind, "commit": label, "subject": "", "verdict": "error", "answer": "skip",
                  "cells": {}, "seconds": 0.0, "pairs": [], "problem": str(exc)}
        with open(config["steps_file"], "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        return SKIP, record
    return run_step(config, tree, label, "", kind=kind)


def _next(low: int, high: int, skipped: set[int]) -> int | None:
    """The untested version nearest the middle of (low, high), as git bisect picks past skipped commits."""
    inside = [i for i in range(low + 1, high) if i not in skipped]
    return min(inside, key=lambda i: abs(i - (low + high) / 2)) if inside else None


def bisect_versions(repo: Path, rev: str, package: str, versions: list[str],
                    measurer: SuiteMeasurer | CommandMeasurer, plan: Plan,
                    pip_args: list[str]) -> dict[str, Any]:
    """Bisect `versions` of `package` (oldest first: the first good, the last bad) with the project at
    `rev` of `repo`: the record of every step and the outcome."""
    repo = repository(repo)  # git on PATH, and a repository: said first, plainly
    t0 = time.perf_counter()
    sha = commit_sha(repo, rev)
    progress(f"{len(versions)} versions of {package}, {versions[0]} (good) to {versions[-1]} (bad); the project at "
             f"{sha[:12]} in a temporary worktree")
    record: dict[str, Any] = {"unit": "version", "package": package, "versions": versions, "project": sha,
                              "cells": list(measurer.cells)}
    with Worktree(repo, sha) as wt, kept_on_interrupt(record, wt.scratch / "steps.jsonl", t0):
        say_removed(wt)
        envs = Environments(wt.scratch / "envs", package, wt.path, pip_args)
        prepare(measurer, plan, wt.scratch)
        good = GoodSide(str(wt.path), envs.python(versions[0]), f"{package}=={versions[0]}")
        config = {**paired_config(plan, good), "steps_file": str(wt.scratch / "steps.jsonl"),
                  "path": str(wt.scratch / "config.json")}
        record.update(max_pairs=plan.max_pairs, tolerance=pair_rule(plan.tolerance).tolerance)
        skipped: set[int] = set()
        low, high = 0, len(versions) - 1
        why = None
        if plan.check_bad:
            code, step = _step(config, measurer, envs, wt.path, versions[-1], "bad side")
            if code != BAD:
                why = bad_side_why(f"{package}=={versions[-1]}", step)
        while why is None and (index := _next(low, high, skipped)) is not None:
            code, _ = _step(config, measurer, envs, wt.path, versions[index])
            if code == GOOD:
                low = index
            elif code == BAD:
                high = index
            else:
                skipped.add(index)
        first = None
        if why is None and all(i in skipped for i in range(low + 1, high)) and high - low > 1:
            why = (f"only skipped versions are left; the first bad one is one of "
                   f"{', '.join(versions[low + 1:high + 1])}")
        elif why is None:
            first = {"commit": f"{package}=={versions[high]}", "subject": ""}
        record.update(first_bad=first, why=why, steps=step_rows(steps_taken(config)),
                      seconds=time.perf_counter() - t0)
    return record
