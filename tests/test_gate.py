"""The gate's judge on its own (``ampbench.gate.judge``): the rules every timed figure passes through, a
speed ratio's, a distributed figure's, a bisect step's and a comparison's alike, each a small function of
a check and estimates, with no clock behind them."""

from __future__ import annotations

import pytest

from ampbench.gate.judge import NO_BASELINE, confirmed, gates, grouped, judge, verdict_of
from ampbench.gate.looks import Look, errors, schedule
from ampbench.gate.measurement import Measurement, Rounds
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import SpeedupCheck, Verdict

# a baseline of 2.0x held to 1%: the line lies at 1.98x
CHECK = SpeedupCheck("gpt", "amp_bf16", 2.0, 0.01)


def _est(low: float, high: float) -> SpeedupEstimate:
    return SpeedupEstimate((low * high) ** 0.5, low, high, 12, 0.99)


BELOW, ABOVE, ACROSS = _est(1.90, 1.95), _est(1.99, 2.01), _est(1.97, 1.99)


@pytest.mark.parametrize("est, verdict", [(BELOW, Verdict.REGRESSION), (ABOVE, Verdict.PASS),
                                          (ACROSS, Verdict.INCONCLUSIVE), (_est(2.03, 2.05), Verdict.IMPROVED)])
def test_a_figure_is_judged_by_where_its_interval_lies_against_the_line(est, verdict):
    assert verdict_of(CHECK, est) is verdict
    assert verdict_of(None, est) is Verdict.NO_BASELINE


def test_a_look_that_cannot_decide_a_side_leaves_the_figure_inconclusive():
    cannot_fail = Look(5, pass_rank=1, regression_rank=None, pass_error=2 ** -5, regression_error=0.0)
    assert verdict_of(CHECK, BELOW, cannot_fail) is Verdict.INCONCLUSIVE
    assert verdict_of(CHECK, ABOVE, cannot_fail) is Verdict.PASS


def test_a_regression_stands_only_where_the_confirming_rounds_find_it_too():
    assert confirmed(Verdict.REGRESSION, CHECK, BELOW) is Verdict.REGRESSION
    assert confirmed(Verdict.REGRESSION, CHECK, ACROSS) is Verdict.INCONCLUSIVE
    assert confirmed(Verdict.REGRESSION, CHECK, None) is Verdict.INCONCLUSIVE  # the launch gave no such figure
    assert confirmed(Verdict.PASS, CHECK, BELOW) is Verdict.PASS  # only a regression is confirmed


def test_the_group_rule_fails_a_run_its_own_rounds_did_not_and_says_why():
    held = SpeedupCheck("gpt", "amp_bf16", 2.0, 0.01,
                        group_failure=lambda value, tolerance: "with 2 runs held back" if value < 1.99 else None)
    assert grouped(held, 1.985, Verdict.PASS) == "with 2 runs held back"
    assert grouped(held, 1.995, Verdict.INCONCLUSIVE) == ""
    assert grouped(held, 1.985, Verdict.REGRESSION) == ""  # failed already
    assert grouped(CHECK, 1.985, Verdict.PASS) == ""  # no history, no rule


@pytest.mark.parametrize("gate, device, wall, measured, expected", [
    ("device", CHECK, CHECK, True, ("device",)),
    ("device", None, CHECK, True, ("wall",)),  # the entry holds no device time: the wall clock holds the cell
    ("device", None, None, True, ("device",)),  # nothing to judge: no baseline, under the device gate
    ("device", CHECK, CHECK, False, ("wall",)),  # the run measured no device time (gloo ranks)
    ("both", None, CHECK, True, ("wall",)),
    ("both", CHECK, CHECK, True, ("device", "wall")),
    ("wall", CHECK, None, True, ("wall",)),
])
def test_the_gated_figures_follow_the_gate_and_what_was_measured(gate, device, wall, measured, expected):
    assert gates(gate, device, wall, device_measured=measured) == expected


def _measured(estimate: SpeedupEstimate, confirmation: SpeedupEstimate | None, gated: bool = True) -> Measurement:
    rounds = Rounds((1.0,) * 12, (0.5,) * 12, 10, 10)
    return Measurement(gated, rounds, estimate, confirming=rounds if confirmation else None,
                       confirmation=confirmation)


def test_judge_puts_the_rules_together_with_their_words():
    verdict, words = judge(_measured(BELOW, BELOW), CHECK)
    assert verdict is Verdict.REGRESSION and "confirming batch" in words and "regression line 1.980x" in words
    assert judge(_measured(BELOW, ACROSS), CHECK)[0] is Verdict.INCONCLUSIVE
    assert judge(_measured(ABOVE, None), None) == (Verdict.NO_BASELINE, f"speedup {ABOVE}; {NO_BASELINE}")
    held = SpeedupCheck("gpt", "amp_bf16", 2.0, 0.01, group_failure=lambda value, tolerance: "held together")
    assert judge(_measured(ABOVE, None), held) == (Verdict.REGRESSION, f"{held.describe(ABOVE)}; held together")
    assert judge(_measured(ABOVE, None, gated=False), held)[0] is Verdict.PASS  # a reported figure: no group rule


def test_the_schedule_spends_within_its_budgets():
    false_pass, false_regression = errors(schedule())
    assert false_pass <= 0.05 and false_regression <= 0.01
