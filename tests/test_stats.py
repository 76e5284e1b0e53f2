"""The statistics behind every speed verdict."""

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ampbench.stats import (
    SpeedupEstimate,
    _binom_cdf,
    across_runs,
    alternating,
    estimate_speedup,
    log_ratios,
    log_sd,
    median,
    median_interval,
    median_interval_ranks,
    min_rounds,
    order_aligned,
    relative_spread,
)


def test_log_ratio_sign_and_value():
    assert log_ratios([2.0], [1.0]) == [pytest.approx(math.log(2.0))]
    assert log_ratios([1.0], [2.0])[0] < 0


def test_log_ratios_reject_unpaired_and_nonpositive():
    with pytest.raises(ValueError, match="differ in length"):
        log_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        log_ratios([0.0], [1.0])


def test_median_odd_even():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    with pytest.raises(ValueError):
        median([])


@pytest.mark.parametrize("n", range(8, 61))
def test_order_statistic_interval_has_its_coverage_and_no_more_slack(n):
    lo, hi = median_interval_ranks(n, 0.99)
    assert hi == n - 1 - lo
    miss = 2 * _binom_cdf(lo, n)  # x_(lo) above the median, or x_(hi) below it
    assert 1 - miss >= 0.99
    # one rank narrower would drop below the asked coverage
    assert 1 - 2 * _binom_cdf(lo + 1, n) < 0.99


def test_eight_rounds_give_the_full_range_and_seven_are_refused():
    assert min_rounds(0.99) == 8
    assert median_interval_ranks(8, 0.99) == (0, 7)
    with pytest.raises(ValueError, match="cannot give a 99% interval"):
        median_interval_ranks(7, 0.99)


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=8, max_size=80))
def test_interval_brackets_the_median(xs):
    lo, hi = median_interval(xs, 0.99)
    assert lo <= median(xs) <= hi


@given(
    st.lists(st.floats(1e-4, 1.0), min_size=8, max_size=40),
    st.floats(0.2, 5.0),
)
def test_constant_speedup_is_recovered_exactly(ref, factor):
    est = estimate_speedup(ref, [t / factor for t in ref])
    assert est.speedup == pytest.approx(factor, rel=1e-9)
    assert est.low == pytest.approx(factor, rel=1e-9) and est.high == pytest.approx(factor, rel=1e-9)


def test_half_width_and_spread():
    est = estimate_speedup([1.0] * 10, [0.5] * 10)
    assert est.half_width == pytest.approx(0.0)
    assert relative_spread(1.1, 1.0) == pytest.approx(relative_spread(1.0, 1.1))


def test_log_sd_is_scale_free_and_needs_two_positive_values():
    assert log_sd([2.0, 2.0]) == 0.0
    assert log_sd([1.0, math.e]) == pytest.approx(math.sqrt(0.5))  # ln values 0 and 1: sample sd 1/sqrt(2)
    assert log_sd([3.0, 6.0, 12.0]) == pytest.approx(log_sd([1.0, 2.0, 4.0]))
    with pytest.raises(ValueError, match="at least 2"):
        log_sd([1.0])
    with pytest.raises(ValueError, match="positive"):
        log_sd([1.0, 0.0])


def test_across_runs_adds_the_between_run_term_to_each_end_in_quadrature():
    est = SpeedupEstimate(4.0, 4.0 * math.exp(-0.01), 4.0 * math.exp(0.02), 20, 0.99)
    wide = across_runs(est, 0.01)
    z = 2.5758293035489  # the normal quantile of a two-sided 99% interval
    assert wide.speedup == est.speedup and wide.rounds == 20 and wide.between_run_sd == 0.01
    assert math.log(wide.speedup / wide.low) == pytest.approx(math.hypot(0.01, z * 0.01))
    assert math.log(wide.high / wide.speedup) == pytest.approx(math.hypot(0.02, z * 0.01))
    assert "between-run sd 1.0%" in str(wide)
    same = across_runs(est, 0.0)
    assert (same.low, same.high) == (pytest.approx(est.low), pytest.approx(est.high))


def test_across_runs_refuses_a_bad_spread_and_a_second_widening():
    est = SpeedupEstimate(2.0, 1.9, 2.1, 12, 0.99)
    for bad in (-0.01, math.nan, math.inf):
        with pytest.raises(ValueError, match="between_run_sd"):
            across_runs(est, bad)
    with pytest.raises(ValueError, match="already allows"):
        across_runs(across_runs(est, 0.02), 0.02)


@given(st.floats(0.5, 10.0), st.floats(0.0, 0.2), st.floats(0.0, 0.2), st.floats(0.0, 0.3))
def test_across_runs_contains_the_run_interval(speedup, below, above, sd):
    est = SpeedupEstimate(speedup, speedup * math.exp(-below), speedup * math.exp(above), 12, 0.99)
    wide = across_runs(est, sd)
    assert wide.low <= est.low * (1 + 1e-12) and wide.high >= est.high * (1 - 1e-12)
    assert wide.half_width >= sd * 2.5758 - 1e-12  # at least the between-run term alone


def test_an_order_effect_is_taken_out_of_the_interval():
    # lstm_lm on an H100: rounds with the reference first ran ~1.4% higher than the others
    rng = random.Random(0)
    r = [0.83 + (0.007 if i % 2 == 0 else -0.007) + rng.gauss(0, 0.001) for i in range(16)]
    est = estimate_speedup([math.exp(x) for x in r], [1.0] * len(r))
    plain_lo, plain_hi = median_interval(r, 0.99)
    assert est.speedup == pytest.approx(math.exp(0.83), rel=1e-3)
    assert est.half_width < 0.3 * (plain_hi - plain_lo) / 2, (est, plain_lo, plain_hi)


@pytest.mark.parametrize("n", [8, 9, 12, 20])
def test_aligned_interval_keeps_its_coverage_without_an_order_effect(n):
    # the alignment takes a median from each group's own values; its residual scaling must keep the
    # 99% interval's coverage (simulated: 0.992-0.997 for normal, t3 and skewed noise, 8-48 rounds)
    rng = random.Random(n)
    trials = 4000
    covered = 0
    for _ in range(trials):
        r = [rng.gauss(0.0, 1.0) for _ in range(n)]
        _, aligned = order_aligned(r, alternating(n))
        lo, hi = median_interval(aligned, 0.99)
        covered += lo <= 0.0 <= hi
    assert covered / trials >= 0.985, f"{n} rounds: coverage {covered / trials:.4f}"


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=8, max_size=60))
def test_aligned_interval_brackets_its_centre(r):
    centre, aligned = order_aligned(r, alternating(len(r)))
    lo, hi = median_interval(aligned, 0.99)
    assert lo - 1e-9 <= centre <= hi + 1e-9


def test_order_alignment_needs_an_order_per_round_and_two_of_each():
    with pytest.raises(ValueError, match="3 rounds but 2 orders"):
        order_aligned([0.1, 0.2, 0.3], [True, False])
    # a single round of one order cannot be aligned: the plain median and values
    assert order_aligned([0.1, 0.2, 0.3], [True, True, False]) == (0.2, [0.1, 0.2, 0.3])


def test_each_timer_of_a_pooled_estimate_keeps_its_own_order():
    # an odd first batch: the second batch starts again with the reference first
    from ampbench.gate.measurement import pooled_estimate
    from ampbench.speed.timing import PairedTimer

    def timer(n):
        t = PairedTimer(lambda: 1.0, lambda: 1.0, 1, 1)
        t.ref_times = [math.exp(0.5 + (0.01 if i % 2 == 0 else -0.01)) for i in range(n)]
        t.mode_times = [1.0] * n
        return t
    est = pooled_estimate(timer(9), timer(8), 0.99)
    assert est.half_width < 1e-9 and est.speedup == pytest.approx(math.exp(0.5))
