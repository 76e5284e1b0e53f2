"""How far a figure may move before it is a regression: each figure's tolerance, set once from the user's
floor, the noise recorded with its baseline and the between-run spread learned from its runs (`tolerance_rule`),
with what set it (the BY_* rules), and the `Reference` a figure is judged against, which carries it to its check
(``verdict.SpeedupCheck``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from ampbench.stats import finite_number, t_quantile
from ampbench.verdict import GroupRule, SpeedupCheck

# Until its between-run spread is learned, a cell's tolerance is at least this many times the noise
# recorded with its baseline, so cells whose speedup wanders between runs (host-bound steps) do not
# fail on that wandering.
NOISE_MULTIPLIER = 2.0
# A between-run spread learned from fewer values than this is reported but does not loosen a verdict:
# with one degree of freedom, two values sit close together or far apart by chance.
MIN_SPREAD_VALUES = 3
# Until then a cell judged against its baseline has a tolerance of at least this: one recording knows
# its own rounds, not where another card or compilation lands (docs/design.md, "Why the speed cell's
# constants are what they are").
UNLEARNED_TOLERANCE = 0.03
# The coverage of the prediction bound a learned tolerance is: a run of a cell that did not change lies
# below its line by noise alone 1 time in 1,000 (one-sided 0.1%). At 99% (0.5% one-sided) each of a
# quick tier's noise-limited cells failed an unchanged run 1 time in 200 (docs/design.md, "Runs that do
# not loosen the gate").
GATE_CONFIDENCE = 0.998
# A learned tolerance's quantile is at most this many of its predictive sds. Student's t at the gate's
# coverage is 22 on 2 degrees of freedom (three runs) and 10 on 3: a spread learned from a few runs of a
# quiet cell, 0.29% apart, gave a tolerance of 9.8%. Capped at 8, a cell whose runs agree closer than
# they spread by chance fails an unchanged run 0.7 times in 1,000 from three runs and 0.2 from four, at
# the noise of the H200's quick cells, and as the t bound from five (dev/bench_few_runs.py)
FEW_RUNS_QUANTILE = 8.0


@dataclass(frozen=True)
class BetweenRuns:
    """How far a cell's speedup moves between independent runs, learned from saved runs with
    ``ampbench spread`` (or from a run history, ``ampbench.history.learn``) and stored in its baseline
    entry."""

    sd: float  # standard deviation of ln(speedup), each value's deviation from its own level's mean
    count: int  # values behind `sd`: the recording and each run that counted
    centred: bool  # the baseline figure is the geometric mean of its level's values, not the recording alone
    # the levels those values lie at: an accepted change (a re-recording) starts another level and keeps
    # the spread, so `sd` pools each level's deviations, with count - levels degrees of freedom
    levels: int = 1
    level_count: int | None = None  # values behind the baseline figure where it is centred; `count` if None
    # how far the run's card may lie from the baseline figure beyond sd^2 / level_count (its level's error
    # from cards, ``history.model``): 0 where every value came from one card or the cards' share is in `sd`
    card_sd: float = 0.0
    # degrees of freedom `sd` borrowed from the GPU model's other cells: it is the posterior of the runs'
    # own spread and a prior learned over every cell (``history.pooling``), held with the moderated t
    pooled_dof: int = 0
    # offsets of cards behind `card_sd` where it was pooled over cells (``history.pooling.card_spread``):
    # the bound's degrees of freedom then combine both terms' (Welch-Satterthwaite); None: `sd`'s alone
    card_dof: int | None = None

    @property
    def dof(self) -> int:
        """Degrees of freedom of `sd`: its own values' and those it borrowed."""
        return self.count - self.levels + self.pooled_dof

    def bound(self, confidence: float) -> float:
        """How far another run's speedup may lie from the baseline figure through run-to-run spread
        alone, with `confidence`: a prediction interval for one new value. Its quantile is Student's
        t with `dof` degrees of freedom, because `sd` itself comes from few values: from 3 values
        the 99% quantile is 9.9, not the normal 2.58 (docs/design.md); it is at most FEW_RUNS_QUANTILE
        (``quantile``). A new value differs from the mean of n values by sd x sqrt(1 + 1/n), from one of
        them (an uncentred recording) by sd x sqrt(2)."""
        return self.quantile(confidence) * self.predictive_sd

    @property
    def predictive_sd(self) -> float:
        """The sd of a new run about the baseline figure: the runs' spread about their mean, and the card's."""
        return math.sqrt(self._runs_var + self.card_sd ** 2)

    @property
    def _runs_var(self) -> float:
        factor = math.sqrt(1 + 1 / (self.level_count or self.count)) if self.centred else math.sqrt(2)
        return (factor * self.sd) ** 2

    @property
    def bound_dof(self) -> float:
        """The bound's degrees of freedom: `sd`'s, or with a card term pooled over cells, both terms'
        combined (Welch-Satterthwaite)."""
        runs, cards = self._runs_var, self.card_sd ** 2
        if self.card_dof and cards > 0:
            return (runs + cards) ** 2 / (runs ** 2 / max(self.dof, 1) + cards ** 2 / self.card_dof)
        return self.dof

    def student_quantile(self, confidence: float) -> float:
        return t_quantile((1 - confidence) / 2, self.bound_dof)

    def quantile(self, confidence: float) -> float:
        """Student's t on `bound_dof`, at most FEW_RUNS_QUANTILE."""
        return min(self.student_quantile(confidence), FEW_RUNS_QUANTILE)

    def few_runs(self, confidence: float) -> bool:
        """Whether the quantile was capped: too few degrees of freedom to learn the bound from."""
        return self.student_quantile(confidence) > FEW_RUNS_QUANTILE

    def describe_dof(self) -> str:
        """'3 runs, 2 dof' (with what was borrowed): what the learning rests on."""
        lent = f" + {self.pooled_dof} pooled" if self.pooled_dof else ""
        return f"{self.count} runs, {self.count - self.levels}{lent} dof"


# What set a tolerance (``Reference.rule``): the learned between-run spread's bound, twice the recorded
# noise, the unlearned tolerance of a figure no spread is learned for yet, the user's floor, or, in
# ``ampbench compare``, the tolerance the old run was itself judged with
BY_SPREAD, BY_NOISE, BY_UNLEARNED, BY_FLOOR, BY_OLD_RUN = (
    "learned spread", "recorded noise", "unlearned", "floor", "the old run's tolerance")
# A learned spread whose bound its few degrees of freedom capped (FEW_RUNS_QUANTILE), and one held to the
# tolerance the figure would have unlearned, which a learned one never exceeds (``tolerance_rule``)
BY_FEW_RUNS, BY_CEILING = "learned spread, few runs", "unlearned ceiling"


def tolerance_rule(floor: float, recorded_noise: float | None, between_runs: BetweenRuns | None = None,
                   confidence: float = GATE_CONFIDENCE, unlearned: float = 0.0) -> tuple[float, str]:
    """The relative drop that counts as a regression for one cell, and what set it (BY_*): the user's
    floor, or more where the cell's own recorded noise demands it, or where its speedup moves between runs.

    The baseline was measured in one run and this run is another: `between_runs` (``learned_spread``)
    says how far apart two runs land, measured, and then replaces the recorded noise, which only
    stands in for it: the noise of one recording mixes its own rounds with how far it lay from the
    previous recording, a between-run figure the learned spread already holds (counting both would
    loosen a cell several times over: docs/design.md). Pass None where no trustworthy spread is known; the
    tolerance is then at least `unlearned` (``UNLEARNED_TOLERANCE`` for a figure held against a baseline).

    A learned tolerance is never looser than the unlearned one (BY_CEILING): learning from a few runs, one
    stray run among them or a card's spread counted twice must not switch a gate off that the unlearned
    tolerance would have held. Its quantile is at most FEW_RUNS_QUANTILE (BY_FEW_RUNS).
    """
    noise = finite_number(recorded_noise)
    unlearned_candidates = [(unlearned, BY_UNLEARNED)] + ([(NOISE_MULTIPLIER * noise, BY_NOISE)]
                                                          if noise is not None else [])
    # the floor wins a tie: a user's floor is the reason a tolerance is what it is when nothing exceeds it
    ceiling = max([(floor, BY_FLOOR)] + unlearned_candidates, key=lambda c: (c[0], c[1] == BY_FLOOR))
    if between_runs is None:
        return ceiling
    learned = max((floor, BY_FLOOR), (between_runs.bound(confidence),
                                      BY_FEW_RUNS if between_runs.few_runs(confidence) else BY_SPREAD),
                  key=lambda c: (c[0], c[1] == BY_FLOOR))
    if unlearned > 0 and learned[0] > ceiling[0]:
        return ceiling[0], BY_CEILING
    return learned


def tolerance_for(floor: float, recorded_noise: float | None, between_runs: BetweenRuns | None = None,
                  confidence: float = GATE_CONFIDENCE, unlearned: float = 0.0) -> float:
    """`tolerance_rule`'s tolerance alone."""
    return tolerance_rule(floor, recorded_noise, between_runs, confidence, unlearned)[0]


# A level set by a few measurements of one side, a bisect's good side: too few for a spread's Student bound
BY_RANGE = "the good side's range"
RANGE_CEILING = 0.9  # a tolerance above it leaves no line worth judging against
# A level of 1.0 that is the base side itself, ``ampbench ab``'s pairs of base and head runs: the tolerance
# is the figure's rule's (``ab.paired.PairRule``), the pairs' own spread sets the interval instead
BY_PAIRED = "paired with the base"


def range_rule(floor: float, values: Sequence[float], level: float) -> tuple[float, str]:
    """The tolerance of `level`, set by a few measurements of one side (`values`), and its rule: the user's
    floor, or how far apart the values lie relative to the level where that is wider (a step at an unchanged
    commit lands as far from the level as the good side's runs land from each other), at most
    RANGE_CEILING. A rule of its own beside `tolerance_rule`: a bisect's few good runs learn no spread."""
    spread = (max(values) - min(values)) / level
    return min(max(floor, spread), RANGE_CEILING), BY_RANGE


@dataclass(frozen=True)
class Reference:
    """What one figure of a cell is judged against, as its baseline source gives it: a baseline file's
    entry (``baselines.entries.entry_reference``), the run history's learning of the cell
    (``history.baseline_source.HistoryBaselines.reference``), or an older run (``ampbench compare``). Its
    tolerance is computed once, here (`of`), and every check of the figure reads it (`check`)."""

    level: float  # the baseline figure: a speedup over fp32 or a versus side, a scaling efficiency
    tolerance: float  # relative; the line is level x (1 - tolerance)
    rule: str  # what set the tolerance (BY_*)
    source: str  # where the level comes from: the baseline file, the history over it, the old run
    method: str | None = None  # how its device time was measured, for a figure in device time
    recorded_noise: float | None = None  # the recording's relative half-width, which stands in for a spread
    spread: BetweenRuns | None = None  # the learned between-run (and between-card) spread, its dof
    # why a run of this figure fails with the runs its history held back before it (value, tolerance): a
    # text, or None where it does not; only a history gives one (``replay.Replay.group_failure``)
    group_failure: GroupRule | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, level: float, floor: float, recorded_noise: float | None, spread: BetweenRuns | None, *, source: str,
           method: str | None = None, confidence: float = GATE_CONFIDENCE, unlearned: float = 0.0,
           group_failure: GroupRule | None = None) -> "Reference":
        tolerance, rule = tolerance_rule(floor, recorded_noise, spread, confidence, unlearned)
        return cls(level, tolerance, rule, source, method, finite_number(recorded_noise), spread, group_failure)

    @property
    def line(self) -> float:
        return self.level * (1.0 - self.tolerance)

    @property
    def dof(self) -> float | None:
        """Degrees of freedom of the learned spread's sd, borrowed ones included; None where none is learned."""
        return self.spread.dof if self.spread is not None else None

    @property
    def why(self) -> str:
        """Why a learned tolerance is less than its spread's Student bound, in a cell's message ("" where
        it is not): too few runs to learn from, or held to the unlearned tolerance."""
        if self.spread is None or self.rule not in (BY_FEW_RUNS, BY_CEILING):
            return ""
        spread = self.spread
        if spread.few_runs(GATE_CONFIDENCE):
            few = f"too few runs to learn: {spread.describe_dof()}"
            return few if self.rule == BY_FEW_RUNS else few + "; held to the unlearned tolerance"
        return (f"held to the unlearned tolerance, below its learned bound of {spread.bound(GATE_CONFIDENCE):.1%} "
                f"({spread.describe_dof()})")

    def check(self, model: str, mode: str, figure: str = "speedup over fp32") -> "SpeedupCheck":
        return SpeedupCheck(model, mode, self.level, self.tolerance, figure, group_failure=self.group_failure,
                            why=self.why)


# The floor of a wall-clock speedup's tolerance: eager wall time on a shared host wanders more than
# device time, and the wall figure gates a cell only under --perf-gate wall or both.
WALL_TOLERANCE_FLOOR = 0.03
