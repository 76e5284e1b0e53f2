"""A cell's reference level and tolerance, learned from its run history (a ``Series``).

The level is the geometric mean of the counted runs since the last accepted change (restart): the
suite judges ratios by their relative change, so its statistics work on ln(value) (``stats.log_sd``,
``stats.geometric_mean``). The noise is pooled over every counted run, each segment's deviations from
its own mean, with count - segments degrees of freedom: a new level keeps the learned noise. A
baseline file's spread (``spread.Prior``) may be pooled in as further segments. The tolerance is the
bound the verdicts use (``verdict.tolerance_for`` with ``BetweenRuns``): the unlearned floor until the
noise rests on MIN_SPREAD_VALUES values at one level, then Student's t prediction bound.

The states a cell passes through on a new GPU model: "learning" (no counted run at the level yet: a
run records and says so), "unlearned" (judged at the unlearned tolerance), "learned".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ampbench.history.series import Series
from ampbench.baselines.entries import RatioEntry
from ampbench.baselines.spread import Prior
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.verdict import (
    MIN_SPREAD_VALUES,
    UNLEARNED_TOLERANCE,
    WALL_TOLERANCE_FLOOR,
    BetweenRuns,
    tolerance_for,
)

LEARNING, UNLEARNED, LEARNED = "learning", "unlearned", "learned"
# the run count the summary projects a young tolerance to
PROJECT_TO = 10
# the ratios judged against a baseline with the unlearned floor, as ``entries.entry_tolerance`` judges them;
# the wall-clock speedup has a floor of its own and no unlearned one (``speed_cell._checks``)
GATED_RATIOS = ("device_speedup", "versus_speedup")


def rule_for(figure: str, floor: float = DEFAULT_TOLERANCE) -> tuple[float, float]:
    """(floor, unlearned tolerance) of `figure` under the user's `floor`, as the speed verdicts hold it."""
    if figure == "speedup":
        return max(floor, WALL_TOLERANCE_FLOOR), 0.0
    return floor, UNLEARNED_TOLERANCE if figure in GATED_RATIOS else 0.0


@dataclass(frozen=True)
class Pooled:
    """The sufficient statistics of a spread pooled over segments: each value's deviation from its own
    segment's mean of ln(value)."""

    count: int  # values
    levels: int  # segments they lie in
    m2: float  # sum of squared deviations from each segment's mean

    @property
    def dof(self) -> int:
        return self.count - self.levels

    @property
    def sd(self) -> float | None:
        """Standard deviation of ln(value), None without a degree of freedom."""
        return math.sqrt(self.m2 / self.dof) if self.dof > 0 else None

    def plus(self, prior: Prior | None) -> "Pooled":
        """Pooled with a baseline file's spread, whose values lie at levels of their own."""
        if prior is None:
            return self
        return Pooled(self.count + prior.count, self.levels + prior.levels, self.m2 + prior.m2)


def pooled_segments(segments: list[list[float]]) -> Pooled:
    """The within-segment spread of the ln values of `segments` (empty ones left out)."""
    m2 = 0.0
    for logs in segments:
        if logs:
            mean = sum(logs) / len(logs)
            m2 += sum((x - mean) ** 2 for x in logs)
    return Pooled(sum(map(len, segments)), sum(1 for s in segments if s), m2)


@dataclass(frozen=True)
class CellBaseline:
    """What a cell's history says a new run of it is judged against."""

    test_id: str
    figure: str
    level: float | None  # geometric mean of the counted runs since the last restart; None: learning
    level_runs: tuple[str, ...]  # the run ids behind the level, oldest first
    first: float | None  # the value of the first of them: the run the level starts from
    pooled: Pooled  # the noise, over every counted run (and the prior's values)
    prior_count: int  # values of those from a baseline file's spread
    noise: float | None  # the widest interval half-width at the level: the recorded noise until learned
    floor: float
    unlearned: float
    confidence: float

    @property
    def level_count(self) -> int:
        return len(self.level_runs)

    @property
    def between_runs(self) -> BetweenRuns | None:
        """The learned spread the verdict allows for, where it rests on enough degrees of freedom."""
        return self._between(self.pooled.count, self.level_count)

    def _between(self, count: int, level_count: int) -> BetweenRuns | None:
        sd, dof = self.pooled.sd, count - self.pooled.levels
        if sd is None or level_count == 0 or dof + 1 < MIN_SPREAD_VALUES:
            return None
        return BetweenRuns(sd, count, True, self.pooled.levels, level_count)

    @property
    def state(self) -> str:
        if self.level is None:
            return LEARNING
        return UNLEARNED if self.between_runs is None else LEARNED

    @property
    def tolerance(self) -> float:
        """The relative drop that counts as a regression against `level`, by the verdicts' rule."""
        return tolerance_for(self.floor, self.noise, self.between_runs, self.confidence, self.unlearned)

    def tolerance_after(self, runs: int) -> float | None:
        """The tolerance once `runs` runs count at this level's noise, the further ones at this level;
        None where no noise is known yet."""
        if self.pooled.sd is None or runs <= self.pooled.count:
            return None if self.pooled.sd is None else self.tolerance
        added = runs - self.pooled.count
        between = self._between(runs, self.level_count + added)
        return tolerance_for(self.floor, self.noise, between, self.confidence, self.unlearned)

    def sentence(self) -> str:
        """How far the tolerance has been learned, for the summary: '0.9% from 4 runs; about 0.6% after 10'."""
        own = self.pooled.count - self.prior_count
        from_file = f", {self.prior_count} of them from the baseline file" if self.prior_count else ""
        if self.state == LEARNING:
            kept = (f"; noise {percent(self.pooled.sd)} from {self.pooled.count} runs kept{from_file}"
                    if self.pooled.sd is not None else "")
            return f"learning: the next accepted run sets the level{kept}"
        head = (f"{percent(self.tolerance)} from {self.pooled.count} runs{from_file}" if self.state == LEARNED else
                f"{percent(self.tolerance)} (unlearned) from {own} run{'s' * (own != 1)}; learned from "
                f"{own + MIN_SPREAD_VALUES - 1 - self.pooled.dof}")
        ahead = self.tolerance_after(PROJECT_TO) if self.pooled.count < PROJECT_TO else None
        if ahead is not None and percent(ahead) != percent(self.tolerance):
            head += f"; about {percent(ahead)} after {PROJECT_TO}"
        return head

    def into(self, ratio: RatioEntry, stores_tolerance: bool) -> RatioEntry:
        """`ratio` (a baseline entry's) with the level and the learned spread, as ``entries.learned_spread``
        reads them back: centred on the level, whose first run's value stands as the recording's, and
        with the tolerance where the ratio stores one (`stores_tolerance`); as it was while learning."""
        if self.level is None:
            return ratio
        ratio = replace(ratio, speedup=self.level, recorded_speedup=self.first)
        if self.pooled.sd is not None:
            ratio = replace(ratio, between_run_sd=self.pooled.sd, between_run_count=self.pooled.count,
                            between_run_levels=self.pooled.levels, between_run_level_count=self.level_count)
        return replace(ratio, tolerance=self.tolerance) if stores_tolerance else ratio


def percent(x: float) -> str:
    """A tolerance or a spread to two significant digits: '0.46%', '0.9%', '3%'."""
    return f"{100 * x:.2g}%"


def learn(series: Series, prior: Prior | None = None, floor: float = DEFAULT_TOLERANCE,
          confidence: float = 0.99) -> CellBaseline:
    """`series`' reference level and noise, the noise pooled with `prior` (a baseline file's spread,
    ``spread.prior_of``) where given; pass a prior only where its runs are not in the series."""
    logs = series.log_values()
    segments = [[logs[i] for i in seg if series.points[i].counts] for seg in series.segments()]
    last = series.segments()[-1] if series.points else range(0)
    at_level = [series.points[i] for i in last if series.points[i].counts]
    level = math.exp(sum(segments[-1]) / len(segments[-1])) if at_level else None
    widths = [w for w in (p.half_width for p in at_level) if w is not None]
    rule_floor, unlearned = rule_for(series.figure, floor)
    return CellBaseline(series.test_id, series.figure, level, tuple(p.run_id for p in at_level),
                        at_level[0].value if at_level else None,
                        pooled_segments(segments).plus(prior), prior.count if prior else 0,
                        max(widths) if widths else None, rule_floor, unlearned, confidence)
