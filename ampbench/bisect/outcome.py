"""What a bisect ends with: the first bad step (a commit or a package version) with each cell's drop against
the good side (its pairs' ratio and interval, or its figure against the history's level) and the kernels that
moved against the good side, as lines to print, and the record of every step written to a JSON file."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping

from ampbench.bisect.step import steps_taken
from ampbench.files.write import write_atomic
from ampbench.kernel_diff import kernel_changes

RECORD_SCHEMA = 1


def first_bad_step(steps: list[dict], revision: str) -> dict | None:
    """The latest step that found `revision` bad: the figures its report quotes."""
    return next((s for s in reversed(steps) if s["commit"] == revision and s["answer"] == "bad"), None)


def moved(cell: Mapping[str, Any]) -> str:
    """The kernels that moved between the good side's list and the step's, or why none is named."""
    if not cell.get("good_kernels") or not cell.get("kernels"):
        return ("no kernel lists to compare (the CPU smoke pass lists none, a step command lists them where it prints "
                "them)")
    return kernel_changes(cell["good_kernels"], cell["kernels"], against="the good side") or "no kernel moved"


def cell_lines(step: Mapping[str, Any]) -> list[str]:
    """Each cell of a step: paired, head over the good side after its pairs; held, against the level's line."""
    lines = []
    for name, cell in step["cells"].items():
        if "speedup" not in cell:
            lines.append(f"  {name}: no figure ({cell['verdict']})")
            continue
        if "ratio" in cell:
            lines.append(f"  {name}: {cell['ratio']:.3f}x [{cell['ratio_low']:.3f}, {cell['ratio_high']:.3f}] of the "
                         f"good side after {cell['pairs']} pairs: {cell['drop']:+.1%} ({cell['speedup']:.3f}x against "
                         f"the good side's {cell['good_speedup']:.3f}x), {cell['verdict']}")
        else:
            lines.append(f"  {name}: {cell['speedup']:.3f}x [{cell['low']:.3f}, {cell['high']:.3f}] against the good "
                         f"side's {cell['good_speedup']:.3f}x: {cell['drop']:+.1%} (line {cell['line']:.3f}x), "
                         f"{cell['verdict']}")
        lines.append(f"    kernels: {moved(cell)}")
    return lines


def report_lines(record: Mapping[str, Any]) -> list[str]:
    """The bisect's outcome in words: the first bad step and its cells, or why none was named."""
    bisect_steps = [s for s in record["steps"] if s["kind"] == "step"]
    spent = f"{len(bisect_steps)} bisect steps, {record['seconds']:.0f} s in all"
    first = record.get("first_bad")
    if first is None:
        return [f"no first bad {record['unit']} named: {record['why']} ({spent})"]
    lines = [f"first bad {record['unit']}: {first['commit']} {first['subject']!r} ({spent})"]
    step = first_bad_step(record["steps"], first["commit"])
    if step is not None:
        lines += cell_lines(step)
    return lines


def bad_side_why(label: str, step: Mapping[str, Any]) -> str:
    """Why a bad side that was not judged bad names no first bad step: it does not regress against the good
    side (or the history's level), or it gave no figure (a failed or timed-out measurement), named by the
    problem of its last measurement."""
    problem = step.get("problem")
    if step["answer"] == "skip" and problem and step["verdict"] == "error":
        return f"the bad side {label} could not be judged: {problem.splitlines()[0]}"
    against = "the good side's level" if "attempts" in step else "the good side"
    return f"the bad side {label} does not regress against {against}"


def write_record(path: Path, record: Mapping[str, Any]) -> None:
    write_atomic(Path(path), {"schema_version": RECORD_SCHEMA, **record})


def step_rows(steps: list[dict]) -> list[dict]:
    """Each step as the record keeps it: its commit, verdict, figures and seconds, and its pairs (a paired
    step) or its attempts (a step held to the history's level)."""
    keys = ("step", "kind", "commit", "subject", "verdict", "answer", "cells", "seconds", "problem", "pairs",
            "attempts")
    return [{key: step[key] for key in keys if key in step} for step in steps]


class BisectInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during a bisect, with the record of the steps taken until then."""

    def __init__(self, record: dict[str, Any]):
        super().__init__("interrupted")
        self.record = record


@contextmanager
def kept_on_interrupt(record: dict[str, Any], steps_file: Path, started: float) -> Iterator[None]:
    """Turn an interrupt into BisectInterrupted holding `record` with the steps `steps_file` holds so far:
    read here, before the worktree's temporary folder that holds the file is removed."""
    import time

    try:
        yield
    except KeyboardInterrupt as exc:
        record.update(first_bad=None, why="interrupted", interrupted=True,
                      steps=step_rows(steps_taken({"steps_file": str(steps_file)})),
                      seconds=time.perf_counter() - started)
        raise BisectInterrupted(record) from exc
