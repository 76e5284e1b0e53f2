"""The history's replay of one series: which runs count towards the cell's level and noise, which are held
back as suspect and why, and whether the held-back runs show that the level moved.

The runs are taken in order, each held against the model (``model.fit``) of the runs counted before it,
on its own card:
- a run whose verdict failed never counts (unless accepted): a regression not accepted stays one;
- a run is suspect where it lies below its card's level by more than noise says (t(dof) at
  SUSPECT_SHARE, one-sided, times its predictive sd), where it is an inconclusive run below its level,
  or where it lies below its level and, with the runs held back before it, below the level together
  (GROUP_SHARE, one-sided): a suspect run enters neither the level nor the noise;
- a suspect run is cleared, and counts from then on, once CLEAR_AFTER later runs have come and the runs
  from it on no longer lie together below the level: the level did not move;
- before any noise is learned the level is one run: where YOUNG_OUTVOTE runs after it were held back
  below it, that run is the stray (held back above them) and they count;
- an accepted change restarts the level at its run; what was held back before it stays out.

So a step that the gate sees never teaches the history its new level, whether its runs fail, straddle
the line or pass narrowly below the level: they wait, and either later runs clear them or someone
accepts the change. The held-back runs that stay so are what a moved level looks like: the first from
which the runs lie together below the level, two runs or more, is where the gate saw the level move
(``moved_from``), and ``changes`` reports it there whatever ruptures finds.
"""

from __future__ import annotations

import math
from typing import Hashable

import numpy as np

from ampbench.baselines.spread import Prior
from ampbench.history.counted import CountedRuns
from ampbench.history.model import SD_FLOOR, Prediction
from ampbench.history.series import Point, Series
from ampbench.history.statuses import ACCEPTED, COUNTED, EXCLUDED, FAILED, SUSPECT, GroupFailure, Status
from ampbench.printable import plural
from ampbench.stats import t_quantile
from ampbench.tolerance import NOISE_MULTIPLIER

# the share of clean runs held back as suspect of a drop by their own value, and of a rise (a stray, an
# improvement): they wait for CLEAR_AFTER more runs. The drop's side is the looser: a step near the
# tolerance lies 3-4 sds below the level, and a run of it let in pulls the level down and the noise up
SUSPECT_SHARE, ABOVE_SHARE = 0.05, 0.01
# below this many degrees of freedom of its noise, a run is held back by its value only beyond ABOVE_SHARE
SETTLED_DOF = 3
# until a cell's noise is learned (and while it rests on fewer than SETTLED_DOF degrees of freedom), a run
# this far from its level, either way, is suspect: half the unlearned tolerance, or NOISE_MULTIPLIER times
# the widest interval of its level's runs and its own where the rounds are that noisy. A stray second run
# let in (x1.10 of a cell of 0.2% noise) set a spread of 5% and a tolerance of 15%
YOUNG_LIMIT = 0.015
# a run let in while the noise was young is a stray, held back, where it lies beyond this one-sided share
# of the other runs' spread from their level (``Replay._trim``): let in before enough runs came to tell it
# from noise, it swells the noise, and the tolerance with it
STRAY_SHARE = 0.001
# runs that lie together below their level with less chance than this by noise alone have moved
GROUP_SHARE = 0.005
CLEAR_AFTER = 2
# before its noise is learned, this many runs held back below a level of one run outvote it: a first run
# that lay high (a wide interval over a network: every later run inconclusive below it) would otherwise
# hold back every run after it for good, and the cell would never learn a tolerance
YOUNG_OUTVOTE = 1 + CLEAR_AFTER
# a drop the held-back runs show passes only where they show it within the tolerance at this confidence
WITHIN_SHARE = 0.05
# a run fails with the held-back runs only where it lies beyond its noise by itself (this one-sided share),
# one of them does too, and together they lie below the level with less chance than FAIL_SHARE: the
# verdict's own false alarms are 1 in 1,000 runs, and the group's add a fraction of that
FAIL_RUN_SHARE, FAIL_SHARE = 0.05, 0.001
INCONCLUSIVE = "inconclusive"


class Replay(CountedRuns):
    """The series' runs replayed in order (``feed``); `prior` a baseline file's spread of other runs."""

    def __init__(self, series: Series, prior: Prior | None = None, robust: bool = True):
        super().__init__(series, prior, robust)
        self._young: set[int] = set()  # runs counted while the noise had fewer than SETTLED_DOF dof
        self._young_held: set[int] = set()  # runs held back by their own value then
        self._strays: set[int] = set()  # runs counted young, held back as strays for good (``_trim``)
        for point in series.points:
            self.feed(point)

    # -- feeding runs -----------------------------------------------------------------------------------

    def feed(self, point: Point) -> Status:
        """Take the next run of the series."""
        index = len(self.statuses)
        self.points.append(point)
        value = point.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
            raise ValueError(f"{self.series.name}: run {point.run_id}: value {value!r} is not a finite positive figure")
        y = math.log(value)
        self._logs.append(y)
        if self._shift is None:
            self._shift = y
        if point.restart:
            if any(s.state != EXCLUDED for s in self.statuses) or point.excluded or not point.counts:
                self.segment += 1
            self.pending = []
            self._fit, self._robust = None, {}
        if point.excluded or (point.restart and not point.counts):
            return self._add(Status(index, self.segment, EXCLUDED, "a smoke run or slowed on purpose: no sample"))
        if point.restart:
            status = self._add(Status(index, self.segment, ACCEPTED, "an accepted change: the level restarts here"))
            self._count(index)
            return status
        status = self.preview(point.value, point.card, point.verdict, point.counts, index)
        young = status.sd is None or self.model.dof < SETTLED_DOF
        self._add(status)
        if status.counts:
            self._count(index)
            if young:
                self._young.add(index)
        else:
            if young and status.alone:
                self._young_held.add(index)
            self.pending.append(index)
        self._clear()
        self._outvote()
        self._trim()
        return status

    def _add(self, status: Status) -> Status:
        self.statuses.append(status)
        self._robust = {}
        return status

    def preview(self, value: float, card: Hashable, verdict: str | None = None, counts: bool = True,
                index: int = -1) -> Status:
        """What a new run of `value` on `card` (its figure's `verdict`; `counts`: its verdict did not
        fail) would be, held against the runs so far; nothing is changed."""
        y = math.log(value)
        pred = self.predict(card)
        deviation = None if pred is None else y - (pred.level + self._origin)
        sd = None if pred is None else pred.sd
        if not counts:
            return Status(index, self.segment, FAILED, f"its verdict {verdict or 'failed'}", deviation, sd, True)
        if pred is None or deviation is None:
            return Status(index, self.segment, COUNTED, "the first run of its level", None, sd)
        reason, alone = self._suspicion(y, card, deviation, pred, verdict)
        return Status(index, self.segment, SUSPECT if reason else COUNTED, reason or "within its noise", deviation, sd,
                      alone)

    def _suspicion(self, y: float, card: Hashable, deviation: float, pred: Prediction,
                   verdict: str | None) -> tuple[str | None, bool]:
        """Why a run is suspect (None: it is not), and whether by itself rather than with others."""
        sd = pred.sd
        young = self._young_limit() if sd is None or pred.dof < SETTLED_DOF else math.inf
        if sd is None:  # no noise learned: its own verdict, or a move past the young limit either way
            if verdict == INCONCLUSIVE and deviation < 0:
                return f"inconclusive, {deviation:+.2%} below its level, before its noise is learned", True
            if abs(deviation) > young:
                side = "below" if deviation < 0 else "above"
                return (f"{deviation:+.2%} {side} its level, more than {young:.1%} before its noise is "
                        "learned"), True
            return None, False
        # a young noise, of few degrees of freedom, lies too low now and then: held to it at 5%, a cell whose
        # first runs agreed by chance held back every run after them for good; held to it at 1% alone, a
        # stray third run 0.3% apart from two that lay 0.5% apart counts, so the young limit holds too
        limit = min(t_quantile(SUSPECT_SHARE if pred.dof >= SETTLED_DOF else ABOVE_SHARE, pred.dof) * sd, young)
        if deviation < -limit:
            return f"{deviation:+.2%} below its level, {-deviation / sd:.1f} sd (more than {limit / sd:.1f})", True
        above = min(t_quantile(ABOVE_SHARE, pred.dof) * sd, young)
        if deviation > above:  # a stray, or an improvement: it waits, as a drop does, before it moves the noise
            return f"{deviation:+.2%} above its level, {deviation / sd:.1f} sd (more than {above / sd:.1f})", True
        if self._joins_held_back(deviation) and self._below(self._held_below(), (y, card)):
            first = self.points[self.pending[0]].run_id
            return (f"{deviation:+.2%} below its level, nearer the runs held back since {first} than the level, "
                    "and below it with them"), False
        return None, False

    def _young_limit(self) -> float:
        """How far from its level a run may lie before the cell's noise is learned: YOUNG_LIMIT, or
        NOISE_MULTIPLIER times the widest interval half-width of the level's counted runs where wider."""
        widths = [w for s in self.statuses if s.segment == self.segment and s.counts
                  and (w := self.points[s.index].half_width) is not None]
        return max([YOUNG_LIMIT] + [NOISE_MULTIPLIER * w for w in widths])

    def _trim(self) -> None:
        """Hold back a counted run let in while the noise was young (fewer than SETTLED_DOF degrees of
        freedom) that lies beyond STRAY_SHARE of the others' spread from their level (its deleted residual,
        Student's t on their degrees of freedom): a stray that came while too few runs were there to tell it
        from noise. The furthest first, one as a run comes; once held back so, a run stays a stray."""
        runs = [s for s in self.statuses if s.segment == self.segment and s.state == COUNTED]
        young = [s for s in runs if s.index in self._young]
        if len(runs) < SETTLED_DOF + 2 or not young:
            return
        logs = np.array([self._logs[s.index] for s in runs])
        total, squares, n = float(logs.sum()), float(logs @ logs), len(runs)
        # runs agree no closer than their rounds measure them: the widest interval half-width floors the sd
        precision = max([SD_FLOOR] + [w for s in runs if (w := self.points[s.index].half_width) is not None])
        worst, furthest = None, t_quantile(STRAY_SHARE, n - 2)
        for status in young:
            y = self._logs[status.index]
            mean = (total - y) / (n - 1)
            var = max(0.0, (squares - y * y - (n - 1) * mean * mean) / (n - 2))
            scaled = abs(y - mean) / max(math.sqrt(var * (1 + 1 / (n - 1))), precision)
            if scaled > furthest:
                worst, furthest = status, scaled
        if worst is None:
            return
        self._uncount(worst.index)
        self._strays.add(worst.index)
        worst.state, worst.alone = SUSPECT, True
        worst.reason = (f"a stray: let in before its noise was learned, {furthest:.1f} sd from the level of the "
                        f"{plural(n - 1, 'run')} after and around it")
        self.pending = sorted({*self.pending, worst.index})

    def _held_below(self) -> list[int]:
        """The held-back runs that lie below their level (failed, or suspect of a drop)."""
        return [i for i in self.pending if self.statuses[i].state == FAILED or (self.deviation(i) or 0.0) < 0]

    def _joins_held_back(self, deviation: float) -> bool:
        """Whether a run `deviation` from its level lies nearer the held-back runs' mean deviation than
        the level: one far beyond it (a failed run 10% down) says nothing of a run within its noise."""
        devs = [d for d in (self.deviation(i) for i in self._held_below()) if d is not None]
        return bool(devs) and deviation < 0 and deviation < sum(devs) / len(devs) / 2

    def _group(self, members: list[int], extra: tuple[float, Hashable] | None = None,
               whole: bool = False) -> tuple[float, float, int] | None:
        """(mean deviation from their levels, its sd, degrees of freedom) of runs `members` and `extra` (a
        new run's ln value and card), the noise floored by the `whole` segment's robust scale; None where
        a level or the noise is not known."""
        runs = [(self._logs[i], self.points[i].card) for i in members] + ([extra] if extra is not None else [])
        predicted = [self.predict(card, whole) for _, card in runs]
        # (level, sd, noise sd, dof) of each run's prediction; sd and noise_sd are known together
        preds = [(p.level, p.sd, p.noise_sd, p.dof) for p in predicted
                 if p is not None and p.sd is not None and p.noise_sd is not None]
        if not predicted or len(preds) < len(predicted):
            return None
        mean = sum(y - level - self._origin for (y, _), (level, *_) in zip(runs, preds)) / len(runs)
        errors = sum(sd ** 2 - noise_sd ** 2 for _, sd, noise_sd, _ in preds) / len(preds)
        noise = sum(noise_sd ** 2 for _, _, noise_sd, _ in preds) / len(preds)
        return mean, math.sqrt(max(0.0, errors) + noise / len(runs)), min(dof for *_, dof in preds)

    def _below(self, members: list[int], extra: tuple[float, Hashable] | None = None, side: float = -1.0) -> bool:
        """Whether runs `members` (and `extra`) lie together below their levels (`side` -1; above: +1) by
        more than noise allows (GROUP_SHARE)."""
        group = self._group(members, extra)
        if group is None:
            return False
        mean, sd, dof = group
        return side * mean > t_quantile(GROUP_SHARE, dof) * sd

    def _clear(self) -> None:
        """Clear each held-back suspect run whose later runs show the level did not move: CLEAR_AFTER
        later runs count, and with them it lies neither below nor above the level."""
        for index in list(self.pending):
            status = self.statuses[index]
            if status.state != SUSPECT or index in self._strays:
                continue
            # only runs that count vouch for the level: a failed or held-back one is what a step looks like,
            # and a high run before a step is no more cleared by the step's runs than by a failure
            members = [index]
            for i in self._members(index + 1):
                if self.statuses[i].state == FAILED:  # the gate saw the level move: no run after vouches
                    break
                if self.statuses[i].counts:
                    members.append(i)
            # a noise of few degrees of freedom would clear anything: a stray second run, cleared by two
            # runs after it beside a noise of one degree of freedom, moved the level by a third of its size
            if (len(members) < 1 + CLEAR_AFTER or self.model.dof < SETTLED_DOF or self._below(members)
                    or self._below(members, side=1.0) or self._still_stray(index)):
                continue
            status.state = COUNTED
            status.reason += f"; cleared by the {plural(len(members) - 1, 'run')} after it, which show the level held"
            self.pending.remove(index)
            self._count(index)

    def _still_stray(self, index: int) -> bool:
        """Whether a run held back by its own value, while the noise was young (or outvoted then) or above
        its level at any age, still lies beyond its noise by itself, now that the noise is learned (the
        model's own, which the held-back runs do not widen): a group of it and the runs after it dilutes a
        stray, whose own distance says what it is. (A run 8.5 sd above its level, cleared by the two runs
        at the level after it, widened the noise by half, and a drop of 8 sds then passed.) A run held
        below its level by itself, once the noise is learned, is cleared by its group: it passed its gate."""
        young = index in self._young_held
        if not (young or self.statuses[index].alone):
            return False
        pred = self.model.predict(self.points[index].card)
        if pred is None or pred.sd is None:
            return young
        deviation = self._logs[index] - pred.level - self._origin
        if not young and deviation <= 0:
            return False
        # held above once the noise is learned: kept out only as a stray is (STRAY_SHARE), for one clean
        # run in a hundred lies beyond ABOVE_SHARE, and keeping those out would narrow the noise
        return abs(deviation) > t_quantile(ABOVE_SHARE if young else STRAY_SHARE, pred.dof) * pred.sd

    def _outvote(self) -> None:
        """Hold back a level of one run, before any noise is learned, that YOUNG_OUTVOTE runs held back
        below it outvote, and count them: one run is no level against them. A step after a single run
        is then learned as the level; one run of the old level is no evidence against it."""
        if len(self.pending) < YOUNG_OUTVOTE:
            return
        young = [i for i in self.pending if self.statuses[i].state == SUSPECT and self.statuses[i].sd is None]
        if len(young) < YOUNG_OUTVOTE:  # once noise is learned, always: no scan of every run
            return
        counted = [s for s in self.statuses if s.segment == self.segment and s.counts]
        if len(counted) != 1 or counted[0].state != COUNTED:
            return
        first = counted[0]
        self._uncount(first.index)
        first.state, first.alone = SUSPECT, True
        first.reason = (f"above the {plural(len(young), 'run')} after it, held back before its noise was learned: "
                        "outvoted")
        self._young_held.add(first.index)
        for index in young:
            status = self.statuses[index]
            status.state = COUNTED
            status.reason += f"; counted: {plural(len(young), 'run')} outvote a level of one run"
            self.pending.remove(index)
            self._count(index)
        self.pending = sorted({*self.pending, first.index})

    # -- what the held-back runs say --------------------------------------------------------------------

    def moved_from(self) -> int | None:
        """Where the gate saw the level move: the first held-back run from which the runs lie together
        below the level, two or more, one of the held-back ones a failed verdict (a step the gate failed
        and that persisted), and which itself lies nearer the held-back runs after it than the level (a
        low run just before a step is no part of it); the step still there at the newest run (held back
        below, as it) and the newest run itself no accepted restart. None where nothing moved."""
        held = self._held_below()
        newest = next((s for s in reversed(self.statuses) if s.state != EXCLUDED), None)
        if newest is None or newest.index not in held:
            return None
        for k, index in enumerate(held):
            later = held[k + 1:]
            if not any(self.statuses[i].state == FAILED for i in held[k:]):
                break
            members = self._members(index)
            if len(members) < 2 or not self._below(members):
                continue
            devs = [d for d in (self.deviation(i) for i in later) if d is not None]
            own = self.deviation(index)
            if not devs or (own is not None and own < sum(devs) / len(devs) / 2):
                return index
        return None

    def group_failure(self, value: float, card: Hashable, tolerance: float) -> GroupFailure | None:
        """Whether a new run of `value` on `card`, itself suspect of a drop, fails with the held-back runs
        before it: together they lie below the level by more than noise allows (the level moved), and
        their drop is not shown smaller than `tolerance` (WITHIN_SHARE). A drop the runs have shown must
        prove itself within the tolerance to pass, even where this run's own interval passes: a step at
        the line would otherwise pass every other run."""
        pred = self.predict(card)
        # the runs held back by themselves: a run held only with others, or after a change the detector
        # found, adds no evidence of its own (and a false change must not fail the runs after it)
        held = [i for i in self._held_below() if self.statuses[i].alone]
        if not held or pred is None or pred.sd is None or not (value > 0):
            return None
        y = math.log(value)
        deviation = y - pred.level - self._origin
        if deviation >= -t_quantile(FAIL_RUN_SHARE, pred.dof) * pred.sd:
            return None
        if not self._joins_held_back(deviation):
            return None
        group = self._group(held, (y, card), whole=True)
        if group is None:
            return None
        mean, sd, dof = group
        if (mean > -t_quantile(FAIL_SHARE, dof) * sd
            or mean - t_quantile(WITHIN_SHARE, dof) * sd > math.log(1 - tolerance)):
            return None
        return GroupFailure((*held, -1), math.exp(mean) - 1.0, -tolerance)

    def withhold_from(self, index: int, why: str) -> int:
        """Hold back every counted run of the current segment from run `index` on (a change the history
        found there that nobody accepted: what follows it is no sample of the level); how many."""
        held = 0
        for status in self.statuses[index:]:
            if status.segment != self.segment or status.state != COUNTED:
                continue
            self._uncount(status.index)
            status.state, status.reason = SUSPECT, why
            held += 1
        if held:
            self.pending = sorted({*self.pending, *(s.index for s in self.statuses[index:] if s.state == SUSPECT
                                                    and s.segment == self.segment)})
            self._fit = None
        return held
