"""One ratio of a speed cell, judged: the timer's rounds of its two sides become an estimate with its
verdict and message, judged against the cell's baseline entry. Its kind (``ampbench.results.ratios``: the
device-time or wall-clock speedup, a compiled cell's ratio over its versus side, a distributed cell's
figures) says every name and rule it has; a `Ratio` judges it against the entry (``ratio_check``: one
tolerance rule for every kind), times it (judged where it gates the cell: looked at until it leaves its
line, a regression confirmed by a second batch; else its first look), and gives its figures for the
record (``RatioFigures``) and what a recording stores of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ampbench import progress
from ampbench.baselines.entries import FlatEntry, RatioEntry, SpeedEntry, entry_tolerance
from ampbench.results.ratio_figures import RatioFigures, StepFigures, over_side
from ampbench.results.ratios import RECORD_AGAIN, RatioKind
from ampbench.results.schema import MODE_SIDE
from ampbench.speed import judging, sides
from ampbench.speed.clocks import CLOCKS, Clock
from ampbench.speed.sequential import Look
from ampbench.speed.timing import PairedTimer, extend_until_tight
from ampbench.stats import SpeedupEstimate, median
from ampbench.stats import min_rounds as fewest_rounds
from ampbench.verdict import Reference, SpeedupCheck, Verdict

NO_BASELINE = "no baseline for this GPU"
# A reported figure judged against a baseline is looked at after this many rounds first: all of them above
# its line ([min, max] of 4 rounds, 87.5%) is a pass, and the rest of its rounds are not taken
REPORTED_FIRST_LOOK = 4


@dataclass
class Ratio:
    """One ratio of a cell: checked against its baseline, timed, judged."""

    kind: RatioKind
    figure: str = "speedup over fp32"  # what its check's messages call it
    over: str | None = None  # the versus side's label, for a ratio over it
    method: str | None = None  # how its device time is measured; None in wall clock
    fallback: str | None = None  # why not by graph replay, where that was wanted
    # a fresh timer of its two sides under a policy, for each batch; None once released
    clock: Callable[[sides.SpeedPolicy], PairedTimer] | None = None
    timing: Clock | None = None  # how its two sides are timed
    check: SpeedupCheck | None = None
    why_unchecked: str = ""
    gated: bool = False
    first: PairedTimer | None = None  # its first batch
    extra: list[PairedTimer] = field(default_factory=list)  # a confirming batch, a recording's noise batch
    estimate: SpeedupEstimate | None = None  # the first batch's, after any extension
    verdict: Verdict | None = None
    confirmation: SpeedupEstimate | None = None  # the second, independent batch, where one ran
    judgement: str = ""  # how it compares with its baseline
    seconds: float = 0.0  # spent timing and judging it: the cell's phase_seconds

    @classmethod
    def between(cls, kind: RatioKind, over: sides.Side, side: sides.Side, figure: str = "speedup over fp32",
                over_label: str | None = None) -> "Ratio":
        """The ratio of `side` over `over`, in device time where its kind is (both sides measured alike)."""
        clock = CLOCKS[kind.clock](over, side)
        return cls(kind, figure, over_label, clock.method, clock.fallback, clock=clock.timer, timing=clock)

    def judge_against(self, model: str, mode: str, entry: FlatEntry | None, reference: Reference | None) -> "Ratio":
        """Build its check against `reference`, what its baseline source gives the ratio (``ReferenceSource``),
        where `entry`, the cell's baseline entry, was measured as this run measures it."""
        self.check, self.why_unchecked = ratio_check(self.kind, model, mode, entry, reference, figure=self.figure,
                                                     over=self.over, method=self.method)
        return self

    def time(self, policy: sides.SpeedPolicy, gated: bool) -> "Ratio":
        """Time it in interleaved rounds of its two sides: judged (extended, confirmed) where it gates the
        cell, else its first look."""
        self.gated = gated
        t0 = time.perf_counter()
        with progress.scope(self.kind.scope):
            self.first = self.clock(policy if gated else policy.for_look())
            self._judge(policy) if gated else self._look(policy)
        self.seconds = time.perf_counter() - t0
        return self

    def _concluded(self, est: SpeedupEstimate, verdict: Verdict, judgement: str | None = None) -> None:
        self.estimate, self.verdict = est, verdict
        self.judgement = judgement if judgement is not None else self.check.describe(est)

    def _judge(self, policy: sides.SpeedPolicy) -> None:
        """A regression only when the interval at a look lies wholly below the line and a second,
        independent batch, judged alike, agrees; an interval that straddles the line at every look is
        inconclusive. A run its own batches pass fails where it lies, with the runs its history held back
        before it, below the line together (``SpeedupCheck.fails_together``).

        Without a baseline, and in a recording (`policy.tighten_judged`), whose interval becomes the stored
        noise, rounds are added until the interval is half as wide as the cell's own tolerance: a cell whose
        runs spread further needs no tighter interval than its line allows."""
        check, rounds = self.check, policy.rounds
        if check is None:
            est = extend_until_tight(self.first, rounds)
            return self._concluded(est, Verdict.NO_BASELINE, f"speedup {est}; {NO_BASELINE}")
        if policy.tighten_judged:
            est = extend_until_tight(self.first, replace(rounds, target_half_width=max(rounds.target_half_width,
                                                                                        check.tolerance / 2)))
            verdict = check.classify(est)
        else:
            est, verdict = judging.decide(self.first, check, policy)
        if verdict is Verdict.REGRESSION:
            self.extra.append(self.clock(policy))  # judged as the first batch is: a batch cut short confirms nothing
            self.confirmation, again = judging.decide(self.extra[-1], check, policy)
            if again is not Verdict.REGRESSION:  # two batches disagree: not confirmed
                verdict = Verdict.INCONCLUSIVE
        judgement = check.describe(est) + (f"; confirming batch {self.confirmation}" if self.confirmation else "")
        together = check.fails_together(est.speedup, verdict)
        if together:
            verdict, judgement = Verdict.REGRESSION, f"{judgement}; {together}"
        self._concluded(est, verdict, judgement)

    def _look(self, policy: sides.SpeedPolicy) -> None:
        """The estimate and how it compares, for a figure that is reported but does not gate the cell:
        where it is judged against a baseline, REPORTED_FIRST_LOOK rounds first, and no more where they all
        lie above its line (a sequential look, as the judged figures take, spending 2^-4 on a missed
        warning); else the fewest rounds of an interval of `policy.look_confidence`. No extension, no
        confirming batch."""
        check, timer = self.check, self.first
        rounds = fewest_rounds(policy.look_confidence)
        if check is not None and not policy.tighten_judged and REPORTED_FIRST_LOOK < rounds:
            look = Look(REPORTED_FIRST_LOOK, 1, None, 2.0 ** -REPORTED_FIRST_LOOK, 0.0)
            timer.rounds(max(0, REPORTED_FIRST_LOOK - len(timer.mode_times)))
            if len(timer.mode_times) == REPORTED_FIRST_LOOK:
                est = judging.at_look(timer, look)
                verdict = check.classify(est)
                if verdict is Verdict.PASS or not check.has_line:  # no more rounds could decide against no line
                    return self._concluded(est, verdict)
        if len(timer.mode_times) < rounds:
            timer.rounds(rounds - len(timer.mode_times))
        est = timer.estimate(policy.look_confidence)
        if check is None:
            return self._concluded(est, Verdict.NO_BASELINE, f"speedup {est}; {NO_BASELINE}")
        self._concluded(est, check.classify(est))

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
        return judging.across_runs_of(self.estimate, spread.between_run_sd)

    def step_seconds(self) -> tuple[float, float]:
        """The median per-step time of the mode and of the side it is over, across its first batch."""
        return median(self.first.mode_times), median(self.first.ref_times)

    def figures(self, entry: SpeedEntry | None = None) -> RatioFigures:
        """Its figures as the cell's record holds them; its interval across runs where `entry`, the cell's
        baseline entry, learned a between-run spread."""
        est, check, kind = self.estimate, self.check, self.kind
        steps: dict[str, Any] = {}
        if kind.steps:
            step, ref = self.step_seconds()
            across = self.across_runs(entry)
            steps = dict(sides={
                MODE_SIDE: StepFigures(step_ms=step * 1e3, round_ms=[t * 1e3 for t in self.first.mode_times]),
                over_side(kind): StepFigures(step_ms=ref * 1e3, round_ms=[t * 1e3 for t in self.first.ref_times])})
            if across is not None:
                steps.update(speedup_across_low=across.low, speedup_across_high=across.high,
                             between_run_sd=across.between_run_sd,
                             between_run_count=entry.ratio(kind).between_run_count)
        elif kind.over:
            # the versus side's step
            steps = dict(sides={over_side(kind): StepFigures(step_ms=self.step_seconds()[1] * 1e3)})
        return RatioFigures(
            speedup=est.speedup, speedup_low=est.low, speedup_high=est.high, rounds=est.rounds,
            confidence=est.confidence, baseline_speedup=check.expected if check else None,
            tolerance=check.tolerance if check else None, line=check.regression_line if check else None,
            drop=check.drop(est) if check else None,
            confirm_speedup=self.confirmation.speedup if self.confirmation else None, verdict=self.verdict,
            method=self.method if kind.same_method else None, fallback=self.fallback if kind.same_method else None,
            **steps)

    def same_figure(self, previous: SpeedEntry | None) -> bool:
        """Whether `previous` holds this very ratio: over the same side, by the same method."""
        if previous is None:
            return False
        old = previous.ratio(self.kind)
        return ((not self.kind.over or previous.versus == self.over)
                and (not self.kind.same_method or old.method == self.method))

    def _recording(self, policy: sides.SpeedPolicy, previous: float | None,
                   comparable: bool) -> tuple[SpeedupEstimate, float]:
        """Its batches pooled (a second one timed first where none ran), and its noise
        (``judging.recorded_noise``, against `previous`, the entry's figure, where `comparable`)."""
        if not self.extra:
            self.extra.append(self.clock(policy))
            extend_until_tight(self.extra[-1], policy.record_rounds)
        conf = policy.rounds.confidence
        second = self.extra[0]
        return (judging.pooled_estimate(self.first, second, conf),
                judging.recorded_noise(self.estimate, second.estimate(conf), previous, comparable))

    def recorded(self, previous: SpeedEntry | None, comparable: bool, measured_alike: bool,
                 policy: sides.SpeedPolicy, floor: float) -> dict[str, Any]:
        """What a recording stores of it: both batches pooled and its noise (against `previous`'s figure
        where `comparable`: the same software, measured the same way), its step times, and the
        between-run spread it learned wherever it was measured alike (`measured_alike`: the same
        settings, on any software: ``RatioEntry.kept_spread``), which its stored tolerance allows for."""
        kind = self.kind
        same = self.same_figure(previous)
        old = previous.ratio(kind) if same else None
        pooled, noise = self._recording(policy, old.speedup if old else None, comparable and same)
        kept = old.kept_spread() if old is not None and measured_alike else RatioEntry()
        step, ref = self.step_seconds() if kind.steps else (None, None)
        tolerance = entry_tolerance(kind, floor, kept, noise) if kind.stores_tolerance else None
        ratio = RatioEntry(speedup=pooled.speedup, ci_low=pooled.low, ci_high=pooled.high, rounds=pooled.rounds,
                           noise=noise, tolerance=tolerance, method=self.method if kind.same_method else None,
                           fallback=self.fallback if kind.stores_fallback else None,
                           step_ms=step and step * 1e3, step_ms_ref=ref and ref * 1e3,
                           **{name: getattr(kept, name) for name in RatioEntry.SPREAD})
        over = {"versus": self.over} if kind.over else {}
        return {**over, **ratio.figures(kind, nulls=("fallback",) if kind.stores_fallback else ())}

    def release(self) -> None:
        """Drop its timers and the clock that holds both sides' trainers."""
        self.clock = self.first = None
        self.extra.clear()


def ratio_check(kind: RatioKind, model: str, mode: str, entry: FlatEntry | None, reference: Reference | None, *,
                figure: str = "speedup over fp32", over: str | None = None,
                method: str | None = None) -> tuple[SpeedupCheck | None, str]:
    """The check of a ratio of `kind` (of `figure`, over the side `over`, its device time measured by
    `method`) against `reference`, or None and why not: the cell's baseline `entry` is missing, holds no
    such figure, was over another side, or measured it otherwise. The tolerance is the reference's."""
    def named(template: str) -> str:
        return template.format(method=method, figure=figure, over=over)

    if entry is None:
        return None, named(kind.no_entry)
    if (kind.over and getattr(entry, "versus", None) != over) or reference is None:
        return None, named(kind.missing)
    if kind.same_method and reference.method != method:
        return None, (f"{kind.other_method}measured by {reference.method} in the baseline and by {method} here: "
                      + RECORD_AGAIN)
    return reference.check(model, mode, figure), ""
