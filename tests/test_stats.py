"""The statistics behind every speed verdict."""

import math

import pytest
from hypothesis import given, strategies as st

from ampbench.stats import (
    _binom_cdf,
    estimate_speedup,
    log_ratios,
    median,
    median_interval,
    median_interval_ranks,
    min_rounds,
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
