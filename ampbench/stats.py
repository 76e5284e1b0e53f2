"""Small pure statistics for paired timings: log ratios, medians and their order-statistic intervals,
the spread of a figure between independent runs, and Student's t quantiles."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from statistics import NormalDist, stdev
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import numpy as np


def finite_number(value: Any) -> float | None:
    """`value` as a float when it is a finite int or float (not a bool), else None: how a figure read
    from JSON (a baseline entry, a run's extra_info) is taken, missing, null and NaN alike."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def normal_quantile(confidence: float) -> float:
    """z such that a normal variable lies within +-z standard deviations with `confidence`."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def log_ratios(over: Sequence[float], mode: Sequence[float]) -> list[float]:
    """r_i = ln(t_ref_i / t_mode_i) per round: positive when the mode is faster."""
    if len(over) != len(mode):
        raise ValueError(f"paired timings differ in length: {len(over)} reference vs {len(mode)} mode")
    if any(t <= 0 for t in (*over, *mode)):
        raise ValueError("timings must be positive")
    return [math.log(r / m) for r, m in zip(over, mode)]


def median(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("median of no values")
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2**n


def coverage_percent(confidence: float) -> str:
    """A coverage as people read it: whole percent where that is exact to a tenth ("99%"), else one
    decimal ("99.8%", "97.5%"), so that a coverage of 99.6% never reads as 100% nor 97.5% as 98%."""
    tenths = round(confidence * 1000)
    if tenths % 10 == 0 and (tenths < 1000 or confidence >= 1):
        return f"{tenths // 10}%"
    return f"{confidence:.1%}" if tenths < 1000 else f"{confidence:.2%}"


def median_interval_ranks(n: int, confidence: float) -> tuple[int, int]:
    """0-based ranks (lo, hi) such that [x_(lo), x_(hi)] covers the median with at least `confidence`.

    Distribution-free: the number of values below the median is Binomial(n, 1/2) for any
    continuous distribution, so no assumption about the shape of the timing noise is needed.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    alpha = 1 - confidence
    if 2 * 0.5**n > alpha:
        raise ValueError(f"{n} values cannot give a {coverage_percent(confidence)} interval for the median; need "
                         f"{min_rounds(confidence)}")
    # x_(j) (0-based) lies above the median iff at most j values lie below it: P = cdf(j); so the
    # widest-coverage-enough interval uses the largest j with cdf(j) <= alpha / 2, on both sides
    j = 0
    while _binom_cdf(j + 1, n) <= alpha / 2:
        j += 1
    return j, n - 1 - j


def min_rounds(confidence: float) -> int:
    """The fewest values for which an order-statistic interval of the median reaches `confidence`."""
    n = 1
    while 2 * 0.5**n > 1 - confidence:
        n += 1
    return n


def median_interval(xs: Sequence[float], confidence: float) -> tuple[float, float]:
    lo, hi = median_interval_ranks(len(xs), confidence)
    s = sorted(xs)
    return s[lo], s[hi]


@dataclass(frozen=True)
class SpeedupEstimate:
    speedup: float  # exp(centre of per-round log ratios, ``order_aligned``): > 1 means the mode is faster
    low: float  # lower end of the interval of the speedup
    high: float  # upper end
    rounds: int  # paired rounds behind it
    confidence: float  # coverage of [low, high]
    # standard deviation of ln(speedup) between independent runs that [low, high] allows for as well;
    # 0: the interval is this run's alone (see `across_runs`)
    between_run_sd: float = 0.0
    # one round's standard deviation of ln(ratio), robust to a stray round (``robust_sd`` of the aligned
    # rounds): how fast more rounds narrow the interval; None where not known
    round_sd: float | None = None

    @property
    def half_width(self) -> float:
        """Relative half-width of the interval, e.g. 0.01 for +-1%."""
        return 0.5 * math.log(self.high / self.low)

    def __str__(self) -> str:
        between = f", between-run sd {self.between_run_sd:.1%}" if self.between_run_sd else ""
        return (f"{self.speedup:.3f}x [{self.low:.3f}, {self.high:.3f}] "
                f"({coverage_percent(self.confidence)}, {self.rounds} rounds{between})")


def order_aligned(r: Sequence[float], ref_first: Sequence[bool]) -> tuple[float, list[float]]:
    """(centre, aligned values) of per-round log ratios whose rounds ran in two orders.

    Rounds alternate which side runs first (``timing.PairedTimer``), so that an order effect falls on
    both sides alike. Where the two sides load the card differently, the order moves the ratio itself,
    and the rounds alternate between two levels (docs/design.md, "Where the constants come from"). The
    median of all rounds stays between the levels, but its interval spans both. As the two periods of a crossover trial,
    the orders are two groups: the centre is the mean of the groups' medians, and each value is moved
    by its group's offset from the centre (Hodges and Lehmann's aligned observations), its residual
    scaled by sqrt(m / (m - 1)) for a group of m, whose median was taken from those residuals. Where
    the order does not matter, the interval is ~11% wider than the plain one at 8 rounds, ~2% at 20;
    the order-statistic interval keeps its coverage (simulated in ``tests/test_stats.py``).
    A group of fewer than 2 values cannot be aligned: then the plain median and values."""
    if len(ref_first) != len(r):
        raise ValueError(f"{len(r)} rounds but {len(ref_first)} orders")
    groups = [[x for x, first in zip(r, ref_first) if first is order] for order in (True, False)]
    if min(len(g) for g in groups) < 2:
        return median(r), list(r)
    centres = [median(g) for g in groups]
    centre = sum(centres) / 2
    aligned = [centre + math.sqrt(len(g) / (len(g) - 1)) * (x - c) for g, c in zip(groups, centres) for x in g]
    return centre, aligned


def robust_sd(xs: Sequence[float] | np.ndarray) -> float:
    """The standard deviation of one value, from the median absolute deviation (scaled to a normal's
    sd, scipy's ``median_abs_deviation(scale="normal")``): a stray value does not set it."""
    from scipy.stats import median_abs_deviation  # scipy is slow to import; loaded on first use

    return float(median_abs_deviation(xs, scale="normal"))


def over_first(k: int) -> bool:
    """Whether round k (from 0) runs the side it is over first, as ``timing.PairedTimer`` runs them: even ones."""
    return k % 2 == 0


def alternating(n: int) -> list[bool]:
    """Which of n rounds ran the side they are over first (``over_first``)."""
    return [over_first(i) for i in range(n)]


def estimate_speedup(over: Sequence[float], mode: Sequence[float], confidence: float = 0.99,
                     ref_first: Sequence[bool] | None = None) -> SpeedupEstimate:
    """Speedup of `mode` over `over` from paired per-round times, with an interval; `ref_first`
    says which rounds ran `over` first (default: the even ones, ``alternating``)."""
    r = log_ratios(over, mode)
    centre, aligned = order_aligned(r, alternating(len(r)) if ref_first is None else ref_first)
    lo, hi = median_interval(aligned, confidence)
    return SpeedupEstimate(math.exp(centre), math.exp(lo), math.exp(hi), len(r),
                           confidence, round_sd=robust_sd(aligned))


def relative_spread(a: float, b: float) -> float:
    """|ln(a / b)|: how far apart two positive figures are, symmetric and scale-free."""
    return abs(math.log(a / b))


def geometric_mean(values: Sequence[float]) -> float:
    """exp(mean of ln(value)): the centre of positive figures whose spread ``log_sd`` measures."""
    if not values:
        raise ValueError("geometric mean of no values")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def log_sd(values: Sequence[float]) -> float:
    """Sample standard deviation of ln(value): the scale-free spread of a positive figure measured in
    several independent runs."""
    if len(values) < 2:
        raise ValueError(f"a spread needs at least 2 values, got {len(values)}")
    if any(not (v > 0 and math.isfinite(v)) for v in values):
        raise ValueError(f"values must be finite and positive, got {list(values)}")
    return stdev(math.log(v) for v in values)


def across_runs(est: SpeedupEstimate, between_run_sd: float) -> SpeedupEstimate:
    """`est` with its interval widened to cover where independent runs put the speedup, not only this
    run's rounds: each end's distance from the median (in log space) is combined in quadrature with
    z x `between_run_sd`, z the normal quantile of the interval's confidence.

    A run's rounds share one process and one card, so its own interval knows nothing of what differs
    between processes and machines, where the same cell's speedup moves about as much as the within-run
    99% intervals are wide (docs/design.md). The median stays where it is.
    """
    if not (between_run_sd >= 0 and math.isfinite(between_run_sd)):
        raise ValueError(f"between_run_sd must be finite and >= 0, got {between_run_sd}")
    if est.between_run_sd:
        raise ValueError(f"{est} already allows for a between-run spread")
    extra = normal_quantile(est.confidence) * between_run_sd
    centre = math.log(est.speedup)
    below = math.hypot(centre - math.log(est.low), extra)
    above = math.hypot(math.log(est.high) - centre, extra)
    return replace(est, low=math.exp(centre - below), high=math.exp(centre + above), between_run_sd=between_run_sd)


@lru_cache(maxsize=None)  # a replay asks for a few shares at every dof it passes
def t_quantile(share: float, dof: float) -> float:
    """The one-sided quantile of Student's t that `share` of values lie beyond."""
    from scipy.stats import t  # scipy is slow to import; only the callers that need it pay for it

    return float(t.ppf(1.0 - share, dof))
