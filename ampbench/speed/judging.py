"""How one ratio of a speed cell is judged and recorded, once its two sides can be timed: a judged figure
is looked at in a group-sequential sign test (``sequential``) until its interval leaves its line or its
rounds run out (`decide`; ``ratio.Ratio`` confirms a regression by a second batch judged alike); its
interval across runs (`across_runs_of`); whether a recording measured what its entry did
(`comparable_recording`), and the noise a recording stores (`recorded_noise`) of its batches pooled."""

from __future__ import annotations

import math
import time

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.spread import software_difference
from ampbench.baselines.store import measurement_mismatch
from ampbench.speed.sequential import Look, schedule
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer
from ampbench.stats import (
    SpeedupEstimate,
    across_runs,
    estimate_speedup,
    finite_number,
    log_ratios,
    order_aligned,
    relative_spread,
    robust_sd,
)
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
        # out of seconds, or held to a line at or below zero, which no look can decide against
        if est is not None and (time.perf_counter() - t0 > policy.decide_seconds or not check.has_line):
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
    if comparable and previous is not None and finite_number(previous):
        pooled = (first.speedup * second.speedup) ** 0.5
        noise = max(noise, relative_spread(pooled, previous))
    return noise


def pooled_estimate(a: PairedTimer, b: PairedTimer, confidence: float) -> SpeedupEstimate:
    return estimate_speedup(a.ref_times + b.ref_times, a.mode_times + b.mode_times, confidence,
                            ref_first=a.ref_first + b.ref_first)
