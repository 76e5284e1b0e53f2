"""What a compiled speed cell adds to an eager one: dynamo's state around its compilation and timing
(a graph break or a recompile fails the cell), its compile time against the baseline, and its second
ratio, the mode against its versus side (``modes.versus_of``): the compile gain of a mode compiled
where its row is eager, fp8's speedup over compiled amp_bf16 for a row that always compiles.

The second ratio is timed as the first is: interleaved rounds of the two sides in device time, judged
against the baseline entry's ``versus_speedup`` with a tolerance of its own. Nothing here imports
pytest; ``speed_cell.measure_speed`` calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ampbench.speed import sides as speed

from ampbench.baselines import spread
from ampbench.baselines.store import measurement_mismatch
from ampbench.modes import PrecisionMode, label, shared_versus, versus_figure, versus_of
from ampbench.stats import median
from ampbench.verdict import RatioCheck, SpeedupCheck, Verdict, entry_tolerance, recorded_check


@dataclass(frozen=True)
class DynamoState:
    """What torch.compile has done in this process so far: graphs compiled and graph breaks by reason."""

    graphs: int
    breaks: dict[str, int]

    @classmethod
    def now(cls) -> "DynamoState":
        from torch._dynamo.utils import counters

        return cls(int(counters["stats"]["unique_graphs"]), dict(counters["graph_break"]))

    def breaks_since(self, earlier: "DynamoState") -> list[str]:
        return [f"{reason} (x{n - earlier.breaks.get(reason, 0)})" for reason, n in self.breaks.items()
                if n > earlier.breaks.get(reason, 0)]


# Compile time is held loosely: it follows the host's CPU as much as the compiler. Two H100 hosts of
# one kind ran the same cold compiles 1.4-1.7x apart (gpt amp_bf16 16.6 s and 27.7 s), so only three
# times the baseline (Inductor or dynamo gone badly wrong, a compile cache no longer skipped) fails a cell.
COMPILE_TIME_TOLERANCE = 2.0


def compile_time_check(model: str, mode: str, baseline: dict | None, compile_s: float | None) -> str | None:
    """Why a compiled cell's first step (its compilation, caches cold) took too long against its
    baseline entry, or None."""
    expected = baseline.get("compile_s") if baseline else None
    if compile_s is None or not isinstance(expected, (int, float)) or expected <= 0:
        return None
    return RatioCheck(model, mode, "compile time (s, caches cold)", float(expected), COMPILE_TIME_TOLERANCE,
                      "higher").failure(compile_s)


def compile_problems(mode: PrecisionMode, before: DynamoState | None, prepared: DynamoState | None,
                     timed: DynamoState | None) -> list[str]:
    """Why a compiled cell's figures do not measure one compiled graph of the step: a graph break while
    it compiled (the step then runs as several graphs with eager code between them), or a recompile
    while it was timed (the rounds then timed compilation). Nothing for an eager cell, whose states are
    not read (reading them imports dynamo)."""
    if not mode.compile:
        return []
    problems = []
    breaks = prepared.breaks_since(before)
    if breaks:
        shown = "; ".join(b[:200] for b in breaks[:3]) + (f"; and {len(breaks) - 3} more" if len(breaks) > 3 else "")
        problems.append(f"torch.compile broke the step's graph: {shown}")
    if timed.graphs > prepared.graphs:
        problems.append(f"torch.compile compiled {timed.graphs - prepared.graphs} new graph(s) while the cell was "
                        "timed (a recompile: a guard failed on the timed steps)")
    return problems


# -- the second ratio --------------------------------------------------------------------------------

def versus_check(model: str, mode: PrecisionMode, baseline: dict | None, method: str,
                 floor: float) -> tuple[SpeedupCheck | None, str]:
    """(the check of `mode`'s second ratio against its baseline entry, or None with why not)."""
    versus = label(versus_of(mode))
    if baseline is None:
        return None, "no baseline for this GPU"
    missing = f"no baseline of this ratio over {versus}: record with --perf-update-baselines"
    if baseline.get("versus") != versus:
        return None, missing
    return recorded_check(model, label(mode), baseline, "versus_", method, floor, missing, versus_figure(mode))


@dataclass
class Versus:
    """A compiled cell's second ratio, timed: the mode's device-time speedup over its versus side."""

    label: str  # the versus side's mode as records name it: "amp_bf16", "amp_bf16 compiled"
    figure: str  # what messages call the ratio: "compile gain over amp_bf16"
    timing: speed.DeviceTiming
    check: SpeedupCheck | None
    why_unchecked: str  # why there is no check ("" where there is one)
    timed: speed.TimedFigure
    gated: bool  # its verdict joins the cell's (the device gate)

    @property
    def verdict(self) -> Verdict:
        return self.timed.outcome.verdict

    @property
    def message(self) -> str:
        outcome = self.timed.outcome
        if self.check is None:
            return f"{self.figure} ({self.timing.method}): {outcome.estimate}; {self.why_unchecked}"
        return f"{self.figure} ({self.timing.method}): {outcome.message}"

    def record_fields(self) -> dict[str, Any]:
        """The ratio's figures under the speed record's versus_* names."""
        return dict(versus=self.label, versus_method=self.timing.method, versus_fallback=self.timing.fallback,
                    **self.timed.outcome.fields("versus_", self.check),
                    versus_step_ms=median(self.timed.first.ref_times) * 1e3)

    def baseline_figures(self, previous: dict | None, comparable: bool, measured_with: dict[str, object],
                         policy: speed.SpeedPolicy, floor: float) -> dict[str, Any]:
        """What a recording stores of the ratio: both batches pooled, its noise from the two batches,
        and, where `previous` holds the same ratio (over the same side, by the same method), how far it
        lay from that one where recorded `comparable`-ly (the same software, measured the same way), and
        the between-run spread it learned wherever it was measured the same way (`measured_with`, on any
        software: ``spread.kept_on_rerecording``), which the stored tolerance allows for."""
        same_ratio = (previous is not None and previous.get("versus") == self.label
                      and previous.get("versus_method") == self.timing.method)
        pooled, noise = self.timed.recording(policy, previous, comparable and same_ratio, "versus_speedup")
        alike = same_ratio and measurement_mismatch(previous, measured_with) is None
        kept = spread.carried(previous, alike, spread.VERSUS_SPREAD_FIGURES)
        return {"versus": self.label, **speed.recorded_figures("versus_", pooled, noise),
                "versus_tolerance": entry_tolerance(floor, kept, "versus_", noise),
                "versus_method": self.timing.method, **kept}


def measure_versus(model: str, mode: PrecisionMode, versus: speed.Side, side: speed.Side, baseline: dict | None,
                   floor: float, policy: speed.SpeedPolicy, gated: bool) -> Versus:
    """Time `side` against `versus` in interleaved device-time rounds and judge the ratio (extended and
    confirmed where `gated`, else its first look)."""
    timing = speed.device_timing(versus, side)
    check, why = versus_check(model, mode, baseline, timing.method, floor)
    timed = speed.time_figure(check, lambda: timing.timer(versus, side, policy), policy, gated)
    return Versus(label(versus_of(mode)), versus_figure(mode), timing, check, why, timed, gated)


def served(precisions: Iterable[str]) -> set[str]:
    """Labels of the versus sides that more than one cell is timed against (``modes.shared_versus``)."""
    return {label(m) for m in shared_versus(precisions)}


class VersusSides:
    """The one versus side kept between a model's cells. A cold compile of a large model costs 20-60 s
    on an H100, so a side that several cells are timed against (`served`: compiled amp_bf16) is compiled
    once, and where its own compiled cell ran, that cell's side is the one kept; every other versus side
    (a mode eager, for one compiled cell's compile gain) serves one cell and goes. So at most the
    reference, the mode and one versus side occupy the device."""

    def __init__(self, served: set[str]) -> None:
        self.served = served
        self.key: tuple[str, str] | None = None  # (model, the side's mode label)
        self.side: speed.Side | None = None

    def get(self, model: str, mode: PrecisionMode, make: Callable[[], speed.Side]) -> speed.Side:
        """The kept side of `mode`, else the one `make` builds (the kept one dropped first)."""
        key = (model, label(mode))
        if self.key != key:
            self.drop()
            self.side, self.key = make(), key
        return self.side

    def offer(self, model: str, mode: PrecisionMode, side: speed.Side) -> speed.Side:
        """`side`, a cell's own side of `mode`, kept where later cells are timed against it."""
        if label(mode) in self.served:
            self.side, self.key = side, (model, label(mode))
        return side

    def settle(self) -> bool:
        """Drop a kept side that no later cell is timed against; whether one was dropped."""
        if self.key is None or self.key[1] in self.served:
            return False
        self.drop()
        return True

    def drop(self) -> None:
        self.key = self.side = None
