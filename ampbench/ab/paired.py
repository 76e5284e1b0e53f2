"""The paired statistic of ``ampbench ab``: what a figure's pairs of base and head runs say about head
relative to base, judged by the gate's judge with the base side as its `Reference`.

Each pair gives d = ln(head / base), oriented so that higher is better (base / head for a figure where
lower is better). Its variance has two parts: each run's own error, which the run states (the sd of
ln(value) from its interval or rounds), and how far a fresh process lands from another, which no run can
see from inside. The second is known before any pair only as a prior (`PairRule.prior_sd`, worth
`PairRule.prior_dof` degrees of freedom); as pairs come, their own spread is blended in, as a moderated
variance is (Smyth's moderated t): the excess of the pairs' spread over their runs' own variance is pooled
with the prior's, on top of the runs' own variance, and the interval is Student's t (`oriented_bounds`
says on how many degrees of freedom at each end). So one pair can already pass a quiet cell (the prior and
the runs' own errors carry it), and a cell whose pairs disagree widens its own interval.

The looks (1, 2, ... pairs up to `max_pairs`) spend each side's error by an alpha-spending function (Lan
and DeMets; the power family alpha t^rho, t the pairs over `max_pairs`), as ``gate.looks`` does for
rounds, and the union bound keeps the errors of all looks within each side's alpha however many looks a
cell takes (`pair_errors`). A regression needs MIN_REGRESSION_PAIRS pairs: one stray run never fails a
cell. docs/design.md, "Paired A/B: the operating characteristic", gives the simulated behaviour
(``dev/bench_paired.py``) that chose these constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from ampbench.gate.judge import verdict_of
from ampbench.stats import SpeedupEstimate, coverage_percent, normal_quantile, t_quantile
from ampbench.tolerance import BY_PAIRED, Reference
from ampbench.verdict import Verdict

# A false pass lets a change through that later pairs or the run history may still catch: the pass side
# spends 5% in all, most of it at the first look (rho 0.15: 3.8% of it at the first of 6), so that one
# pair passes a quiet cell, which is what keeps ``ampbench ab`` near the cost of one run per side.
PAIRED_PASS_ALPHA, PAIRED_PASS_RHO = 0.05, 0.15
# A false regression is what the suite must not produce: 0.1% in all over the looks, 1 A/A cell in 1,000
# at most (simulated: dev/bench_paired.py). rho 2 spends 0.011% at the second of 6 looks and more at each
# later one (0.031% at the sixth): a clear drop fails at 2 pairs all the same, and a drop of twice the
# tolerance, which needs 4-6 pairs, fails a quiet cell 3 times in 4 where rho 0.5 fails it 3 in 5.
PAIRED_REGRESSION_ALPHA, PAIRED_REGRESSION_RHO = 0.001, 2.0
# The fewest pairs a regression needs: a single stray run (1 in 50 are 1-3% off on a busy card) must not
# fail a cell, as the suite's own regression needs a confirming set of rounds. A pass or an improvement
# needs one: holding back a first pair that looks too good (a stray base run) would make the verdict
# better for a worse head (from inconclusive to pass), and a false pass is the pass side's 5% to spend.
MIN_REGRESSION_PAIRS = 2
# The dof of a run's stated sd of ln(value): it comes from the run's own rounds or interval (5-48 rounds),
# taken as 10, so that a cell whose runs state too small an error is not judged on the normal quantile.
RUN_SD_DOF = 10.0
# How many pairs an undecided figure gets: 6 fail a 0.5% drop of a quiet cell (sd 0.05% within a run and
# between processes) 3 times in 4, 3 only 1 in 4, 10 hardly more often than 6 (dev/bench_paired.py).
MAX_PAIRS = 6


@dataclass(frozen=True)
class RunValue:
    """One run's figure of a cell: its value (> 0) and the sd of ln(value) within that run, from its own
    interval or rounds (0.0 for an exact figure, a peak of memory)."""

    value: float
    sd: float = 0.0

    @classmethod
    def of_interval(cls, value: float, low: float, high: float, confidence: float) -> "RunValue":
        """A figure with the sd of ln(value) its own two-sided interval [low, high] at `confidence` implies."""
        return cls(value, (math.log(high) - math.log(low)) / 2 / normal_quantile(confidence))


@dataclass(frozen=True)
class Pair:
    """A base run and a head run of one cell, taken back to back on one card."""

    base: RunValue
    head: RunValue


@dataclass(frozen=True)
class PairRule:
    """How one kind of figure is judged: its tolerance (relative), which way is worse, and the
    between-process sd of ln(value) assumed before the pairs show their own (with its prior dof)."""

    tolerance: float
    lower_is_better: bool
    prior_sd: float
    prior_dof: float  # math.inf: the between-process sd is known, the pairs' spread never moves it
    worsening: str = "slowdown"  # what a change for the worse is called in messages ("growth" for memory)


# The default rules, one per kind of figure. prior_sd is the sd of ln(value) between two fresh processes
# of one cell on one card beyond each run's own error; recalibrate it from A/A runs (the sd of their
# log ratios, less the runs' own variances, over 2: dev/calibrate_paired.py), and keep prior_dof near the
# number of A/A pairs behind it, at most ~8: a prior worth more dof fails A/A cells whose processes spread
# 4 times as far (dev/bench_paired.py prints the cost).
#
# Device-time speedup over fp32: a ratio of two clocks of one process, so most of what moves between
# processes cancels; H100 runs of one cell agree within 0.02-0.4% (gpt 0.02-0.16%). Tolerance 0.25%: a
# 0.5% stall of gpt fails (3 times in 4 within 6 pairs where runs and processes spread 0.05%), a 0.3% one
# passes 3 times in 100 (mostly a stray base run hiding it). Prior 0.05% with 6 dof: one pair passes 73-98%
# of A/A cells whose runs and processes spread 0.05% or less, and A/A failures stay under 1 in 1,000 where
# processes spread 0.2%, four times the prior; 16 dof fail 7 in 1,000 there.
SPEEDUP_RULE = PairRule(tolerance=0.0025, lower_is_better=False, prior_sd=0.0005, prior_dof=6.0)
# The mode's own device time per step: nothing cancels between processes (clocks, the card's warmth), so
# it spreads about twice as far as the speedup: the speedup's rule at twice its tolerance and prior, which
# scales its operating characteristic alike.
STEP_TIME_RULE = PairRule(tolerance=0.005, lower_is_better=True, prior_sd=0.001, prior_dof=6.0)
# Peak memory: exact within a run and, for one tree, the same in each process; a nonzero spread is the
# allocator's rounding, which the pairs show themselves (1 dof: no prior to speak of). Tolerance 0.5%: a few
# MiB of a GiB peak.
PEAK_MEMORY_RULE = PairRule(tolerance=0.005, lower_is_better=True, prior_sd=0.0, prior_dof=1.0,
                            worsening="growth")


@dataclass(frozen=True)
class PairLook:
    """The look after `pairs` pairs: the error each side's bound spends there. A look that cannot fail a
    cell (too few pairs) spends nothing of the regression side; its `regression_error` is then only what
    sets its interval's high end, and the allowance carries to the next look."""

    pairs: int
    pass_error: float
    regression_error: float
    can_fail: bool

    @property
    def confidence(self) -> float:
        """The coverage of the interval between the two bounds."""
        return 1.0 - self.pass_error - self.regression_error


@lru_cache(maxsize=64)
def pair_schedule(max_pairs: int = MAX_PAIRS, regression_rho: float = PAIRED_REGRESSION_RHO) -> tuple[PairLook, ...]:
    """The looks of a figure taking at most `max_pairs` pairs, each side spending its alpha as the power
    family alpha t^rho allows by then; a continuous bound spends its allowance exactly."""
    if max_pairs < 1:
        raise ValueError(f"a schedule needs at least 1 pair, got {max_pairs}")
    looks, spent_pass, spent_regression = [], 0.0, 0.0
    for n in range(1, max_pairs + 1):
        t = n / max_pairs
        pass_error = PAIRED_PASS_ALPHA * t ** PAIRED_PASS_RHO - spent_pass
        regression_error = PAIRED_REGRESSION_ALPHA * t ** regression_rho - spent_regression
        can_fail = n >= MIN_REGRESSION_PAIRS
        spent_pass += pass_error
        spent_regression += regression_error if can_fail else 0.0
        looks.append(PairLook(n, pass_error, regression_error, can_fail))
    return tuple(looks)


def pair_errors(looks: Sequence[PairLook]) -> tuple[float, float]:
    """What a schedule spends in all: (false pass, false regression), each by the union bound."""
    return (sum(look.pass_error for look in looks),
            sum(look.regression_error for look in looks if look.can_fail))


@dataclass(frozen=True)
class PairedEstimate:
    """Head over base of one figure after `pairs` pairs: the ratio exp(mean log ratio) in the figure's own
    direction (a step time's head/base), and its interval at the look's errors."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


@dataclass(frozen=True)
class PairedVerdict:
    verdict: Verdict
    estimate: PairedEstimate
    message: str

    @property
    def decided(self) -> bool:
        return self.verdict in (Verdict.REGRESSION, Verdict.PASS, Verdict.IMPROVED)


def oriented_log_ratios(pairs: Sequence[Pair], rule: PairRule) -> list[float]:
    """Each pair's ln(head / base), negated where lower is better: higher is better either way."""
    sign = -1.0 if rule.lower_is_better else 1.0
    return [sign * math.log(p.head.value / p.base.value) for p in pairs]


def pair_variance(pairs: Sequence[Pair], rule: PairRule) -> tuple[float, float, float]:
    """(within, between, between's dof): the variance of one pair's log ratio in two parts, the runs' own
    and on top of it the between-process part, the prior's 2 prior_sd^2 pooled with what the pairs' spread
    shows beyond their runs' own (none where it shows less: the runs' stated errors are a floor no lucky
    spread lowers)."""
    n = len(pairs)
    within = sum(p.base.sd ** 2 + p.head.sd ** 2 for p in pairs) / n
    prior_between = 2.0 * rule.prior_sd ** 2
    between_dof = rule.prior_dof + n - 1
    if n < 2 or math.isinf(rule.prior_dof):
        return within, prior_between, between_dof
    d = oriented_log_ratios(pairs, rule)
    mean = sum(d) / n
    spread = sum((x - mean) ** 2 for x in d) / (n - 1)
    return within, (rule.prior_dof * prior_between + (n - 1) * max(spread - within, 0.0)) / between_dof, between_dof


def satterthwaite(a: float, a_dof: float, b: float, b_dof: float) -> float:
    """The dof of a sum of two variance estimates (Welch-Satterthwaite); infinite where both are exact."""
    if b and b_dof <= 0:
        return 0.0  # a between part with nothing to stand on: no quantile is finite
    terms = (a ** 2 / a_dof if a else 0.0) + (b ** 2 / b_dof if b else 0.0)
    return (a + b) ** 2 / terms if terms > 0 else math.inf


def _quantile(error: float, dof: float) -> float:
    """Student's t one-sided quantile, infinite with no dof to stand on (no prior and one pair)."""
    return t_quantile(error, dof) if dof > 0 else math.inf


def oriented_bounds(pairs: Sequence[Pair], rule: PairRule, look: PairLook) -> tuple[float, float, float]:
    """(mean, low, high) of the oriented log ratio at `look`: the low end spends the pass side's error,
    the high end the regression side's.

    The two ends read the variance's dof apart, as their errors cost apart. The pass end takes the two
    parts' dof combined (Welch-Satterthwaite): a cell whose runs' own errors dominate is judged near the
    normal quantile, so one pair passes a quiet cell. The regression end takes the between part's dof
    alone (prior's and pairs'), whatever the runs' own share: it holds its error where the prior is wrong,
    processes spreading 4 times as far as it says (dev/bench_paired.py), which the Welch dof does not."""
    if len(pairs) != look.pairs:
        raise ValueError(f"a look at {look.pairs} pairs was given {len(pairs)}")
    d = oriented_log_ratios(pairs, rule)
    mean = sum(d) / len(d)
    within, between, between_dof = pair_variance(pairs, rule)
    se = math.sqrt((within + between) / len(d))
    if se == 0.0:  # an exact figure: its pairs are the difference itself
        return mean, mean, mean
    pass_dof = satterthwaite(within, 2 * len(d) * RUN_SD_DOF, between, between_dof)
    regression_dof = between_dof if between else pass_dof
    return (mean, mean - _quantile(look.pass_error, pass_dof) * se,
            mean + _quantile(look.regression_error, regression_dof) * se)


def _check_pairs(pairs: Sequence[Pair], rule: PairRule, max_pairs: int) -> None:
    if not pairs:
        raise ValueError("no pairs to judge")
    if len(pairs) > max_pairs:
        raise ValueError(f"{len(pairs)} pairs, more than the {max_pairs} the schedule allows")
    for p in pairs:
        for side in (p.base, p.head):
            if not (math.isfinite(side.value) and side.value > 0 and math.isfinite(side.sd) and side.sd >= 0):
                raise ValueError(f"a side needs a finite value > 0 and a finite sd >= 0, got {side}")
    if not (0 <= rule.tolerance < 1 and rule.prior_sd >= 0 and rule.prior_dof >= 0):
        raise ValueError(f"a rule needs a tolerance in [0, 1) and a prior sd and dof >= 0, got {rule}")


def _percent(x: float) -> str:
    return f"{x:.2%}" if abs(x) < 0.01 else f"{x:.1%}"


def _ruled_out(rule: PairRule, low: float) -> float:
    """The worsening the interval's pass end rules out, in the figure's own direction (relative)."""
    if low <= 0.0:
        return math.inf
    return 1.0 / low - 1.0 if rule.lower_is_better else 1.0 - low


def _message(verdict: Verdict, est: PairedEstimate, oriented: SpeedupEstimate, rule: PairRule, look: PairLook,
             *, model: str, mode: str, figure: str) -> str:
    head = (f"{model} {mode}: {figure}, head over base {est.ratio:.4f}x [{est.low:.4f}, {est.high:.4f}] "
            f"({coverage_percent(est.confidence)}) after {est.pairs} pair{'s' if est.pairs > 1 else ''}")
    tol, worse = _percent(rule.tolerance), rule.worsening
    if verdict is Verdict.REGRESSION:
        beyond = _ruled_out(rule, oriented.high)
        return f"{head}: a {worse} of at least {_percent(beyond)}, beyond the tolerance of {tol}"
    if verdict is Verdict.IMPROVED:
        return f"{head}: better than base beyond the tolerance of {tol}"
    if verdict is Verdict.PASS:
        return f"{head}: a {worse} beyond {_percent(_ruled_out(rule, oriented.low))} is ruled out, within the " \
               f"tolerance of {tol}"
    ruled = _ruled_out(rule, oriented.low)
    could = "no " + worse + " is ruled out" if math.isinf(ruled) else f"a {worse} beyond {_percent(ruled)} is ruled out"
    if not look.can_fail and oriented.high < 1.0 - rule.tolerance:
        return (f"inconclusive: {head}; beyond the tolerance of {tol}, but one pair fails no cell (a stray run "
                f"may be all it shows): another pair decides")
    return f"inconclusive: {head}; {could}, one of {tol} (the tolerance) is not"


def judge_pairs(pairs: Sequence[Pair], rule: PairRule, max_pairs: int, *, model: str, mode: str, figure: str,
                source: str) -> PairedVerdict:
    """The verdict of one figure from its pairs so far, at the look of len(pairs) pairs of a schedule of
    `max_pairs`: the judge's (``gate.judge.verdict_of``) of the oriented estimate against a Reference at
    level 1.0, the base; a regression before MIN_REGRESSION_PAIRS pairs is inconclusive (another pair
    decides)."""
    _check_pairs(pairs, rule, max_pairs)
    look = pair_schedule(max_pairs)[len(pairs) - 1]
    mean, low, high = oriented_bounds(pairs, rule, look)
    oriented = SpeedupEstimate(math.exp(mean), math.exp(low), math.exp(high), len(pairs), look.confidence)
    baseline = Reference(level=1.0, tolerance=rule.tolerance, rule=BY_PAIRED, source=source)
    verdict = verdict_of(baseline.check(model, mode, figure=figure), oriented)
    if verdict is Verdict.REGRESSION and not look.can_fail:
        verdict = Verdict.INCONCLUSIVE  # one pair may be one stray run: another pair decides
    if rule.lower_is_better:  # the figure's own direction: head / base
        own = PairedEstimate(math.exp(-mean), math.exp(-high), math.exp(-low), len(pairs), look.confidence)
    else:
        own = PairedEstimate(oriented.speedup, oriented.low, oriented.high, len(pairs), look.confidence)
    return PairedVerdict(verdict, own, _message(verdict, own, oriented, rule, look, model=model, mode=mode,
                                                figure=figure))
