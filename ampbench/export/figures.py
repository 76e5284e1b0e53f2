"""The gated figures of a run, one ``Figure`` per figure that holds a cell: each speedup that gates a speed
or distributed cell with its interval, a compiled cell's ratio over its versus side, a memory cell's
ratio to fp32 (and its largest batch's, where searched) and a convergence cell's accuracy against its
parity mode's; a speed cell's energy per step over fp32's, reported beside them and held to no line (never
gated, until its run-to-run noise is measured: docs/design.md, "Clocks and energy"); each figure of an A/B
run's paired cell, head's value with its interval over base's (the value of a figure where smaller is
better also as base over head, for a dashboard where bigger is).
What a dashboard should chart: the figure the suite judges, not one side's time.

A cell with no such figure (the input pipeline's rates, the underflow demonstration, a cell whose test
failed before it measured) is named in ``Figures.left_out`` with the reason, never dropped silently.
Runs written before a cell named the figures that gated it (``gated``) are read as their own verdicts
were made: the device-time speedup where the cell measured one, else the wall-clock one."""

from __future__ import annotations

from dataclasses import dataclass, field

from ampbench.results import (
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PairedRecord,
    RatioKind,
    Run,
    SpeedRecord,
    TimedRecord,
)
from ampbench.results.ratios import DEVICE, WALL, ratio_label
from ampbench.results.run import entry_group
from ampbench.stats import SpeedupEstimate


@dataclass(frozen=True)
class Figure:
    """One gated figure of one cell."""

    test_id: str
    group: str  # pytest-benchmark's group of the cell: "speed: gpt"
    measure: str  # a slug: "device-speedup", "wall-speedup", "versus-speedup", "memory-ratio", ...
    label: str  # for people: "device speedup", "speedup over amp_bf16 compiled"
    value: float
    low: float | None = None  # the interval's ends, where the figure has one
    high: float | None = None
    confidence: float | None = None
    bigger_is_better: bool = True
    unit: str = "x"  # "x" for a ratio, "pts" for accuracy points; a paired figure's own ("ms", "bytes")
    tolerance: float | None = None  # how far the run let it fall: relative for a ratio, in points for a gap
    baseline: float | None = None
    verdict: str | None = None
    # the figure as a ratio where bigger is better, for a dashboard that divides one run's value by
    # another's: (what it is, its value); None where the figure is one already (a speedup)
    relative: tuple[str, float] | None = None

    @property
    def margin(self) -> float | None:
        """How far the figure lies beyond its regression line, in tolerances: 0 on its baseline, 1 on the
        line, above 1 past it, smaller is better. None where it is held to no line (no baseline, a
        tolerance of 0, or one of 100% or more, whose line lies at or below zero).

        - a speedup: ``(1 - high / baseline) / tolerance``, `high` its interval's upper end. Above 1
          exactly where the whole interval lies below ``baseline x (1 - tolerance)``: the gate's own test
          (``SpeedupCheck.classify``), so a point estimate below the line whose interval still reaches it
          stays at or under 1, as its verdict stays short of a regression.
        - a memory ratio (larger is worse): ``(value / baseline - 1) / tolerance``, ``RatioCheck``'s
          worsening over its tolerance; where the figure has an interval (a paired step time), of its lower
          end, so that it lies above 1 exactly where the whole interval lies past the line.
        - an accuracy gap in points: ``-gap / tolerance``, the points lost against the parity mode over
          the points the cell may lose (its parity margin)."""
        tol = self.tolerance
        if tol is None or tol <= 0:
            return None
        if self.unit == "pts":
            return -self.value / tol
        if self.baseline is None or self.baseline <= 0:
            return None
        if not self.bigger_is_better:
            return ((self.low if self.low is not None else self.value) / self.baseline - 1.0) / tol
        if tol >= 1.0 or self.high is None:
            return None
        return (1.0 - self.high / self.baseline) / tol

    @property
    def half_width(self) -> float | None:
        """The larger distance from the value to an end of its interval (dashboards show one ± figure)."""
        if self.low is None or self.high is None:
            return None
        return max(self.high - self.value, self.value - self.low)


@dataclass
class Figures:
    """What a run exports: its figures, and the cells that have none, each with why."""

    run: Run
    figures: list[Figure] = field(default_factory=list)
    left_out: list[tuple[str, str]] = field(default_factory=list)  # (test id, why)


def _speedup(cell: TimedRecord, gate: str) -> RatioKind | None:
    """The cell's speedup over fp32 that the --perf-gate value `gate` names (its ratios over a versus side
    and its scaling efficiencies are exported apart, or not at all)."""
    return next((k for k in cell.RATIOS.values() if k.gate == gate and not k.over and not k.share), None)


def gating_speedups(cell: TimedRecord) -> list[RatioKind]:
    """The speedups that held the cell: as it names them, else as a run of its time judged it."""
    # the two kinds of timed cell, which name the speedups that held them
    gated = cell.gated if isinstance(cell, (SpeedRecord, DistributedRecord)) else None
    named = [kind for gate in dict.fromkeys(gated or []) if (kind := _speedup(cell, gate)) is not None]
    if named:
        return named
    device, wall = _speedup(cell, DEVICE.gate), _speedup(cell, WALL.gate)
    assert device is not None and wall is not None, "a timed cell has a device-time and a wall-clock speedup"
    return [device] if cell.estimate(device) is not None else [wall]


def _interval(cell: TimedRecord, group: str, kind: RatioKind, est: SpeedupEstimate, verdict: object) -> Figure:
    """A ratio with its interval: measured by its kind's name ("device-speedup"), labelled by its kind."""
    ratio = cell.ratio(kind)
    return Figure(cell.test_id, group, f"{kind.name}-speedup", ratio_label(kind, cell),
                  est.speedup, est.low, est.high, est.confidence, tolerance=ratio.tolerance,
                  baseline=ratio.baseline_speedup, verdict=str(verdict) if verdict is not None else None)


def _speedups(cell: TimedRecord, group: str) -> tuple[list[Figure], list[str]]:
    """The speedups that held the cell, each with its interval and verdict, then its ratios over a versus
    side (a compiled cell's), which gate it beside them."""
    figures, missing = [], []
    for kind in gating_speedups(cell):
        est = cell.estimate(kind)
        if est is None:
            missing.append(kind.label)
            continue
        figures.append(_interval(cell, group, kind, est, cell.verdict_of(kind)))
    for kind in (k for k in cell.RATIOS.values() if k.over):
        est = cell.estimate(kind)
        if est is not None:
            figures.append(_interval(cell, group, kind, est, cell.ratio(kind).verdict))
    return figures, missing


def _energy(cell: SpeedRecord, group: str) -> list[Figure]:
    """The cell's energy per step over fp32's, where its card's energy counter was read: no tolerance, no verdict."""
    energy = cell.energy
    if energy is None:
        return []
    return [Figure(cell.test_id, group, "energy-ratio", "energy per step / fp32's", energy.ratio,
                   bigger_is_better=False, relative=("fp32's energy per step / the mode's", 1.0 / energy.ratio))]


def _memory(cell: MemoryRecord, group: str) -> tuple[list[Figure], list[str]]:
    figures, missing = [], []
    verdict = str(cell.verdict) if cell.verdict is not None else None
    if cell.memory_ratio is None:
        missing.append("memory ratio")
    else:
        figures.append(Figure(cell.test_id, group, "memory-ratio", "peak memory / fp32's", cell.memory_ratio,
                              bigger_is_better=False, tolerance=cell.tolerance,
                              baseline=cell.baseline_memory_ratio, verdict=verdict,
                              relative=("fp32's peak memory / the mode's", 1.0 / cell.memory_ratio)))
    if cell.batch_searched and cell.max_batch_ratio is not None:
        figures.append(Figure(cell.test_id, group, "largest-batch-ratio", "largest batch / fp32's",
                              cell.max_batch_ratio, tolerance=cell.tolerance, verdict=verdict))
    return figures, missing


def _convergence(cell: ConvergenceRecord, group: str) -> tuple[list[Figure], list[str]]:
    delta = cell.accuracy_delta
    if delta is None:
        return [], ["accuracy against its reference"]
    # accuracies are written as fractions (by older writers, percentages): the gap is in points
    scale = 100.0 if max(cell.accuracy or 0, cell.accuracy_ref or 0) <= 1 else 1.0
    margin = cell.margin * scale if cell.margin is not None else None
    parity = cell.reference or "fp32"
    # a delta is of both accuracies (``accuracy_delta``)
    relative = ((f"accuracy / {parity}'s", cell.accuracy / cell.accuracy_ref)
                if cell.accuracy_ref and cell.accuracy is not None else None)
    return [Figure(cell.test_id, group, "accuracy-gap", f"accuracy against {parity}", delta * scale, unit="pts",
                   tolerance=margin, verdict=str(cell.verdict) if cell.verdict is not None else None,
                   relative=relative)], []


def _paired(cell: PairedRecord, group: str) -> tuple[list[Figure], list[str]]:
    """Each figure of a paired cell: head's value, its interval (base's value times the interval of head over
    base), base's value as its baseline, the tolerance and verdict the pairs gave it."""
    figures, missing = [], []
    for name, f in cell.named_figures():
        label = f.label or name.replace("_", " ")
        if f.head is None or f.base is None or f.head <= 0 or f.base <= 0:
            missing.append(label)
            continue
        low, high = ((f.base * (1 + f.change_low), f.base * (1 + f.change_high))
                     if f.change_low is not None and f.change_high is not None else (None, None))
        lower = f.lower_is_better is True
        figures.append(Figure(cell.test_id, group, f"paired-{name.replace('_', '-')}", f"{label}, head", f.head,
                              low, high, f.confidence, bigger_is_better=not lower, unit=f.unit or "x",
                              tolerance=f.tolerance, baseline=f.base,
                              verdict=str(f.verdict) if f.verdict is not None else None,
                              relative=(f"{label}, base over head", f.base / f.head) if lower else None))
    return figures, missing


def gated_figures(run: Run) -> Figures:
    """Every gated figure of `run`, in run order, and the cells without one."""
    out = Figures(run)
    for cell in run.cells:
        group = entry_group(cell.kind, cell.model)
        if isinstance(cell, TimedRecord):
            figures, missing = _speedups(cell, group)
            figures += _energy(cell, group) if isinstance(cell, SpeedRecord) else []
        elif isinstance(cell, MemoryRecord):
            figures, missing = _memory(cell, group)
        elif isinstance(cell, ConvergenceRecord):
            figures, missing = _convergence(cell, group)
        elif isinstance(cell, PairedRecord):
            figures, missing = _paired(cell, group)
        else:
            out.left_out.append((cell.test_id, f"no figure gates {cell.kind.replace('_', ' ')} cells"))
            continue
        out.figures += figures
        if missing:
            out.left_out.append((cell.test_id, f"the run holds no {' or '.join(missing)} of it"))
    return out


def cell_margins(figures: Figures) -> dict[str, Figure]:
    """Each cell's figure with the largest margin (``Figure.margin``), by test id, in run order: a cell
    fails where any figure that holds it does, so its margin is its worst figure's. Cells none of whose
    figures is held to a line are absent."""
    out: dict[str, Figure] = {}
    for f in figures.figures:
        m = f.margin
        if m is None:
            continue
        kept = out.get(f.test_id)
        if kept is None or m > float(kept.margin or 0.0):
            out[f.test_id] = f
    return out
