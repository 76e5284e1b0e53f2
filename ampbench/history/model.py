"""A cell's figure over runs on several cards of one GPU model: how far a new run lands from its level by
noise alone, on the card it runs on.

On y = ln(value) of a counted run on card c in level segment s (accepted changes cut the segments):

    y = mu_s + b_c + e,    b_c ~ N(0, tau^2) (the card's offset),    e ~ N(0, sigma_w^2) (run to run)

Two views of it, each a calibrated prediction for the runs it is used for:
- **The segment's level** (every run, whatever its card): the plain mean of the segment's counted runs,
  and the total noise sigma pooled over each segment's deviations from its own mean (n - segments
  degrees of freedom, a baseline file's spread pooled in as levels of its own). Runs drawn from a fleet
  of cards carry the cards' spread in sigma, so a new run on any of them is predicted with
  sigma^2 (1 + 1/n): the single-level rule the verdicts use (``tolerance.BetweenRuns``).
- **A card's own level**, once the card has CARD_RUNS counted runs in the segment and the within-card
  noise sigma_w (each (segment, card) group's deviations from its own mean) has CARD_DOF degrees of
  freedom: the card's best linear unbiased prediction, its runs' mean pulled toward the segment's by
  tau^2 / (tau^2 + sigma_w^2 / n), predicted with sigma_w^2 plus that level's error, at sigma_w's degrees
  of freedom. tau^2 comes from how far the cards' means lie apart within segments beyond what sigma_w
  explains (one-way random effects by moments). A runner that keeps to one card is held to that card's
  own noise; the choice of view depends on counts alone, never on the values.

A card the history has not seen, where every run so far came from one card and no baseline file's
spread (learned on other cards) is pooled in, may lie further off than the runs have shown: its
prediction adds tau^2 = ASSUMED_CARD_SHARE x sigma^2, so that a fleet's first run on a second card is
neither a false alarm nor a change.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Hashable, Mapping

from ampbench.baselines.spread import Prior

# the card of a run the history has not seen: a baseline file's level serves any card of the model
NEW_CARD = ("a card the history has not seen",)
# tau^2 / sigma^2 for a card not seen where every run so far came from one card and no file spread is in
ASSUMED_CARD_SHARE = 1.0
# a card is held to its own level once it has this many counted runs in the segment, and the within-card
# noise this many degrees of freedom
CARD_RUNS = 3
CARD_DOF = 8
# the least sd a prediction has: a figure that never moves (a memory ratio) must not make rounding a surprise
SD_FLOOR = 1e-4


@dataclass
class Moments:
    """Count, sum and sum of squares of one group's ln values (shifted by a constant of the series, so
    that the squares keep their precision): enough to pool its deviations and take its mean."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, y: float) -> None:
        self.n, self.total, self.squares = self.n + 1, self.total + y, self.squares + y * y

    def remove(self, y: float) -> None:
        self.n, self.total, self.squares = self.n - 1, self.total - y, self.squares - y * y

    def merge(self, other: "Moments") -> None:
        self.n, self.total, self.squares = self.n + other.n, self.total + other.total, self.squares + other.squares

    @property
    def mean(self) -> float:
        return self.total / self.n

    @property
    def ss(self) -> float:
        """Sum of squared deviations from the group's mean."""
        return max(0.0, self.squares - self.total * self.total / self.n)


@dataclass(frozen=True)
class Prediction:
    """Where a new run on one card is predicted to land, and how far off by noise alone."""

    level: float  # ln, shifted as the model's values are
    sd: float | None  # of the run's ln value about `level`; None without a degree of freedom
    noise_sd: float | None  # the run-to-run part of it (sigma or sigma_w)
    dof: int  # degrees of freedom of `noise_sd`
    count: int  # values behind it
    levels: int  # groups they lie in
    level_runs: int  # runs behind `level`
    own_card: bool  # held to its card's own level

    @property
    def card_sd(self) -> float:
        """What `sd` holds beyond the run-to-run noise around a level of `level_runs` runs."""
        if self.sd is None or self.noise_sd is None:
            return 0.0
        return math.sqrt(max(0.0, self.sd ** 2 - self.noise_sd ** 2 * (1 + 1 / self.level_runs)))


@dataclass(frozen=True)
class Fit:
    """The model fitted to the counted runs."""

    sigma: float | None  # total noise of ln(value) about each segment's level; None without a dof
    dof: int
    count: int  # values behind sigma, a file's included
    levels: int  # segments (and a file's levels) they lie in
    prior_count: int
    sigma_w: float | None  # within-card noise; None without a dof
    dof_w: int
    groups: int  # (segment, card) groups behind sigma_w
    tau: float  # between-card sd (by moments; 0 where not measured)
    one_card: bool  # every counted run so far on one card, and no file spread pooled in
    level_runs: int  # counted runs in the current segment
    mean: float | None  # the current segment's level (ln, shifted); None: no counted run in it
    cards: Mapping[Hashable, Moments] = field(default_factory=dict)  # the current segment's runs by card

    def predict(self, card: Hashable = None) -> Prediction | None:
        """The prediction for a new run on `card`; None while the segment has no counted run."""
        if self.mean is None:
            return None
        own = self.cards.get(card)
        if (own is not None and own.n >= CARD_RUNS and self.sigma_w is not None and self.dof_w >= CARD_DOF
                and len(self.cards) > 1):
            level, error = self._card_level(own)
            return Prediction(level, max(SD_FLOOR, math.sqrt(self.sigma_w ** 2 + error)), self.sigma_w, self.dof_w,
                              self.dof_w + self.groups, self.groups, own.n, True)
        if self.sigma is None:
            return Prediction(self.mean, None, None, self.dof, self.count, self.levels, self.level_runs, False)
        var = self.sigma ** 2 * (1 + 1 / self.level_runs)
        if own is None and self.one_card:
            var += ASSUMED_CARD_SHARE * self.sigma ** 2
        return Prediction(self.mean, max(SD_FLOOR, math.sqrt(var)), self.sigma, self.dof, self.count, self.levels,
                          self.level_runs, False)

    def _card_level(self, own: Moments) -> tuple[float, float]:
        """A card's level (best linear unbiased prediction) and its error variance."""
        assert self.sigma_w is not None, "predict() pools the cards only where sigma_w is known"
        s2, t2 = self.sigma_w ** 2, self.tau ** 2
        weights = [1.0 / (t2 + s2 / g.n) for g in self.cards.values()]
        mean_var = 1.0 / sum(weights)
        mean = mean_var * sum(w * g.mean for w, g in zip(weights, self.cards.values()))
        v = t2 + s2 / own.n
        pull = t2 / v
        return mean + pull * (own.mean - mean), t2 * (s2 / own.n) / v + ((s2 / own.n) / v) ** 2 * mean_var


def fit(groups: Mapping[tuple[int, Hashable], Moments], segment: int, prior: Prior | None = None) -> Fit:
    """The model of counted runs in `groups`, keyed (segment, card), whose current segment is `segment`;
    `prior` a spread learned elsewhere, pooled into the total noise as levels of its own."""
    groups = {key: g for key, g in groups.items() if g.n}
    segments: dict[int, Moments] = defaultdict(Moments)
    for (seg, _), g in groups.items():
        segments[seg].merge(g)
    sst = sum(m.ss for m in segments.values())
    count, levels = sum(m.n for m in segments.values()), len(segments)
    if prior is not None:
        sst, count, levels = sst + prior.m2, count + prior.count, levels + prior.levels
    dof = count - levels
    ssw = sum(g.ss for g in groups.values())
    dof_w = sum(g.n for g in groups.values()) - len(groups)
    sigma_w = math.sqrt(ssw / dof_w) if dof_w > 0 else None
    current = {card: g for (seg, card), g in groups.items() if seg == segment}
    here = segments.get(segment)
    return Fit(math.sqrt(sst / dof) if dof > 0 else None, dof, count, levels, prior.count if prior else 0,
               sigma_w, dof_w, len(groups), _tau(groups, sigma_w),
               prior is None and len({card for _, card in groups}) <= 1,
               here.n if here else 0, here.mean if here else None, current)


def _tau(groups: Mapping[tuple[int, Hashable], Moments], sigma_w: float | None) -> float:
    """The between-card sd: how far the cards' means lie apart within segments beyond what sigma_w
    explains (method of moments); 0 where no segment has two cards or no sigma_w is known."""
    if sigma_w is None:
        return 0.0
    by_segment: dict[int, list[Moments]] = defaultdict(list)
    for (seg, _), g in groups.items():
        by_segment[seg].append(g)
    ssb = dfb = n_eff = 0.0
    for cards in by_segment.values():
        if len(cards) < 2:
            continue
        total = sum(g.n for g in cards)
        grand = sum(g.total for g in cards) / total
        ssb += sum(g.n * (g.mean - grand) ** 2 for g in cards)
        dfb += len(cards) - 1
        n_eff += total - sum(g.n ** 2 for g in cards) / total
    if dfb == 0:
        return 0.0
    return math.sqrt(max(0.0, (ssb - dfb * sigma_w ** 2) / n_eff))
