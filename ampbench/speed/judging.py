"""How one ratio of a speed cell is judged and recorded, once its two sides can be timed: a judged figure
is looked at in a group-sequential sign test (``sequential``) until its interval leaves its line or its
rounds run out, and confirmed by a second batch, judged alike, before it is called a regression
(`judge`); a run that passes its own line but lies with the runs its history held back below it fails
with them; a reported figure gets its first look (`first_look`); `TimedFigure` keeps a ratio's batches,
and a recording pools them and stores their noise (`recorded_noise`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.spread import software_difference
from ampbench.baselines.store import measurement_mismatch
from ampbench.speed.sequential import Look, schedule
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, RoundsPolicy, extend_until_tight
from ampbench.stats import (SpeedupEstimate, across_runs, estimate_speedup, finite_number, log_ratios, order_aligned,
                            relative_spread, robust_sd)
from ampbench.stats import min_rounds as fewest_rounds
from ampbench.verdict import SpeedupCheck, Verdict


def at_look(timer: PairedTimer, look: Look) -> SpeedupEstimate:
    """The timer's estimate with the bounds of `look` (its rounds must be the look's)."""
    centre, aligned = order_aligned(log_ratios(timer.ref_times, timer.mode_times), timer.ref_first)
    low, high = look.bounds(aligned)
    return SpeedupEstimate(math.exp(centre), math.exp(low), math.exp(high), look.rounds, look.confidence,
                           round_sd=robust_sd(aligned))


def decide(timer: PairedTimer, check: SpeedupCheck, policy: SpeedPolicy) -> tuple[SpeedupEstimate, Verdict]:
    """Look at the ratio at each look of its schedule (``sequential.schedule``) until its bounds at a look
    lie wholly above or below the line, or its rounds (`policy.extend_to`) or seconds
    (`policy.decide_seconds`) run out: the estimate of the last look taken and its verdict (inconclusive
    where no look decided). A side a look cannot decide (too few rounds for its error) is no verdict
    there. A timer that already holds more rounds than a look skips it (what it would spend stays
    unspent)."""
    t0 = time.perf_counter()
    est, verdict = None, Verdict.INCONCLUSIVE
    for look in schedule(policy.first_look, policy.extend_to):
        taken = len(timer.mode_times)
        if taken > look.rounds:
            continue
        if est is not None and time.perf_counter() - t0 > policy.decide_seconds:
            break
        timer.rounds(look.rounds - taken)
        est = at_look(timer, look)
        verdict = check.classify(est)
        if (verdict is Verdict.REGRESSION and look.regression_rank is None) or (
                verdict in (Verdict.PASS, Verdict.IMPROVED) and look.pass_rank is None):
            verdict = Verdict.INCONCLUSIVE
        if verdict is not Verdict.INCONCLUSIVE:
            break
    if est is None:  # more rounds already than any look: the fixed-size interval
        est = timer.estimate(policy.rounds.confidence)
        verdict = check.classify(est)
    return est, verdict


@dataclass
class SpeedOutcome:
    estimate: SpeedupEstimate  # the first batch's estimate (after any extension)
    verdict: Verdict
    confirmation: SpeedupEstimate | None  # the second, independent batch, when one ran
    message: str

    def fields(self, prefix: str, check: SpeedupCheck | None, verdict_key: str | None = None) -> dict:
        """The ratio's estimate and verdict under a speed record's names with `prefix` ("device_",
        "versus_"; the wall-clock speedup's have none, and its verdict is `verdict_key` wall_verdict)."""
        est = self.estimate
        return {f"{prefix}speedup": est.speedup, f"{prefix}speedup_low": est.low, f"{prefix}speedup_high": est.high,
                f"{prefix}rounds": est.rounds, f"{prefix}confidence": est.confidence,
                f"{prefix}baseline_speedup": check.expected if check else None,
                f"{prefix}tolerance": check.tolerance if check else None,
                f"{prefix}line": check.line if check else None, f"{prefix}drop": check.drop(est) if check else None,
                f"{prefix}confirm_speedup": self.confirmation.speedup if self.confirmation else None,
                verdict_key or f"{prefix}verdict": self.verdict}


def judge(
    check: SpeedupCheck | None,
    first: PairedTimer,
    policy: SpeedPolicy,
    second_batch: Callable[[], tuple[SpeedupEstimate, Verdict]],
) -> SpeedOutcome:
    """A regression only when the interval at a look lies wholly below the line and a second,
    independent batch, judged alike, agrees; an interval that straddles the line at every look is
    inconclusive. A run its own batches pass fails where it lies, with the runs its history held back
    before it, below the line together (``SpeedupCheck.held_back``).

    Without a baseline, and in a recording (`policy.tighten_judged`), whose interval becomes the stored
    noise, rounds are added until the interval is half as wide as the cell's own tolerance: a cell whose
    runs spread further needs no tighter interval than its line allows."""
    rounds = policy.rounds
    if check is None:
        est = extend_until_tight(first, rounds)
        return SpeedOutcome(est, Verdict.NO_BASELINE, None, f"speedup {est}; no baseline for this GPU")
    if policy.tighten_judged:
        est = extend_until_tight(first, replace(rounds, target_half_width=max(rounds.target_half_width,
                                                                                check.tolerance / 2)))
        verdict = check.classify(est)
    else:
        est, verdict = decide(first, check, policy)
    confirmation = None
    if verdict is Verdict.REGRESSION:
        confirmation, again = second_batch()
        if again is not Verdict.REGRESSION:  # two batches disagree: not confirmed
            verdict = Verdict.INCONCLUSIVE
    message = check.describe(est)
    if confirmation is not None:
        message += f"; confirming batch {confirmation}"
    together = check.held_back(est.speedup, check.tolerance) if check.held_back and verdict is not Verdict.REGRESSION else None
    if together:
        verdict, message = Verdict.REGRESSION, f"{message}; {together}"
    return SpeedOutcome(est, verdict, confirmation, message)


# A reported figure held against a baseline is looked at after this many rounds first: all of them above
# its line ([min, max] of 4 rounds, 87.5%) is a pass, and the rest of its rounds are not taken
REPORTED_FIRST_LOOK = 4


def first_look(check: SpeedupCheck | None, timer: PairedTimer, policy: SpeedPolicy) -> SpeedOutcome:
    """The estimate and how it compares, for a figure that is reported but does not gate the cell: where
    it is held against a baseline, REPORTED_FIRST_LOOK rounds first, and no more where they all lie above
    its line (a sequential look, as the judged figures take, spending 2^-4 on a missed warning); else the
    fewest rounds of an interval of `policy.look_confidence`. No extension, no confirming batch."""
    rounds = fewest_rounds(policy.look_confidence)
    if check is not None and not policy.tighten_judged and REPORTED_FIRST_LOOK < rounds:
        look = Look(REPORTED_FIRST_LOOK, 1, None, 2.0 ** -REPORTED_FIRST_LOOK, 0.0)
        timer.rounds(max(0, REPORTED_FIRST_LOOK - len(timer.mode_times)))
        if len(timer.mode_times) == REPORTED_FIRST_LOOK:
            est = at_look(timer, look)
            if check.classify(est) is Verdict.PASS:
                return SpeedOutcome(est, Verdict.PASS, None, check.describe(est))
    if len(timer.mode_times) < rounds:
        timer.rounds(rounds - len(timer.mode_times))
    est = timer.estimate(policy.look_confidence)
    if check is None:
        return SpeedOutcome(est, Verdict.NO_BASELINE, None, f"speedup {est}; no baseline for this GPU")
    return SpeedOutcome(est, check.classify(est), None, check.describe(est))


@dataclass
class TimedFigure:
    """One ratio of a cell, timed: its first timer, any further batches (a confirming one, a recording's
    noise batch), and how it compares with its baseline."""

    first: PairedTimer
    make_timer: Callable[[], PairedTimer]  # a fresh timer of the same two sides, for another batch
    extra: list[PairedTimer]
    outcome: SpeedOutcome | None = None

    def again(self, rounds: RoundsPolicy) -> SpeedupEstimate:
        """Another independent batch of rounds, kept in `extra`."""
        self.extra.append(self.make_timer())
        return extend_until_tight(self.extra[-1], rounds)

    def confirming(self, check: SpeedupCheck, policy: SpeedPolicy) -> tuple[SpeedupEstimate, Verdict]:
        """A confirming batch, judged as the first one is: looked at until it leaves the line or its
        rounds run out (a batch cut short on the line confirms nothing either way)."""
        self.extra.append(self.make_timer())
        return decide(self.extra[-1], check, policy)

    def recording(self, policy: SpeedPolicy, previous: float | None,
                  comparable: bool) -> tuple[SpeedupEstimate, float]:
        """What a baseline recording stores of the ratio: its batches pooled (a second one timed first
        where none ran), and its noise (``recorded_noise``, against `previous`, the entry's figure, where
        `comparable`)."""
        if not self.extra:
            self.again(policy.record_rounds)
        conf = policy.rounds.confidence
        second = self.extra[0]
        return (pooled_estimate(self.first, second, conf),
                recorded_noise(self.outcome.estimate, second.estimate(conf), previous, comparable))

    def release(self) -> None:
        """Drop the timers, and with them the closures that hold both sides' trainers."""
        self.first = self.make_timer = None
        self.extra.clear()


def time_figure(check: SpeedupCheck | None, make_timer: Callable[[], PairedTimer], policy: SpeedPolicy,
                gated: bool) -> TimedFigure:
    """Time one ratio: judged (extended, confirmed) where it gates the cell, else its first look."""
    figure = TimedFigure(make_timer(), make_timer, [])
    figure.outcome = (judge(check, figure.first, policy, lambda: figure.confirming(check, policy)) if gated
                      else first_look(check, figure.first, policy))
    return figure


def across_runs_of(est: SpeedupEstimate, between_run_sd: float | None) -> SpeedupEstimate | None:
    """`est` with its interval widened by the between-run spread its baseline entry learned from
    saved runs (``ampbench spread``), or None where the entry has none. The verdict does not use it:
    its tolerance already allows for the baseline's run being another; this is the interval to hold
    another run's speedup against."""
    between = finite_number(between_run_sd)
    return None if between is None else across_runs(est, between)


def describe_across(across: SpeedupEstimate, count: int | None) -> str:
    return (f"[{across.low:.3f}, {across.high:.3f}] (between-run sd {across.between_run_sd:.1%} from "
            f"{'?' if count is None else count} runs)")


def comparable_recording(previous: SpeedEntry | None, previous_software: dict | None, software: dict,
                         measured_with: dict[str, object]) -> bool:
    """Whether a previous baseline entry measured what this recording measures: the same software in each
    layer the entry names (``software_difference``), and the same settings (``measurement_mismatch``)."""
    return (previous is not None and software_difference(previous_software or {}, software) is None
            and measurement_mismatch(previous, measured_with) is None)


def recorded_noise(first: SpeedupEstimate, second: SpeedupEstimate, previous: float | None,
                   comparable: bool) -> float:
    """The noise a baseline is stored with, from robust figures only: the first batch's interval
    (>= 12 rounds, so one stray round cannot set it), how far the medians of the two batches lie
    apart, and, when the entry is re-recorded `comparable`-ly (the same software, measured the same
    way), how far this recording lies from the previous one, so recording twice teaches the suite a
    cell's run-to-run spread. A previous entry measured otherwise (cuDNN autotuning against its
    heuristics) differs by a shift, not by noise, and is not counted (docs/design.md).

    The second batch's own interval is left out: with its 8 rounds it is [min, max], which one stray
    round sets. An old entry's noise is not carried over either, so a noisy recording does not loosen a
    cell for ever.
    """
    noise = max(first.half_width, relative_spread(first.speedup, second.speedup))
    if comparable and finite_number(previous):
        pooled = (first.speedup * second.speedup) ** 0.5
        noise = max(noise, relative_spread(pooled, previous))
    return noise


def pooled_estimate(a: PairedTimer, b: PairedTimer, confidence: float) -> SpeedupEstimate:
    return estimate_speedup(a.ref_times + b.ref_times, a.mode_times + b.mode_times, confidence,
                            ref_first=a.ref_first + b.ref_first)
