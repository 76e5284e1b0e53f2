"""Per-test verdicts between two runs, with the statistics the suite's own tests use: the old run's
speedup plays the baseline, and the new run's interval is judged by the gate's judge
(``gate.judge.verdict_of``) against the old run as its `Reference`, whose tolerance follows from the noise the
old run was measured with.

A cell of an A/B run (``PairedRecord``) is a comparison already: head over base, measured together in
pairs on one card. Its figures are not judged again against an older run: each is one row that shows the
old run's change of it beside the new run's, each with its interval, under the new run's own verdict of
it (``_paired_changes``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

from ampbench.gate.judge import verdict_of
from ampbench.progress import QUIET, Progress
from ampbench.report.figure_text import DASH, fmt_change, fmt_number, fmt_pct, fmt_speedup, verdict_label
from ampbench.results import (
    VERDICT_ORDER,
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PairedRecord,
    Record,
    Run,
    SpeedRecord,
)
from ampbench.results.ratios import DEVICE, VERSUS, WALL
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import BY_OLD_RUN, Reference
from ampbench.verdict import RatioCheck, Verdict

DEFAULT_MEMORY_TOLERANCE = 0.05  # memory ratio and largest batch: allocator rounding moves them a little
DEFAULT_ACCURACY_TOLERANCE = 0.02  # relative; short convergence runs wander this much between seeds

MISSING = "missing"  # in the old run, not in the new one (deselected, skipped, crashed)
NEW = "new"  # only in the new run


class CompareError(ValueError):
    """Two runs that must not be judged against each other; the message names both and the flag that allows it."""


def device_of(run: Run) -> str | None:
    """The device a run measured: machine_info's name for it, else the one device its cells name, where
    that names hardware (a bare "cuda" does not say which card); None when it cannot be told."""
    device = run.machine.get("device")
    if isinstance(device, str) and device:
        return device
    devices = {c.device for c in run.cells if c.device}
    if len(devices) == 1:
        (only,) = devices
        return None if only.split(":")[0] in ("cuda", "mps", "xpu") else only
    return None


@dataclass(frozen=True)
class FigureChange:
    """One figure of one test, old against new, and what that means."""

    test_id: str
    kind: str
    model: str
    mode: str
    figure: str  # "speedup", "device speedup", "memory ratio", "largest batch", "accuracy", "verdict", or "-"
    old: str  # formatted for people
    new: str
    change: float | None  # relative change new / old - 1
    verdict: Verdict | str  # a Verdict, or MISSING or NEW
    message: str
    change_low: float | None = None  # the new interval's ends, relative to the old figure (speedup only)
    change_high: float | None = None
    tolerance: float | None = None

    @property
    def failing(self) -> bool:
        return isinstance(self.verdict, Verdict) and self.verdict.failing

    @property
    def charted(self) -> bool:
        """A speedup held by its interval (a speed or distributed cell's gated speedup, a compiled cell's
        ratio over its versus side) that both runs measured: what the comparison chart draws."""
        return self.change is not None and self.change_low is not None and self.change_high is not None

    def cells(self) -> list[str]:
        return [self.test_id, self.figure, self.old, self.new, fmt_pct(self.change), verdict_label(self.verdict)]


@dataclass
class Comparison:
    old: Run
    new: Run
    rows: list[FigureChange]
    notes: list[str] = field(default_factory=list)  # e.g. the software changed between the runs
    cross_device: bool = False  # judged across devices on request: the verdicts are about ratios only
    headlines: int = 0  # how many of `notes`, from the first, a reader must see before any verdict

    def counts(self) -> dict[Verdict | str, int]:
        order = [*VERDICT_ORDER, MISSING, NEW]
        counts: dict[Verdict | str, int] = {}
        for r in self.rows:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        return {v: counts[v] for v in sorted(counts, key=lambda v: order.index(v) if v in order else len(order))}

    @property
    def failures(self) -> list[FigureChange]:
        """Rows whose verdict fails: a regression of a figure, or a cell whose own verdict now fails."""
        return [r for r in self.rows if r.failing]

    @property
    def inconclusive(self) -> list[FigureChange]:
        return [r for r in self.rows if r.verdict == Verdict.INCONCLUSIVE]

    @property
    def missing(self) -> list[FigureChange]:
        return [r for r in self.rows if r.verdict == MISSING]

    def failed(self, strict: bool = False, allow_missing: bool = False) -> bool:
        """A failing row fails, and so does a test the new run lost (a run that crashed or was deselected
        must not read as a pass) unless `allow_missing`; under `strict` an inconclusive verdict fails too
        (like --perf-strict)."""
        return bool(self.failures or (strict and self.inconclusive) or (self.missing and not allow_missing))


def _base(cell: Record, figure: str) -> dict:
    return dict(test_id=cell.test_id, kind=cell.kind, model=cell.model, mode=cell.mode, figure=figure)


def _speed_change(old: SpeedRecord | DistributedRecord, new: SpeedRecord | DistributedRecord,
                  floor: float) -> FigureChange:
    # the device-time speedup where both runs measured it the same way: it is what the suite gates on;
    # the wall-clock speedup of eager steps otherwise, with the wall's own floor
    old_est, new_est = old.estimate(DEVICE), new.estimate(DEVICE)
    device = (old_est is not None and new_est is not None and old.ratio(DEVICE).method == new.ratio(DEVICE).method)
    kind = DEVICE if device else WALL
    if not device:
        floor = max(floor, WALL.floor)
        old_est, new_est = old.estimate(WALL), new.estimate(WALL)
    return _interval_change(new, "device speedup" if device else "speedup", old_est, new_est,
                            new.ratio(kind).speedup, floor, old.ratio(kind).tolerance)


def _versus_change(old: SpeedRecord, new: SpeedRecord, floor: float) -> FigureChange | None:
    """A compiled cell's ratio over its versus side (compile gain; fp8 over compiled amp_bf16), where the
    new run has one: held only against an old ratio over the same side, measured the same way."""
    new_est = new.estimate(VERSUS)
    if new_est is None:
        return None
    same = old.versus == new.versus and old.ratio(VERSUS).method == new.ratio(VERSUS).method
    old_est = old.estimate(VERSUS) if same else None
    return _interval_change(new, f"over {new.versus}", old_est, new_est, new.ratio(VERSUS).speedup, floor,
                            old.ratio(VERSUS).tolerance if same else None, f"speedup over {new.versus}")


def _interval_change(new: Record, figure: str, old_est: SpeedupEstimate | None, new_est: SpeedupEstimate | None,
                     new_value: float | None, floor: float, recorded: float | None,
                     check_figure: str = "speedup over fp32") -> FigureChange:
    """One ratio with an interval, new against old: the old value is the baseline, and the old interval's
    width stands for the noise it was recorded with."""
    base = _base(new, figure)
    if old_est is None:
        return FigureChange(**base, old="-", new=fmt_speedup(new_est, new_value), change=None,
                      verdict=Verdict.NO_BASELINE,
                      message=f"the old run has no {figure} with an interval for this test")
    if new_est is None:
        return FigureChange(**base, old=fmt_speedup(old_est), new="-", change=None, verdict=Verdict.INCONCLUSIVE,
                      message=f"the new run has no {figure} with an interval for this test")
    # the old run is the baseline source: its interval's width stands for its noise; the tolerance the old
    # run itself was held to already folds in its baseline's recorded noise, so never go below it
    reference = Reference.of(old_est.speedup, floor, old_est.half_width, None, source="the old run")
    if recorded is not None and 0 < recorded < 1 and recorded > reference.tolerance:
        reference = replace(reference, tolerance=recorded, rule=BY_OLD_RUN)
    tolerance = reference.tolerance
    # a record read from a file may lack its model or mode; the check only names them, as str() does
    check = reference.check(str(new.model), str(new.mode), check_figure)
    return FigureChange(
        **base,
        old=fmt_speedup(old_est),
        new=fmt_speedup(new_est),
        change=check.drop(new_est),
        verdict=verdict_of(check, new_est),
        message=check.describe(new_est),
        change_low=new_est.low / check.expected - 1.0,
        change_high=new_est.high / check.expected - 1.0,
        tolerance=tolerance,
    )


def _ratio_change(new: Record, before: float | None, after: float | None, figure: str, worse: str, tolerance: float,
                  fmt: Callable[[float | None], str]) -> FigureChange | None:
    if before is None and after is None:
        return None
    base = dict(_base(new, figure), old=fmt(before), new=fmt(after))
    if before is None or before <= 0:
        return FigureChange(**base, change=None, verdict=Verdict.NO_BASELINE, message=f"the old run has no {figure}")
    if after is None:
        return FigureChange(**base, change=None, verdict=Verdict.INCONCLUSIVE, message=f"the new run has no {figure}")
    check = RatioCheck(str(new.model), str(new.mode), figure, expected=before, tolerance=tolerance, worse=worse)
    change = after / before - 1.0
    failure = check.failure(after)
    if failure is not None:
        return FigureChange(**base, change=change, verdict=Verdict.REGRESSION, message=failure)
    verdict = Verdict.IMPROVED if check.improved(after) else Verdict.PASS
    return FigureChange(**base, change=change, verdict=verdict,
                  message=f"{new.model} {new.mode}: {figure} {fmt(after)} against {fmt(before)} ({change:+.1%})")


def _ratio(value: float | None) -> str:
    return fmt_number(value, ".3f", "x")


def _paired_changes(old: Record | None, new: PairedRecord) -> list[FigureChange]:
    """Each figure of a paired cell: the old run's change of it (where the old run is an A/B run too) and the
    new run's, under the new run's verdict of it. A change of head over base against another run's change over
    other trees says nothing its own pairs did not: the pairs are the comparison (the module's docstring)."""
    before = dict(old.named_figures()) if isinstance(old, PairedRecord) else {}
    rows = []
    for name, f in new.named_figures():
        o = before.get(name)
        verdict = f.verdict or new.verdict or Verdict.NO_BASELINE
        rows.append(FigureChange(**_base(new, f"{f.label or name}, head over base"),
                                 old=fmt_change(o.change, o.change_low, o.change_high) if o else DASH,
                                 new=fmt_change(f.change, f.change_low, f.change_high), change=None,
                                 verdict=verdict, message=f.message or new.message or f"{new.test_id}: {verdict}",
                                 tolerance=f.tolerance))
    return rows


def _figure_changes(old: Record, new: Record, tolerance: float, memory_tolerance: float,
                    accuracy_tolerance: float) -> list[FigureChange | None]:
    """The figures of one kind of cell, old against new (none for kinds without a figure to hold); a paired
    cell's own verdicts, whatever the old run holds of it (``_paired_changes``)."""
    if isinstance(new, PairedRecord):
        return list(_paired_changes(old, new))
    if isinstance(new, SpeedRecord) and isinstance(old, SpeedRecord):
        return [_speed_change(old, new, tolerance), _versus_change(old, new, tolerance)]
    if isinstance(new, DistributedRecord) and isinstance(old, DistributedRecord):
        return [_speed_change(old, new, tolerance)]
    if isinstance(new, MemoryRecord) and isinstance(old, MemoryRecord):
        rows = [_ratio_change(new, old.memory_ratio, new.memory_ratio, "memory ratio", "higher", memory_tolerance,
                              _ratio)]
        # a new run that did not search (the quick tier) chose not to measure the largest batch: no row,
        # rather than an inconclusive one that --strict would fail
        if new.batch_searched:
            rows.append(_ratio_change(new, old.max_batch_ratio, new.max_batch_ratio, "largest batch", "lower",
                                      memory_tolerance, _ratio))
        return rows
    if isinstance(new, ConvergenceRecord) and isinstance(old, ConvergenceRecord):
        return [_ratio_change(new, old.accuracy, new.accuracy, "accuracy", "lower", accuracy_tolerance,
                              lambda v: fmt_number(v, ".4g"))]
    return []


def compare_cells(old: Record, new: Record, *, tolerance: float = DEFAULT_TOLERANCE,
                  memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE,
                  accuracy_tolerance: float = DEFAULT_ACCURACY_TOLERANCE) -> list[FigureChange]:
    """The changes of one test between two runs: its figures, and its own verdict where that now fails
    while it did not before and no figure says so already (a cell whose training went non-finite may
    have no figure worth comparing; its verdict says so)."""
    rows = [r for r in _figure_changes(old, new, tolerance, memory_tolerance, accuracy_tolerance) if r is not None]
    newly_failing = new.verdict is not None and new.verdict.failing and not (old.verdict and old.verdict.failing)
    if newly_failing and new.verdict is not None and not any(r.failing for r in rows):
        rows.append(FigureChange(**_base(new, "verdict"), old=verdict_label(old.verdict),
                                 new=verdict_label(new.verdict), change=None, verdict=new.verdict,
                                 message=new.message or f"{new.kind} cell now {new.verdict}"))
    return rows


def compare_runs(old: Run, new: Run, *, tolerance: float = DEFAULT_TOLERANCE,
                 memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE,
                 accuracy_tolerance: float = DEFAULT_ACCURACY_TOLERANCE, cross_device: bool = False,
                 progress: Progress = QUIET) -> Comparison:
    """Every test of either run, matched by test id, in the new run's order (then the old-only ones).

    Runs from different devices raise CompareError unless `cross_device`: a CPU smoke run's speedups are
    no baseline for a GPU's, and a verdict between them would only be noise."""
    old_device, new_device = device_of(old), device_of(new)
    different = old_device is not None and new_device is not None and old_device != new_device
    if different and not cross_device:
        raise CompareError(
            f"{old.path} ran on {old_device} and {new.path} on {new_device}: runs from different devices are "
            "not judged against each other; pass --cross-device to compare their ratios over fp32 anyway"
        )
    old_by_id = {c.test_id: c for c in old.cells}
    new_ids = {c.test_id for c in new.cells}
    rows: list[FigureChange] = []
    for done, cell in enumerate(new.cells):
        progress("comparing", done, len(new.cells))
        before = old_by_id.get(cell.test_id)
        if isinstance(cell, PairedRecord):  # its own verdicts, whether or not the old run measured it
            rows += _paired_changes(before, cell)
            continue
        if before is None:
            rows.append(FigureChange(**_base(cell, "-"), old="-", new="present", change=None, verdict=NEW,
                               message="not in the old run"))
            continue
        rows += compare_cells(before, cell, tolerance=tolerance, memory_tolerance=memory_tolerance,
                              accuracy_tolerance=accuracy_tolerance)
    for cell in old.cells:
        if cell.test_id not in new_ids:
            rows.append(FigureChange(**_base(cell, "-"), old="present", new="-", change=None, verdict=MISSING,
                               message="not in the new run (deselected, skipped or crashed)"))
    notes = _notes(old, new, different)
    headlines = int(different) + int(old.smoke or new.smoke)
    return Comparison(old, new, rows, notes, cross_device=different, headlines=headlines)


def _notes(old: Run, new: Run, cross_device: bool) -> list[str]:
    """What to know before reading the verdicts: first whether the runs ran on different devices, and whether
    a run is a CPU smoke run (the comparison's `headlines`); then how their devices and software differ."""
    notes = []
    if cross_device:
        notes.append(
            f"CROSS-DEVICE ({device_of(old)} against {device_of(new)}, by --cross-device): the verdicts are about "
            "ratios over fp32 only (speedup, memory ratio, largest batch ratio, accuracy); absolute step times, "
            "throughput and memory do not compare, and a ratio may well differ between devices without a regression."
        )
    smoke = [r for r in (old, new) if r.smoke]
    if len(smoke) == 2:
        notes.append("SMOKE RUNS: both runs are CPU smoke runs (tiny shapes that check the code path): the verdicts, "
                     "changes and tolerances below say nothing about a GPU's speed.")
    elif smoke:
        notes.append(f"SMOKE RUN: {smoke[0].path.name} is a CPU smoke run (tiny shapes that check the code path): "
                     "its figures say nothing about a GPU's speed.")
    if not cross_device and old.gpu != new.gpu:
        notes.append(
            f"The runs name their device differently ({old.gpu} and {new.gpu}): speedups over fp32 compare, "
            "absolute step times and throughput may not."
        )
    changed = [
        f"{k} {a} → {b}"
        for k in ("torch", "cuda", "cudnn", "driver")
        if (a := old.machine.get(k)) is not None and (b := new.machine.get(k)) is not None and a != b
    ]
    if changed:
        notes.append("Software changed between the runs: " + ", ".join(changed) + ".")
    return notes


def format_text(comparison: Comparison, *, all_rows: bool = True) -> str:
    """A plain-text table for the terminal and CI logs."""
    rows = comparison.rows if all_rows else [r for r in comparison.rows if r.verdict != Verdict.PASS]
    headers = ["test", "figure", "old", "new", "change", "verdict"]
    table = [headers] + [[*r.cells()[:5], str(r.verdict)] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    # a smoke run or a cross-device judgement says so first, before anyone reads a verdict
    first = comparison.headlines
    lines = [*comparison.notes[:first], ""] if first else []
    lines += [f"old: {comparison.old.path} ({comparison.old.gpu})",
              f"new: {comparison.new.path} ({comparison.new.gpu})"]
    lines += [f"note: {n}" for n in comparison.notes[first:]]
    lines.append("")
    for i, row in enumerate(table):
        lines.append("  ".join(c.ljust(w) if j < 1 else c.rjust(w) if j in (2, 3, 4) else c.ljust(w)
                               for j, (c, w) in enumerate(zip(row, widths))).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if comparison.failures or comparison.inconclusive or comparison.missing:
        lines.append("")
        lines += [f"{str(r.verdict).upper()}: {r.message}" for r in comparison.failures + comparison.inconclusive]
        lines += [f"MISSING: {r.test_id}: {r.message}" for r in comparison.missing]
    lines.append("")
    counts = comparison.counts()
    lines.append("summary: " + (", ".join(f"{n} {v}" for v, n in counts.items()) or "nothing to compare"))
    return "\n".join(lines) + "\n"
