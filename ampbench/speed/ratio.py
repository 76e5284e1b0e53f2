"""One gated ratio of a speed cell, as one object: the wall-clock speedup, the device-time speedup, a
compiled cell's ratio over its versus side, and a distributed cell's speedup (wall clock and device time)
and scaling efficiency.

A `RatioKind` row says everything that differs between them (where its figures live, what messages call
it, which --perf-gate value gates it, its tolerance's floor, whether it is held only against a baseline
measured by the same device-time method); a `Ratio` holds one against the cell's baseline entry
(``ratio_check``: one tolerance rule for every kind), times it (``time_figure``), and gives its record
fields and what a recording stores of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ampbench import progress
from ampbench.baselines.entries import FlatEntry, RatioEntry, SpeedEntry
from ampbench.speed import judging
from ampbench.speed import sides
from ampbench.speed.timing import PairedTimer
from ampbench.stats import SpeedupEstimate, median
from ampbench.verdict import WALL_TOLERANCE_FLOOR, SpeedupCheck, Verdict
from ampbench.baselines.entries import entry_tolerance

RECORD_AGAIN = "record with --perf-update-baselines"


@dataclass(frozen=True)
class RatioKind:
    """What one kind of ratio is: its names, its gate and its tolerance's floor."""

    prefix: str  # of its figures in a speed record and a baseline entry: "", "device_", "versus_"
    heading: str  # how a cell's message introduces it ({method}, {figure}: the ratio's)
    failing: str  # what a failing cell's message calls it
    short: str  # what a malformed estimate is called
    gate: str  # the --perf-gate figure that gates it (settings.GATES)
    scope: str  # the progress line while it is timed
    same_method: bool  # held only against a baseline measured by the same device-time method
    floor: float  # its tolerance's floor beside the user's --perf-tolerance
    missing: str  # why it is unchecked where the entry lacks it ({over}: the versus side)
    other_method: str  # what starts the sentence where the entry measured it by another method
    no_entry: str  # why it is unchecked without an entry ("" where the cell says it once)
    over: bool  # a ratio over the versus side (the entry names it under "versus"), not over fp32
    verdict_key: str  # its verdict's name in a speed record
    steps: bool  # its step and round times are recorded under its prefix, and its interval across runs
    stores_tolerance: bool  # a recording stores the tolerance it gives (what the file guards)
    stores_fallback: bool  # a recording stores why its device time fell back (null where none)
    called: str = ""  # what a warning of its device time's fallback calls it


# a wall-clock speedup on a shared host wanders more than device time (``verdict.WALL_TOLERANCE_FLOOR``)
WALL = RatioKind(prefix="", heading="wall", failing="wall-clock speedup over fp32", short="wall-clock", gate="wall",
                 scope="wall clock", same_method=False, floor=WALL_TOLERANCE_FLOOR,
                 missing="no wall-clock baseline: " + RECORD_AGAIN, other_method="", no_entry="", over=False,
                 verdict_key="wall_verdict", steps=True, stores_tolerance=False, stores_fallback=False)
DEVICE = RatioKind(prefix="device_", heading="device time ({method})", failing="device-time speedup over fp32",
                   short="device-time", gate="device", scope="device time", same_method=True, floor=0.0,
                   missing="no device-time baseline: " + RECORD_AGAIN, other_method="device time ", no_entry="",
                   over=False, verdict_key="device_verdict", steps=True, stores_tolerance=True,
                   stores_fallback=True, called="device time")
# a compiled cell's second ratio is a device-time figure: it holds the cell wherever device time does
VERSUS = RatioKind(prefix="versus_", heading="{figure} ({method})", failing="{figure}", short="{figure}",
                   gate="device", scope="over its versus side", same_method=True, floor=0.0,
                   missing="no baseline of this ratio over {over}: " + RECORD_AGAIN, other_method="",
                   no_entry="no baseline for this GPU", over=True, verdict_key="versus_verdict", steps=False,
                   stores_tolerance=True, stores_fallback=False, called="{figure}")
# a distributed cell's wall-clock figures, timed by its launch and judged there: reported beside its device
# time, gating under --perf-gate wall or both, or where its entry holds no device time
DISTRIBUTED = RatioKind(prefix="", heading="speedup", failing="speedup under the same parallelism", short="speedup",
                        gate="wall", scope="", same_method=False, floor=0.0, missing="no baseline", other_method="",
                        no_entry="", over=False, verdict_key="verdict", steps=False, stores_tolerance=False,
                        stores_fallback=False)
# its device time: the least busy rank's per round (``distributed.figures.per_round_min``), the gate by default
DIST_DEVICE = RatioKind(prefix="device_", heading="device time ({method})",
                        failing="device-time speedup under the same parallelism", short="device-time", gate="device",
                        scope="", same_method=True, floor=0.0, missing="no device-time baseline: " + RECORD_AGAIN,
                        other_method="device time ", no_entry="", over=False, verdict_key="device_verdict",
                        steps=False, stores_tolerance=True, stores_fallback=True, called="device time")
# its scaling efficiency in device time: rank 0's 1-GPU graph replays over the N-GPU ones, gating beside the
# device-time speedup
DIST_DEVICE_EFFICIENCY = RatioKind(prefix="device_scaling_", heading="scaling efficiency in device time ({method})",
                                   failing="scaling efficiency in device time", short="device scaling efficiency",
                                   gate="device", scope="", same_method=True, floor=0.0,
                                   missing="no device-time scaling baseline: " + RECORD_AGAIN,
                                   other_method="device time ", no_entry="", over=False,
                                   verdict_key="device_scaling_verdict", steps=False, stores_tolerance=True,
                                   stores_fallback=False, called="device scaling efficiency")
EFFICIENCY = RatioKind(prefix="scaling_", heading="scaling efficiency", failing="scaling efficiency",
                       short="scaling efficiency", gate="wall", scope="", same_method=False, floor=0.0,
                       missing="no baseline", other_method="", no_entry="", over=False, verdict_key="verdict",
                       steps=False, stores_tolerance=False, stores_fallback=False)


@dataclass
class Ratio:
    """One ratio of a cell: held against its baseline, then timed."""

    kind: RatioKind
    figure: str = "speedup over fp32"  # what its check's messages call it
    over: str | None = None  # the versus side's label, for a ratio over it
    method: str | None = None  # how its device time is measured; None in wall clock
    fallback: str | None = None  # why not by graph replay, where that was wanted
    check: SpeedupCheck | None = None
    why_unchecked: str = ""
    timed: judging.TimedFigure | None = None
    gated: bool = False
    pair: tuple[sides.Side, sides.Side] | None = None  # (the side it is over, the mode's), until released
    timing: sides.DeviceTiming | None = None  # how its device time is measured; None in wall clock

    @classmethod
    def between(cls, kind: RatioKind, over: sides.Side, side: sides.Side, figure: str = "speedup over fp32",
                over_label: str | None = None) -> "Ratio":
        """The ratio of `side` over `over`, in device time where its kind is (both sides measured alike)."""
        timing = sides.device_timing(over, side) if kind.same_method else None
        return cls(kind, figure, over_label, timing.method if timing else None, timing.fallback if timing else None,
                   pair=(over, side), timing=timing)

    def hold(self, model: str, mode: str, entry: FlatEntry | None, floor: float,
             held_back: Callable[[str], Callable[[float, float], str | None]] | None = None) -> "Ratio":
        """Build its check against `entry` (the cell's baseline entry) under the user's `floor`; where a
        history judges it, `held_back` (by prefix) says what fails a run with the runs it held back."""
        self.check, self.why_unchecked = ratio_check(self, model, mode, entry, floor)
        if self.check is not None and held_back is not None:
            self.check = replace(self.check, held_back=held_back(self.kind.prefix))
        return self

    def time(self, policy: sides.SpeedPolicy, gated: bool) -> "Ratio":
        """Time it in interleaved rounds of its two sides: judged (extended, confirmed) where it gates the
        cell, else its first look."""
        self.gated = gated
        with progress.scope(self.kind.scope):
            self.timed = judging.time_figure(self.check, self._timer(policy), policy, gated)
        return self

    def _timer(self, policy: sides.SpeedPolicy) -> Callable[[], PairedTimer]:
        over, side = self.pair
        if self.timing is not None:
            return lambda: self.timing.timer(over, side, policy)
        return lambda: sides.fresh_timer(over, side, policy)

    @property
    def estimate(self) -> SpeedupEstimate:
        return self.timed.outcome.estimate

    @property
    def verdict(self) -> Verdict:
        return self.timed.outcome.verdict

    @property
    def gated_verdict(self) -> Verdict | None:
        """Its verdict where it gates the cell; None where it is only reported."""
        return self.verdict if self.gated else None

    def named(self, template: str) -> str:
        return template.format(method=self.method, figure=self.figure, over=self.over)

    @property
    def message(self) -> str:
        outcome = self.timed.outcome
        if self.kind.over and self.check is None:
            return f"{self.named(self.kind.heading)}: {outcome.estimate}; {self.why_unchecked}"
        return f"{self.named(self.kind.heading)}: {outcome.message}"

    def across_runs(self, entry: FlatEntry | None) -> SpeedupEstimate | None:
        """Its estimate widened by the between-run spread its baseline `entry` learned (None where none)."""
        spread = entry.ratio(self.kind.prefix) if entry is not None else RatioEntry()
        return judging.across_runs_of(self.estimate, spread.between_run_sd)

    def step_seconds(self) -> tuple[float, float]:
        """The median per-step time of the mode and of the side it is over, across its first batch."""
        return median(self.timed.first.mode_times), median(self.timed.first.ref_times)

    def record_fields(self, entry: SpeedEntry | None = None) -> dict[str, Any]:
        """Its figures under a speed record's names."""
        kind, p = self.kind, self.kind.prefix
        fields = self.timed.outcome.fields(p, self.check, kind.verdict_key)
        if kind.same_method:
            fields.update({f"{p}method": self.method, f"{p}fallback": self.fallback})
        if kind.over:
            fields.update(versus=self.over, versus_step_ms=self.step_seconds()[1] * 1e3)
        if kind.steps:
            first = self.timed.first
            step, ref = self.step_seconds()
            across = self.across_runs(entry)
            fields.update({f"{p}step_ms": step * 1e3, f"{p}step_ms_ref": ref * 1e3,
                           f"{p}round_ms": [t * 1e3 for t in first.mode_times],
                           f"{p}ref_round_ms": [t * 1e3 for t in first.ref_times],
                           f"{p}speedup_across_low": across.low if across else None,
                           f"{p}speedup_across_high": across.high if across else None})
        return fields

    def same_figure(self, previous: SpeedEntry | None) -> bool:
        """Whether `previous` holds this very ratio: over the same side, by the same method."""
        if previous is None:
            return False
        old = previous.ratio(self.kind.prefix)
        return ((not self.kind.over or previous.versus == self.over)
                and (not self.kind.same_method or old.method == self.method))

    def recorded(self, previous: SpeedEntry | None, comparable: bool, measured_alike: bool,
                 policy: sides.SpeedPolicy, floor: float) -> dict[str, Any]:
        """What a recording stores of it: both batches pooled and its noise (against `previous`'s figure
        where `comparable`: the same software, measured the same way), its step times, and the
        between-run spread it learned wherever it was measured alike (`measured_alike`: the same
        settings, on any software: ``RatioEntry.kept_spread``), which its stored tolerance allows for."""
        same = self.same_figure(previous)
        old = previous.ratio(self.kind.prefix) if same else None
        pooled, noise = self.timed.recording(policy, old.speedup if old else None, comparable and same)
        kept = old.kept_spread() if old is not None and measured_alike else RatioEntry()
        step, ref = self.step_seconds() if self.kind.steps else (None, None)
        tolerance = entry_tolerance(floor, kept, noise) if self.kind.stores_tolerance else None
        ratio = RatioEntry(speedup=pooled.speedup, ci_low=pooled.low, ci_high=pooled.high, rounds=pooled.rounds,
                           noise=noise, tolerance=tolerance, method=self.method if self.kind.same_method else None,
                           fallback=self.fallback if self.kind.stores_fallback else None,
                           step_ms=step and step * 1e3, step_ms_ref=ref and ref * 1e3,
                           **{name: getattr(kept, name) for name in RatioEntry.SPREAD})
        over = {"versus": self.over} if self.kind.over else {}
        return {**over, **ratio.figures(self.kind.prefix, nulls=("fallback",) if self.kind.stores_fallback else ())}

    def release(self) -> None:
        """Drop its sides and timers, and with them the trainers they hold."""
        self.pair = None
        if self.timed is not None:
            self.timed.release()


def ratio_check(ratio: Ratio, model: str, mode: str, entry: FlatEntry | None,
                floor: float) -> tuple[SpeedupCheck | None, str]:
    """The check of `ratio` against the cell's baseline `entry`, or None and why not. One tolerance rule
    for every kind: the ratio's learned spread, else twice its recorded noise, at least
    UNLEARNED_TOLERANCE until a spread is learned, never below the user's `floor` or the kind's."""
    kind = ratio.kind
    if entry is None:
        return None, ratio.named(kind.no_entry)
    held = entry.ratio(kind.prefix)
    if (kind.over and getattr(entry, "versus", None) != ratio.over) or held.speedup is None:
        return None, ratio.named(kind.missing)
    if kind.same_method and held.method != ratio.method:
        return None, (f"{kind.other_method}measured by {held.method} in the baseline and by {ratio.method} here: "
                      + RECORD_AGAIN)
    tolerance = entry_tolerance(max(floor, kind.floor), held)
    return SpeedupCheck(model, mode, float(held.speedup), tolerance, ratio.figure), ""
