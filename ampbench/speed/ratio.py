"""A speed cell's ratios (`cell_ratios`), each through its stages. Its kind (``ampbench.results.ratios``:
the device-time or wall-clock speedup, a compiled cell's ratio over its versus side, a distributed cell's
figures) says every name and rule it has, and the clock that times it (``clocks.CLOCKS``). A `Ratio` is
built over its two sides with that clock (`between`), checked against what its baseline source gives it
(`judge_against`: ``gate.judge.ratio_check``, one tolerance rule for every kind), then measured
(``measurement.measure``) and judged (``gate.judge.judge``) by `time`, and written (``gate.writers``): its figures
for the record and what a recording stores of it. Each stage reads what the ones before it left, and none
knows the next.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ampbench import progress
from ampbench.baselines.entries import FlatEntry, RatioEntry, SpeedEntry
from ampbench.baselines.source import BaselineSource
from ampbench.gate.judge import gates, judge, ratio_check
from ampbench.gate.measurement import Measurement
from ampbench.gate.writers import across_runs_of, entry_figures, record_figures
from ampbench.modes import PrecisionMode, label, versus_figure, versus_of
from ampbench.results.ratio_figures import RatioFigures
from ampbench.results.ratios import DEVICE, SPEED_RATIOS, WALL, RatioKind
from ampbench.speed import sides
from ampbench.speed.clocks import CLOCKS, Clock
from ampbench.speed.measurement import measure, with_noise
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import Reference
from ampbench.verdict import SpeedupCheck, Verdict


@dataclass
class Ratio:
    """One ratio of a cell: what it is (its kind, what its check calls it, the side it is over, how its
    device time is measured), its clock, what it is judged against, and, once timed, its measurement,
    verdict and judgement."""

    kind: RatioKind
    figure: str = "speedup over fp32"  # what its check's messages call it
    over: str | None = None  # the versus side's label, for a ratio over it
    method: str | None = None  # how its device time is measured; None in wall clock
    fallback: str | None = None  # why not by graph replay, where that was wanted
    clock: Clock | None = None  # None once released: it holds both sides' trainers
    check: SpeedupCheck | None = None
    why_unchecked: str = ""
    # once timed (`time`): what its clock measured, and what the judge said of it
    _measurement: Measurement | None = field(default=None, init=False, repr=False)
    verdict: Verdict | None = field(default=None, init=False)
    judgement: str = field(default="", init=False)  # how it compares with what it is judged against

    @classmethod
    def between(cls, kind: RatioKind, over: sides.Side, side: sides.Side, figure: str = "speedup over fp32",
                over_label: str | None = None) -> "Ratio":
        """The ratio of `side` over `over`, timed by the clock its kind names."""
        clock = CLOCKS[kind.clock](over, side)
        return cls(kind, figure, over_label, clock.method, clock.fallback, clock)

    def judge_against(self, model: str, mode: str, entry: FlatEntry | None, reference: Reference | None) -> "Ratio":
        """Build its check against `reference`, what its baseline source gives the ratio (``BaselineSource``),
        where `entry`, the cell's baseline entry, was measured as this run measures it."""
        self.check, self.why_unchecked = ratio_check(self.kind, model, mode, entry, reference, figure=self.figure,
                                                     over=self.over, method=self.method)
        return self

    def time(self, policy: sides.SpeedPolicy, gated: bool) -> "Ratio":
        """Measure it in interleaved rounds of its two sides (looked at until they decide against its check,
        and confirmed, where it gates the cell; else its first look), then judge the measurement."""
        with progress.scope(self.kind.scope):
            self._measurement = measure(self._clock, policy, self.check, gated)
        self.verdict, self.judgement = judge(self._measurement, self.check)
        return self

    @property
    def _clock(self) -> Clock:
        if self.clock is None:
            raise RuntimeError(f"the {self.kind.name} ratio's clock was released")
        return self.clock

    @property
    def measurement(self) -> Measurement:
        if self._measurement is None:
            raise RuntimeError(f"the {self.kind.name} ratio is not timed yet")
        return self._measurement

    @property
    def estimate(self) -> SpeedupEstimate:
        """Its first rounds' estimate."""
        return self.measurement.estimate

    @property
    def confirmation(self) -> SpeedupEstimate | None:
        """Its confirming rounds' estimate, where a regression asked for them."""
        return self.measurement.confirmation

    @property
    def gated(self) -> bool:
        """Whether it gates its cell: measured to be judged, not only looked at."""
        return self._measurement is not None and self._measurement.gated

    @property
    def gated_verdict(self) -> Verdict | None:
        """Its verdict where it gates the cell; None where it is only reported."""
        return self.verdict if self.gated else None

    def named(self, template: str) -> str:
        return template.format(method=self.method, figure=self.figure, over=self.over)

    @property
    def message(self) -> str:
        if self.kind.over and self.check is None:
            return f"{self.named(self.kind.heading)}: {self.estimate}; {self.why_unchecked}"
        return f"{self.named(self.kind.heading)}: {self.judgement}"

    def across_runs(self, entry: FlatEntry | None) -> SpeedupEstimate | None:
        """Its estimate widened by the between-run spread its baseline `entry` learned (None where none)."""
        spread = entry.ratio(self.kind) if entry is not None else RatioEntry()
        return across_runs_of(self.estimate, spread.between_run_sd)

    def step_seconds(self) -> tuple[float, float]:
        """The median per-step time of the mode and of the side it is over, across its first rounds."""
        return self.measurement.first.step_seconds()

    def figures(self, entry: SpeedEntry | None = None) -> RatioFigures:
        """Its figures as the cell's record holds them (``gate.writers.record_figures``)."""
        return record_figures(self.kind, self.measurement, self.verdict, self.check, entry)

    def recorded(self, previous: SpeedEntry | None, comparable: bool, measured_alike: bool,
                 policy: sides.SpeedPolicy, floor: float) -> dict[str, Any]:
        """What a recording stores of it (``gate.writers.entry_figures``), a second set of rounds timed first
        where none was taken (``measurement.with_noise``)."""
        self._measurement = with_noise(self.measurement, self._clock, policy)
        return entry_figures(self.kind, self.over, self._measurement, previous, comparable, measured_alike, floor,
                             policy.rounds.confidence)

    def release(self) -> None:
        """Drop its clock, which holds both sides' trainers (its measurement holds none)."""
        self.clock = None


def _between_sides(kind: RatioKind, mode: PrecisionMode, fp32: sides.Side, side: sides.Side,
                   versus: sides.Side | None) -> Ratio | None:
    """The cell's ratio of `kind`: over fp32's side, or over its versus side where the kind is (only a
    compiled cell has one)."""
    if not kind.over:
        return Ratio.between(kind, fp32, side)
    figure, versus_mode = versus_figure(mode), versus_of(mode)
    if versus is None or figure is None or versus_mode is None:
        return None
    return Ratio.between(kind, versus, side, figure, label(versus_mode))


def cell_ratios(model: str, mode: PrecisionMode, fp32: sides.Side, side: sides.Side, versus: sides.Side | None,
                baseline: SpeedEntry | None, gate: str, policy: sides.SpeedPolicy,
                source: BaselineSource | None = None, test_id: str = "", floor: float = 0.0) -> list[Ratio]:
    """A speed cell's ratios, in their table's order (``SPEED_RATIOS``), each built over its sides (the mode's
    `side`, over `fp32` or its `versus` side), checked against what the cell's baseline `source` gives it under
    `floor` (``BaselineSource.reference`` of `test_id`, by the ratio's kind; nothing without a source), then
    timed: judged where it gates the cell under --perf-gate `gate`, else its first look."""
    # asked here, where each ratio takes it, so that the cell only hands its source on
    def against(kind: RatioKind) -> Reference | None:
        return source.reference(test_id, kind, floor) if source is not None else None

    checked = {kind.name: ratio.judge_against(model, label(mode), baseline, against(kind))
               for kind in SPEED_RATIOS.values()
               if (ratio := _between_sides(kind, mode, fp32, side, versus)) is not None}
    gated = gates(gate, checked[DEVICE.name].check, checked[WALL.name].check)
    return [ratio.time(policy, ratio.kind.gate in gated) for ratio in checked.values()]
