"""A cell's level and tolerance, learned from its run history (a ``Series``) by its replay.

The replay (``replay.Replay``) decides which runs count: a failed run never does, a suspect one (below its
level by more than noise says) waits until later runs clear it. The counted runs are the model's
(``model.fit``): the noise within a card, pooled over every level segment (accepted changes cut them), the
spread between cards, and the level of the run's card in the current segment, pooled toward the
segment's level where the card has few runs. The suite judges ratios by their relative change, so all of
it works on ln(value). A baseline file's spread (``spread.Prior``) may be pooled in as further levels.
The tolerance is the bound the verdicts use (``tolerance.tolerance_for`` with ``BetweenRuns``): the
unlearned floor until the noise rests on MIN_SPREAD_VALUES values at one level, then Student's t
prediction bound for a run on this card.

The states a cell passes through on a new GPU model: "learning" (no counted run at the level yet: a
run records and says so), "unlearned" (judged at the unlearned tolerance), "learned".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Hashable

from ampbench.baselines.entries import RatioEntry
from ampbench.baselines.spread import Prior
from ampbench.history.pooling import CARD_MEASURED, CardTerm, posterior_sd
from ampbench.history.replay import Replay
from ampbench.history.series import Series
from ampbench.printable import plural
from ampbench.results.ratios import of_history
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.tolerance import GATE_CONFIDENCE, MIN_SPREAD_VALUES, BetweenRuns, Reference, tolerance_for
from ampbench.verdict import GroupRule

LEARNING, UNLEARNED, LEARNED = "learning", "unlearned", "learned"
Lent = tuple[int, float]  # a pooled prior a cell borrows: its degrees of freedom d0 and its sd s0
# the run count the summary projects a young tolerance to
PROJECT_TO = 10


def rule_for(figure: str, floor: float = DEFAULT_TOLERANCE) -> tuple[float, float]:
    """(floor, unlearned tolerance) of the series `figure` under the user's `floor`: its ratio's, as the
    verdicts hold it (``results.ratios``, ``entries.entry_tolerance``); the user's floor alone for a figure
    that is no ratio."""
    kind = of_history(figure)
    return kind.rule(floor) if kind is not None else (floor, 0.0)


@dataclass(frozen=True)
class Pooled:
    """The sufficient statistics of a spread pooled over groups: each value's deviation from its own
    group's mean of ln(value) (a level segment's runs on one card, or a baseline file's level)."""

    count: int  # values
    levels: int  # groups they lie in
    m2: float  # sum of squared deviations from each segment's mean

    @property
    def dof(self) -> int:
        return self.count - self.levels

    @property
    def sd(self) -> float | None:
        """Standard deviation of ln(value), None without a degree of freedom."""
        return math.sqrt(self.m2 / self.dof) if self.dof > 0 else None



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
    recorded_noise: float | None  # the widest interval half-width at the level: the recorded noise until learned
    floor: float
    unlearned: float
    confidence: float
    card_sd: float = 0.0  # the run's card's share of its level's error beyond sd^2 / level runs (``model``)
    replay: Replay | None = field(default=None, compare=False, repr=False)  # the runs, as the replay held them
    # the prior the noise was pooled with across the GPU model's cells (``pooling``): its degrees of freedom
    # (0: none) and sd; the verdict holds a run to the posterior sd on the pooled degrees of freedom
    lent_dof: int = 0
    lent_sd: float | None = None
    card_dof: int | None = None  # card offsets behind `card_sd` where it was pooled over cells
    # where `card_sd` comes from for a card the runs never ran on (``pooling.CardTerm.source``); None: the
    # model's own (0 on a card the runs ran on)
    card_source: str | None = None

    @property
    def level_count(self) -> int:
        return len(self.level_runs)

    def lent(self, prior: Lent | None) -> "CellBaseline":
        """The cell with its noise pooled with `prior` (d0, s0: ``pooling``), where its own runs learned a
        spread. The replay's decisions (which runs count, which are held back) stay on the runs' own noise:
        held to a prior learned mostly from quieter cells, a noisier cell's young runs were held back as
        suspect until it fell back to the unlearned tolerance."""
        if prior is None or not self.spread_shown:
            return self
        return replace(self, lent_dof=prior[0], lent_sd=prior[1])

    def on_new_card(self, cards: CardTerm) -> "CellBaseline":
        """The cell judged on a card its runs never ran on, with `cards` as the card term: a term measured
        on the history's cards where it exceeds the model's own; where every counted run came from one card,
        the prior's in place of the model's, which is the runs' own spread assumed again
        (``model.ASSUMED_CARD_SHARE``)."""
        if cards.source == CARD_MEASURED and cards.sd <= self.card_sd:
            return self
        return replace(self, card_sd=cards.sd, card_dof=cards.dof, card_source=cards.source)

    @property
    def spread_shown(self) -> bool:
        """Whether the cell's own runs give a spread (MIN_SPREAD_VALUES values at a level): what a cell must
        show before the verdict learns from it, and before a pooled prior lends it anything."""
        return self.pooled.sd is not None and self.pooled.dof + 1 >= MIN_SPREAD_VALUES

    @property
    def sd(self) -> float | None:
        """The noise a run is held to: the runs' own, shrunk toward the pooled prior where one is lent."""
        if self.pooled.sd is None:
            return None
        if not self.lent_dof or self.lent_sd is None:
            return self.pooled.sd
        return posterior_sd(self.pooled.m2, self.pooled.dof, self.lent_dof, self.lent_sd)

    @property
    def between_runs(self) -> BetweenRuns | None:
        """The learned spread the verdict allows for, where it rests on enough degrees of freedom."""
        return self._between(self.pooled.count, self.level_count)

    def _between(self, count: int, level_count: int) -> BetweenRuns | None:
        # the runs' own degrees of freedom decide whether a spread is learned: a prior lends a young cell
        # precision, never a noise it has not shown (two runs of a cell held to the prior alone failed 1.2-2.8
        # runs in 1,000 of the noisiest cells' in simulation)
        sd, dof = self.sd, count - self.pooled.levels
        if sd is None or level_count == 0 or dof + 1 < MIN_SPREAD_VALUES:
            return None
        return BetweenRuns(sd, count, True, self.pooled.levels, level_count, self.card_sd, self.lent_dof,
                           self.card_dof)

    @property
    def state(self) -> str:
        if self.level is None:
            return LEARNING
        return UNLEARNED if self.between_runs is None else LEARNED

    @property
    def tolerance(self) -> float:
        """The relative drop that counts as a regression against `level`, by the verdicts' rule."""
        return tolerance_for(self.floor, self.recorded_noise, self.between_runs, self.confidence, self.unlearned)

    def reference(self, source: str, method: str | None = None,
                  group_failure: GroupRule | None = None) -> Reference:
        """What a run of the cell is judged against at its learned level (`level` must be known): the
        tolerance by the same rule and inputs as `tolerance`, with what set it."""
        assert self.level is not None, "a cell still learning has no level to judge against"
        return Reference.of(self.level, self.floor, self.recorded_noise, self.between_runs, source=source,
                            method=method,
                            confidence=self.confidence, unlearned=self.unlearned, group_failure=group_failure)

    def tolerance_after(self, runs: int) -> float | None:
        """The tolerance once `runs` runs count at this level's noise, the further ones at this level;
        None where no noise is known yet."""
        if self.pooled.sd is None or runs <= self.pooled.count:
            return None if self.pooled.sd is None else self.tolerance
        added = runs - self.pooled.count
        between = self._between(runs, self.level_count + added)
        return tolerance_for(self.floor, self.recorded_noise, between, self.confidence, self.unlearned)

    def sentence(self) -> str:
        """How far the tolerance has been learned, for the summary: '0.9% from 4 runs; about 0.6% after 10'."""
        own = self.pooled.count - self.prior_count
        from_file = f", {self.prior_count} of them from the baseline file" if self.prior_count else ""
        if self.lent_dof and self.state == LEARNED:
            from_file += f"; pooled with the GPU model's other cells ({self.lent_dof} degrees of freedom)"
        if self.state == LEARNING:
            kept = (f"; noise {percent(self.pooled.sd)} from {plural(self.pooled.count, 'run')} kept{from_file}"
                    if self.pooled.sd is not None else "")
            return f"learning: the next accepted run sets the level{kept}"
        head = (f"{percent(self.tolerance)} from {plural(self.pooled.count, 'run')}{from_file}"
                if self.state == LEARNED else
                f"{percent(self.tolerance)} (unlearned) from {own} run{'s' * (own != 1)}; learned from "
                f"{own + MIN_SPREAD_VALUES - 1 - self.pooled.dof}")
        ahead = self.tolerance_after(PROJECT_TO) if self.pooled.count < PROJECT_TO else None
        if ahead is not None and percent(ahead) != percent(self.tolerance):
            head += f"; about {percent(ahead)} after {PROJECT_TO}"
        held = self.held_back_runs()
        if held:
            head += f"; {len(held)} run{'s' * (len(held) != 1)} held back as suspect"
        return head

    def held_back_runs(self) -> list[tuple[str, str]]:
        """(run id, why) of each run of the current level held back as suspect or failed."""
        if self.replay is None:
            return []
        points = self.replay.points
        return [(points[i].run_id, self.replay.statuses[i].reason) for i in self.replay.pending]

    def into(self, ratio: RatioEntry, stores_tolerance: bool) -> RatioEntry:
        """`ratio` (a baseline entry's) with the level and the learned spread, as ``entries.learned_spread``
        reads them back: centred on the level, whose first run's value stands as the recording's, and
        with the tolerance where the ratio stores one (`stores_tolerance`); as it was while learning."""
        if self.level is None:
            return ratio
        ratio = replace(ratio, speedup=self.level, recorded_speedup=self.first)
        if self.pooled.sd is not None:
            ratio = replace(ratio, between_run_sd=self.sd, between_run_count=self.pooled.count,
                            between_run_levels=self.pooled.levels, between_run_level_count=self.level_count,
                            between_card_sd=self.card_sd or None, between_card_dof=self.card_dof,
                            between_card_source=self.card_source if self.card_sd else None,
                            between_run_pooled_dof=self.lent_dof or None,
                            between_run_pooled_sd=self.lent_sd if self.lent_dof else None)
        return replace(ratio, tolerance=self.tolerance) if stores_tolerance else ratio


def percent(x: float) -> str:
    """A tolerance or a spread to two significant digits: '0.46%', '0.9%', '3%'."""
    return f"{100 * x:.2g}%"


def learn(series: Series, prior: Prior | None = None, floor: float = DEFAULT_TOLERANCE,
          confidence: float = GATE_CONFIDENCE, card: Hashable = None) -> CellBaseline:
    """`series`' level and noise for a run on `card` (its UUID, None for runs that recorded
    none; ``model.NEW_CARD``: a card the history has not seen, as a baseline file serves any), the noise
    pooled with `prior` (a baseline file's spread, ``spread.prior_of``) where given; pass a prior only
    where its runs are not in the series. What follows a change the history found and nobody accepted
    waits with the suspect runs (``changes.settle``)."""
    from ampbench.history.changes import settled  # the detector learns from this module's runs

    return learned_from(settled(series, prior), floor, confidence, card)


def learned_from(replay: Replay, floor: float = DEFAULT_TOLERANCE, confidence: float = GATE_CONFIDENCE,
                 card: Hashable = None) -> CellBaseline:
    """What `replay`'s runs so far say a new run on `card` is judged against (``learn``)."""
    model = replay.model
    pred = model.predict(card)
    at_level = [replay.points[s.index] for s in replay.statuses if s.counts and s.segment == replay.segment]
    behind = [p for p in at_level if p.card == card] if pred is not None and pred.own_card else at_level
    widths = [w for w in (p.half_width for p in at_level) if w is not None]
    rule_floor, unlearned = rule_for(replay.series.figure, floor)
    if pred is not None and pred.noise_sd is not None:
        pooled = Pooled(pred.count, pred.levels, pred.noise_sd ** 2 * pred.dof)
    else:
        pooled = Pooled(model.count, model.levels, (model.sigma or 0.0) ** 2 * max(model.dof, 0))
    level = replay.level(card)
    return CellBaseline(replay.series.test_id, replay.series.figure, None if level is None else math.exp(level),
                        tuple(p.run_id for p in behind), at_level[0].value if at_level else None,
                        pooled, model.prior_count, max(widths) if widths else None, rule_floor, unlearned,
                        confidence, pred.card_sd if pred is not None else 0.0, replay)
