"""The loop that takes a judged speedup's rounds look by look (``gate.looks``: the rule, its schedule and
what each look decides) from a ratio's clock.

The looks are where a ratio's measurement and its judgement meet, and the only place: how many rounds a
ratio takes depends on how its check classifies them so far (`judged_rounds`: the looks, and the confirming
rounds a regression at them asks for; `first_look`: the one look of a figure that is only reported). What
they took is what the measurement holds (``measurement.measure``); its verdict is the judge's, from that
(``gate.judge.judge``, by ``gate.looks.verdict_at``, the rule each look applies).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from ampbench.gate.looks import REPORTED_FIRST_LOOK, Look, schedule, verdict_at
from ampbench.speed.jobtime import remaining_s
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, extend_until_tight
from ampbench.stats import SpeedupEstimate, log_ratios, order_aligned, robust_sd
from ampbench.stats import min_rounds as fewest_rounds
from ampbench.verdict import SpeedupCheck, Verdict


def at_look(timer: PairedTimer, look: Look) -> SpeedupEstimate:
    """The timer's estimate with the bounds of `look` (its rounds must be the look's)."""
    centre, aligned = order_aligned(log_ratios(timer.ref_times, timer.mode_times), timer.ref_first)
    low, high = look.bounds(aligned)
    return SpeedupEstimate(math.exp(centre), math.exp(low), math.exp(high), look.rounds, look.confidence,
                           round_sd=robust_sd(aligned))


def out_of_time(policy: SpeedPolicy) -> bool:
    """Whether --perf-time-budget has run out (``SpeedPolicy.deadline``)."""
    return remaining_s(policy.deadline) <= 0


def decide(timer: PairedTimer, check: SpeedupCheck,
           policy: SpeedPolicy) -> tuple[SpeedupEstimate, Look | None, bool]:
    """Look at the ratio at each look of its schedule until its bounds at a look lie wholly above or below
    the line, or its rounds (`policy.extend_to`) or seconds (`policy.decide_seconds`, the run's budget)
    run out: the estimate of the last look taken, that look (its verdict, inconclusive where no look
    decided, is `verdict_at` them), and whether the budget stopped the looks. A timer that already holds
    more rounds than a look skips it (what it would spend stays unspent); one that holds more than every
    look gives its fixed-size interval, and no look. The first look is always taken: the budget stops only
    the looks after it, so a pass is only ever a look's."""
    t0 = time.perf_counter()
    est: SpeedupEstimate | None = None
    taken_at: Look | None = None
    for look in schedule(policy.first_look, policy.extend_to):
        taken = len(timer.mode_times)
        if taken > look.rounds:
            continue
        if est is not None and out_of_time(policy):
            return est, taken_at, True
        # out of seconds, or held to a line at or below zero, which no look can decide against
        if est is not None and (time.perf_counter() - t0 > policy.decide_seconds or not check.has_line):
            break
        timer.rounds(look.rounds - taken)
        est, taken_at = at_look(timer, look), look
        if verdict_at(check, est, look) is not Verdict.INCONCLUSIVE:
            break
    if est is None:
        return timer.estimate(policy.rounds.confidence), None, False
    return est, taken_at, False


@dataclass(frozen=True)
class Looked:
    """What the looks took of a ratio's first rounds: their estimate and the look it was taken at (None: over
    all of them), and the confirming rounds a regression at the looks asked for, with theirs."""

    estimate: SpeedupEstimate
    look: Look | None = None
    confirming: PairedTimer | None = None
    confirmation: SpeedupEstimate | None = None
    confirmation_look: Look | None = None
    cut_short: bool = False  # the run's time budget stopped the looks, or the confirming set, undecided


def judged_rounds(first: PairedTimer, timer: Callable[[SpeedPolicy], PairedTimer], check: SpeedupCheck | None,
                  policy: SpeedPolicy) -> Looked:
    """The rounds of a ratio that gates its cell, `first` its first ones and `timer` its clock: looked at
    (`decide`) until they leave the line, and where they lie below it a second, independent set of rounds
    from `timer`, looked at alike.

    Without a baseline, and in a recording (`policy.tighten_judged`), whose interval becomes the stored
    noise, rounds are added until the interval is half as wide as the cell's own tolerance: a cell whose
    runs spread further needs no tighter interval than its line allows."""
    rounds = policy.rounds
    if check is None:
        return Looked(extend_until_tight(first, rounds))
    if policy.tighten_judged:
        est = extend_until_tight(first, replace(rounds, target_half_width=max(rounds.target_half_width,
                                                                              check.tolerance / 2)))
        look = None
    else:
        est, look, cut = decide(first, check, policy)
        if cut:
            return Looked(est, look, cut_short=True)
    if verdict_at(check, est, look) is not Verdict.REGRESSION:
        return Looked(est, look)
    if out_of_time(policy):  # no time for a confirming set: an unconfirmed regression is inconclusive
        return Looked(est, look, cut_short=True)
    confirming = timer(policy)  # judged as the first rounds are: rounds cut short confirm nothing
    confirmation, confirmation_look, cut = decide(confirming, check, policy)
    return Looked(est, look, confirming, confirmation, confirmation_look, cut_short=cut)


def first_look(timer: PairedTimer, check: SpeedupCheck | None, policy: SpeedPolicy) -> Looked:
    """The rounds of a figure that is reported but does not gate the cell: where it is judged against a
    baseline, REPORTED_FIRST_LOOK rounds first, and no more where they all lie above its line (a sequential
    look, as the judged figures take, spending 2^-4 on a missed warning); else the fewest rounds of an
    interval of `policy.look_confidence`. No extension, no confirming rounds."""
    rounds = fewest_rounds(policy.look_confidence)
    if check is not None and not policy.tighten_judged and REPORTED_FIRST_LOOK < rounds:
        look = Look(REPORTED_FIRST_LOOK, 1, None, 2.0 ** -REPORTED_FIRST_LOOK, 0.0)
        timer.rounds(max(0, REPORTED_FIRST_LOOK - len(timer.mode_times)))
        if len(timer.mode_times) == REPORTED_FIRST_LOOK:
            est = at_look(timer, look)
            # no more rounds could decide against no line
            if check.classify(est) is Verdict.PASS or not check.has_line:
                return Looked(est, look)
    if len(timer.mode_times) < rounds:
        timer.rounds(rounds - len(timer.mode_times))
    return Looked(timer.estimate(policy.look_confidence))
