"""The paired statistic of ``ampbench ab`` (``ab.paired``): what one, two or six pairs of base and head runs
decide, the words of an inconclusive end, the errors its schedule spends over the looks, and, over any
short history of pairs (``tests.ab_strategies``), that the verdict is monotone in the head's values, the
estimate blind to the pairs' order and inside its own interval."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ampbench.ab.paired import (
    MAX_PAIRS,
    MIN_REGRESSION_PAIRS,
    PAIRED_PASS_ALPHA,
    PAIRED_REGRESSION_ALPHA,
    PEAK_MEMORY_RULE,
    SPEEDUP_RULE,
    STEP_TIME_RULE,
    Pair,
    PairRule,
    RunValue,
    judge_pairs,
    pair_errors,
    pair_schedule,
)
from ampbench.verdict import Verdict
from tests.ab_strategies import PairHistory, pair_histories

CELL = {"model": "gpt", "mode": "amp_fp16", "source": "the base tree"}
SPEEDUP = "device-time speedup over fp32"
STEP = "device time per step"
# worst first: a verdict further along is better
ORDER = (Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.PASS, Verdict.IMPROVED)


def judged(pairs: list[Pair], rule: PairRule = SPEEDUP_RULE, figure: str = SPEEDUP, max_pairs: int = MAX_PAIRS):
    return judge_pairs(pairs, rule, max_pairs, figure=figure, **CELL)


def quiet(head_factor: float, n: int, sd: float = 0.0002, jitter: float = 0.0002) -> list[Pair]:
    """n pairs of a quiet cell, the head `head_factor` of the base, each pair a little apart."""
    return [Pair(RunValue(2.0, sd), RunValue(2.0 * head_factor * math.exp(jitter * (-1) ** i), sd)) for i in range(n)]


# -- what a few pairs decide -----------------------------------------------------------------------

def test_a_quiet_unchanged_cell_passes_at_one_pair():
    result = judged(quiet(1.0, 1, jitter=0.0))
    assert result.verdict is Verdict.PASS and result.decided
    assert result.estimate.pairs == 1 and result.estimate.low < 1.0 < result.estimate.high


def test_a_two_percent_drop_of_quiet_runs_fails_by_two_pairs():
    assert judged(quiet(0.98, 1)).verdict is Verdict.INCONCLUSIVE  # one pair fails no cell
    result = judged(quiet(0.98, 2))
    assert result.verdict is Verdict.REGRESSION
    assert result.message.startswith(f"gpt amp_fp16: {SPEEDUP}, head over base 0.98")
    assert "beyond the tolerance of 0.25%" in result.message


def test_one_pair_fails_nothing_but_improves():
    """A regression waits for a second pair (one stray run must not fail a cell); an improvement does not."""
    assert "one pair fails no cell" in judged(quiet(0.98, 1)).message
    assert judged(quiet(1.02, 1)).verdict is Verdict.IMPROVED


def test_an_exact_figure_decides_at_once():
    same = [Pair(RunValue(1e9), RunValue(1e9))]
    result = judged(same, PEAK_MEMORY_RULE, "peak memory")
    assert result.verdict is Verdict.PASS
    assert result.estimate.low == result.estimate.ratio == result.estimate.high == 1.0
    grown = [Pair(RunValue(1e9), RunValue(1.05e9))] * MIN_REGRESSION_PAIRS
    assert judged(grown, PEAK_MEMORY_RULE, "peak memory").verdict is Verdict.REGRESSION
    assert "a growth of at least 5.0%" in judged(grown, PEAK_MEMORY_RULE, "peak memory").message


def test_a_lower_is_better_figure_is_oriented_its_own_way():
    slower = [Pair(RunValue(0.010, 0.0002), RunValue(0.0102 * math.exp(0.0002 * (-1) ** i), 0.0002)) for i in range(2)]
    result = judged(slower, STEP_TIME_RULE, STEP)
    assert result.verdict is Verdict.REGRESSION
    assert result.estimate.ratio == pytest.approx(1.02, rel=1e-6)  # head / base of a step time
    assert result.estimate.low < result.estimate.ratio < result.estimate.high
    faster = [Pair(p.head, p.base) for p in slower]
    assert judged(faster, STEP_TIME_RULE, STEP).verdict is Verdict.IMPROVED


def test_an_inconclusive_end_says_what_was_and_was_not_ruled_out():
    near = quiet(0.998, MAX_PAIRS, sd=0.001, jitter=0.001)
    result = judged(near)
    assert result.verdict is Verdict.INCONCLUSIVE and not result.decided
    text = result.message
    assert text.startswith(f"inconclusive: gpt amp_fp16: {SPEEDUP}, head over base 0.99")
    assert f"after {MAX_PAIRS} pairs" in text
    assert "is ruled out, one of 0.25% (the tolerance) is not" in text
    ruled = float(text.split("a slowdown beyond ")[1].split("%")[0]) / 100
    assert ruled == pytest.approx(1.0 - result.estimate.low, abs=5e-5) and ruled > SPEEDUP_RULE.tolerance


def test_pairs_are_checked():
    with pytest.raises(ValueError, match="no pairs"):
        judged([])
    with pytest.raises(ValueError, match="more than the 2"):
        judged(quiet(1.0, 3), max_pairs=2)
    with pytest.raises(ValueError, match="finite value > 0"):
        judged([Pair(RunValue(0.0), RunValue(1.0))])


# -- the schedule ----------------------------------------------------------------------------------

@pytest.mark.parametrize("max_pairs", [1, 2, 3, MAX_PAIRS, 10, 20])
def test_the_looks_spend_each_side_within_its_alpha(max_pairs: int):
    looks = pair_schedule(max_pairs)
    assert [look.pairs for look in looks] == list(range(1, max_pairs + 1))
    false_pass, false_regression = pair_errors(looks)
    assert false_pass == pytest.approx(PAIRED_PASS_ALPHA) and false_pass <= PAIRED_PASS_ALPHA + 1e-12
    assert false_regression <= PAIRED_REGRESSION_ALPHA + 1e-12
    assert not any(look.can_fail for look in looks[:MIN_REGRESSION_PAIRS - 1])
    assert all(look.pass_error > 0 and look.regression_error > 0 for look in looks)


# -- properties over any short history of pairs ---------------------------------------------------

RULES = st.sampled_from((SPEEDUP_RULE, STEP_TIME_RULE, PEAK_MEMORY_RULE))


@given(pair_histories(), st.floats(0.0, 0.05), RULES)
@example(PairHistory((0.0, 0.0), (0.0, 0.0), (0.0, 0.0), 0.0), 0.01, PEAK_MEMORY_RULE)
# an exact first pair 1.6% better: improved, not held back as if a stray base run (it then passed lowered)
@example(PairHistory((0.0,), (0.0,), (0.0,), 0.015625), 0.015625, SPEEDUP_RULE)
def test_lowering_every_head_value_never_improves_the_verdict(history: PairHistory, lower: float, rule: PairRule):
    """Worse means lower for a higher-is-better figure and higher for the others: moved that way, every
    head alike, the verdict never gets better."""
    worse = -lower if not rule.lower_is_better else lower
    before = judged(history.pairs(), rule).verdict
    after = judged(history.pairs(worse), rule).verdict
    assert ORDER.index(after) <= ORDER.index(before)


@given(pair_histories(), st.randoms(use_true_random=False), RULES)
def test_the_order_of_the_pairs_does_not_matter(history: PairHistory, random, rule: PairRule):
    pairs = history.pairs()
    shuffled = list(pairs)
    random.shuffle(shuffled)
    a, b = judged(pairs, rule), judged(shuffled, rule)
    assert a.verdict is b.verdict
    for x, y in zip((a.estimate.ratio, a.estimate.low, a.estimate.high),
                    (b.estimate.ratio, b.estimate.low, b.estimate.high)):
        assert x == pytest.approx(y, rel=1e-9)


@given(pair_histories(), RULES)
@example(PairHistory((0.0,), (0.0,), (0.0,), 0.0), PEAK_MEMORY_RULE)
def test_the_estimate_lies_within_its_interval(history: PairHistory, rule: PairRule):
    est = judged(history.pairs(), rule).estimate
    assert est.low <= est.ratio <= est.high
    assert 0.0 < est.confidence < 1.0


@given(st.integers(1, 40))
def test_the_schedule_never_spends_more_than_its_budget(max_pairs: int):
    false_pass, false_regression = pair_errors(pair_schedule(max_pairs))
    assert false_regression <= PAIRED_REGRESSION_ALPHA * (1 + 1e-9)
    assert false_pass <= PAIRED_PASS_ALPHA * (1 + 1e-9)
