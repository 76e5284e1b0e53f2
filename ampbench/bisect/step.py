"""One bisect step: the cells measured at a commit (or in a package version's environment) and answered as
``git bisect run`` reads an exit status: 0 good, 1 bad, 125 skip. A step is paired against the good side
(``bisect.pairs``): pairs of the good side and this commit, on the same card, until each cell is decided;
any cell that regresses is bad, every cell that passes (or improves) is good, anything else is skipped.
With ``--history`` there is no good tree to pair with, and the step is held to the history's level
(``bisect.judge``): measured again where inconclusive, skipped where inconclusive twice, or without a figure
twice, or without one once where the measurement ran past the step timeout (a second would only hang as
long). Each step appends its record to the bisect's steps file (one JSON object a line), which the driver
reads back.

``git bisect run`` starts it as a script (`SCRIPT`, written beside the configuration), which imports the
driver's ampbench: the tree under test may hold another, or none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Mapping

from ampbench.bisect.judge import (
    ANSWERS,
    BAD,
    GOOD,
    SKIP,
    Level,
    describe_cells,
    judge_step,
)
from ampbench.bisect.measure import STEP_GRACE, CommandMeasurer, Measurement, SuiteMeasurer, measurer_of
from ampbench.bisect.pairs import GoodSide, pair_rule, paired_step
from ampbench.children import STOP_GRACE, STOPPED, Signals, Stopped
from ampbench.verdict import Verdict
from ampbench.worktree import Worktree, git

ABORT = 128  # git bisect run stops at a status above 127: a fault of the step itself, not of the commit
# a step that cannot even start must stop the bisect: Python's own exit status for it, 1, reads as bad
SCRIPT = """import sys
sys.path.insert(0, {root!r})
try:
    from ampbench.bisect.step import step_main
except BaseException as exc:
    print(f"ampbench bisect: the step could not start, stopping the bisect: {{exc!r}}", file=sys.stderr)
    sys.exit(128)
sys.exit(step_main(sys.argv[1]))
"""


def progress(line: str) -> None:
    print(f"ampbench bisect: {line}", flush=True)


def say_removed(worktree: Worktree) -> None:
    for path in worktree.removed:
        progress(f"removed the worktree {path}, left registered by a bisect that was killed before it could "
                 "remove it")


def commit_of(tree: Path) -> tuple[str, str]:
    """(sha, subject) of the tree's HEAD."""
    sha, _, subject = git(tree, "log", "-1", "--format=%H %s").partition(" ")
    return sha, subject


def steps_taken(config: Mapping[str, Any]) -> list[dict]:
    path = Path(config["steps_file"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _cells(measurement: Measurement, verdicts: Mapping[str, Verdict], levels: Mapping[str, Level]) -> dict:
    out = {}
    for cell, verdict in verdicts.items():
        figure, level = measurement.figures.get(cell), levels[cell]
        out[cell] = {"verdict": str(verdict), "line": level.line, "good_speedup": level.speedup,
                     "good_kernels": level.kernels}
        if figure is not None:
            out[cell].update(speedup=figure.speedup, low=figure.low, high=figure.high,
                             drop=figure.speedup / level.speedup - 1, suite_verdict=figure.verdict,
                             kernels=figure.kernels)
    return out


def step_verdict(code: int, verdicts: Mapping[str, Verdict]) -> Verdict:
    if code == BAD:
        return Verdict.REGRESSION
    if code == GOOD:
        return Verdict.PASS
    return Verdict.ERROR if all(v is Verdict.ERROR for v in verdicts.values()) else Verdict.INCONCLUSIVE


def _held(config: Mapping[str, Any], measurer: SuiteMeasurer | CommandMeasurer, tree: Path, label: str,
          head: str) -> tuple[int, dict[str, Verdict], dict]:
    """A step held to the history's levels: measured once, and once more where inconclusive."""
    levels = {cell: Level.from_json(data) for cell, data in config["levels"].items()}
    code, seconds, attempts = SKIP, 0.0, []
    verdicts: dict[str, Verdict] = {}
    for attempt in (1, 2):
        measurement = measurer(tree, f"{label}-{attempt}")
        code, verdicts = judge_step(measurement, levels)
        seconds += measurement.seconds
        attempts.append({"cells": _cells(measurement, verdicts, levels), "seconds": measurement.seconds,
                         "problem": measurement.problem})
        again = " (measured again)" if attempt == 2 else ""
        progress(f"{head}: {describe_cells(measurement, verdicts, levels)}{again} -> {ANSWERS[code]} "
                 f"({measurement.seconds:.1f} s)")
        if measurement.problem:
            progress(f"  {measurement.problem}")
        if code != SKIP or measurement.timed_out:
            break
    return code, verdicts, {"cells": attempts[-1]["cells"], "seconds": seconds, "attempts": attempts,
                            "problem": attempts[-1]["problem"]}


def _paired(config: Mapping[str, Any], measurer: SuiteMeasurer | CommandMeasurer, tree: Path, label: str,
            head: str) -> tuple[int, dict[str, Verdict], dict]:
    """A step paired against the good side (``bisect.pairs``)."""
    found = paired_step(measurer, GoodSide(**config["good"]), tree, label, pair_rule(config["tolerance"]),
                        config["max_pairs"], lambda line: progress(f"{head}: {line}"))
    progress(f"{head}: {len(found.pairs)} pair{'s' if len(found.pairs) != 1 else ''} -> {ANSWERS[found.code]} "
             f"({found.seconds:.1f} s)")
    if found.problem and found.code != BAD:
        progress(f"  {found.problem}")
    return found.code, {n: c.verdict for n, c in found.cells.items()}, {
        "cells": {n: c.to_json() for n, c in found.cells.items()}, "seconds": found.seconds, "pairs": found.pairs,
        "problem": found.problem}


def run_step(config: Mapping[str, Any], tree: Path, revision: str, subject: str, kind: str = "step",
             grace: float = STOP_GRACE) -> tuple[int, dict]:
    """Measure `revision` (checked out in `tree`, or installed where the configuration's measurer runs),
    paired against the configuration's good side (or held to its levels, where it names levels), and append
    its record to the steps file: (its answer, the record). `grace`: the seconds a measurement that is ended
    has between SIGTERM and SIGKILL."""
    measurer = measurer_of(config)
    measurer.grace = grace
    number = sum(1 for s in steps_taken(config) if s["kind"] == kind) + 1
    label = f"{kind.replace(' ', '-')}{number}-{revision[:12]}"
    head = f"{kind} {number}: {revision[:12]} {subject!r}"
    code, verdicts, found = (_held if "levels" in config else _paired)(config, measurer, tree, label, head)
    record = {"step": number, "kind": kind, "commit": revision, "subject": subject,
              "verdict": str(step_verdict(code, verdicts)), "answer": ANSWERS[code], **found}
    with open(config["steps_file"], "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return code, record


def step_main(config_path: str) -> int:
    """The step ``git bisect run`` calls, in the worktree at the commit under test. Its measurement runs in
    a session of its own (so that a timeout ends all of it); when the bisect's driver ends this step
    (SIGTERM to ``git bisect run``'s group), the step ends its measurement first, within STEP_GRACE."""
    with Signals():
        try:
            config = json.loads(Path(config_path).read_text(encoding="utf-8"))
            tree = Path.cwd()
            sha, subject = commit_of(tree)
            code, _ = run_step(config, tree, sha, subject, grace=STEP_GRACE)
            return code
        except Stopped as stopped:
            return STOPPED[stopped.signum]
        except Exception as exc:  # noqa: BLE001 - any fault of the step stops the bisect, never reads as a bad commit
            print(f"ampbench bisect: the step failed, stopping the bisect: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            return ABORT
