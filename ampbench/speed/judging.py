"""How one ratio of a speed cell is judged and recorded, once its two sides can be timed: a judged figure
is extended while its interval straddles the line and confirmed by a second batch before it is called a
regression (`judge`); a reported one gets its first look (`first_look`); `TimedFigure` keeps a ratio's
batches, and a recording pools them and stores their noise (`recorded_noise`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.spread import software_difference
from ampbench.baselines.store import measurement_mismatch
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, RoundsPolicy, add_rounds_while, extend_until_tight
from ampbench.stats import SpeedupEstimate, across_runs, estimate_speedup, finite_number, relative_spread
from ampbench.stats import min_rounds as fewest_rounds
from ampbench.verdict import SpeedupCheck, Verdict


# A projection of the rounds needed is rough (from a few rounds' spread; from an interval of few rounds,
# which is wider than one over the square root of the rounds predicts, where no spread is known: up to
# ~1.6x at 8 rounds), so a cell is extended while it projects no more than twice the limit.
PROJECTION_SLACK = 2.0


def extend_while_straddling(timer: PairedTimer, check: SpeedupCheck, policy: SpeedPolicy) -> SpeedupEstimate:
    """Add rounds while the interval straddles the line and more rounds could still take it off: an
    estimate that sits on the line (a card a hair slower than the baseline's) stays inconclusive at any
    count, and was extended to the limit for nothing, 10 s and more per cell."""
    def worth_more(est: SpeedupEstimate) -> bool:
        return (check.classify(est) is Verdict.INCONCLUSIVE
                and check.rounds_to_resolve(est) <= PROJECTION_SLACK * policy.extend_to)
    return add_rounds_while(timer, policy.rounds, policy.extend_to, worth_more)


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
    second_batch: Callable[[], SpeedupEstimate],
) -> SpeedOutcome:
    """A regression only when the whole interval lies below the line and a second independent batch
    of rounds agrees; a straddling interval is extended, then inconclusive.

    An interval wholly on one side of the line is a verdict at any width, so a judged figure takes its
    first batch's rounds and no more (tightening it costs time on cells that pass: docs/design.md).
    Without a baseline, and in a recording
    (`policy.tighten_judged`), whose interval becomes the stored noise, rounds are added until the
    interval is half as wide as the cell's own tolerance: a cell whose runs spread further needs no
    tighter interval than its line allows."""
    rounds = policy.rounds
    if check is not None:
        rounds = replace(rounds, target_half_width=max(rounds.target_half_width, check.tolerance / 2))
        if not policy.tighten_judged:
            rounds = replace(rounds, max_rounds=rounds.min_rounds)
    est = extend_until_tight(first, rounds)
    if check is None:
        return SpeedOutcome(est, Verdict.NO_BASELINE, None, f"speedup {est}; no baseline for this GPU")
    verdict = check.classify(est)
    if verdict is Verdict.INCONCLUSIVE:
        est = extend_while_straddling(first, check, policy)
        verdict = check.classify(est)
    confirmation = None
    if verdict is Verdict.REGRESSION:
        confirmation = second_batch()
        again = check.classify(confirmation)
        if again is not Verdict.REGRESSION:  # two batches disagree: not a confirmed regression
            verdict = Verdict.INCONCLUSIVE
    message = check.describe(est)
    if confirmation is not None:
        message += f"; confirming batch {confirmation}"
    return SpeedOutcome(est, verdict, confirmation, message)


def first_look(check: SpeedupCheck | None, timer: PairedTimer, policy: SpeedPolicy) -> SpeedOutcome:
    """The first batch's estimate and how it compares, for a figure that is reported but does not
    gate the cell: the fewest rounds of an interval of `policy.look_confidence`, no extension, no
    confirming batch."""
    rounds = fewest_rounds(policy.look_confidence)
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

    def confirming(self, check: SpeedupCheck, policy: SpeedPolicy) -> SpeedupEstimate:
        """A confirming batch, judged as the first one is: extended while its interval straddles the
        line and more rounds could take it off (a batch cut short on the line confirms nothing either way)."""
        est = self.again(policy.rounds)
        if check.classify(est) is Verdict.INCONCLUSIVE:
            est = extend_while_straddling(self.extra[-1], check, policy)
        return est

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
