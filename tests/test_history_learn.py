"""A cell's reference level and tolerance from its run history, checked against hand-computed figures:
the level since the last restart, the noise pooled over every segment, the verdicts' bound, the states
of a cell's first runs, and the summary's sentence."""

from __future__ import annotations

import math

import pytest

from ampbench.baselines.entries import RatioEntry, SpeedEntry, learned_spread
from ampbench.baselines.spread import prior_of
from ampbench.history.learn import LEARNED, LEARNING, UNLEARNED, learn, percent, rule_for
from ampbench.history.series import Point, Series
from ampbench.results.ratios import DEVICE, SPEED_RATIOS, WALL
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.tolerance import FEW_RUNS_QUANTILE, UNLEARNED_TOLERANCE, WALL_TOLERANCE_FLOOR, BetweenRuns


def _spread(figures, prefix=""):
    """The learned spread of the ratio `figures` (a baseline entry's) hold under `prefix`."""
    kind = next(k for k in SPEED_RATIOS.values() if k.prefix == prefix)
    return learned_spread(None if figures is None else RatioEntry.read(figures, kind))


# Student's t 99.9% quantiles (two-sided 99.8%, ``tolerance.GATE_CONFIDENCE``), by degrees of freedom
T999 = {2: 22.32712, 3: 10.21453, 4: 7.173182, 9: 4.296806, 21: 3.527154}


def point(log: float, counts: bool = True, restart: bool = False, run: str = "", half: float | None = None) -> Point:
    value = math.exp(log)
    low, high = (value * math.exp(-half), value * math.exp(half)) if half is not None else (None, None)
    return Point(run or f"r{log:+.4f}", "2026-01-01T00:00:00Z", value, low, high, counts, restart)


def series(*points: Point, figure: str = "device_speedup") -> Series:
    return Series("NVIDIA H100 80GB HBM3", "test_speed[mlp-amp_bf16]", figure, tuple(points))


def test_the_level_is_the_geometric_mean_and_the_noise_the_log_sd_of_the_counted_runs():
    cell = learn(series(*(point(x) for x in (0.0, 0.004, -0.004, 0.002, -0.002))))
    # ln values with mean 0 and squared deviations 40e-6 over 4 degrees of freedom
    assert cell.level == pytest.approx(1.0) and cell.pooled.sd == pytest.approx(math.sqrt(1e-5))
    assert cell.state == LEARNED and cell.between_runs == BetweenRuns(pytest.approx(math.sqrt(1e-5)), 5, True, 1, 5)
    # t(4 df) x sqrt(1 + 1/5) x sd
    assert cell.tolerance == pytest.approx(T999[4] * math.sqrt(1.2) * math.sqrt(1e-5), rel=1e-6)  # 1.59%


def test_a_restart_moves_the_level_and_keeps_the_noise_pooled_over_both_segments():
    before = [point(x) for x in (0.0, 0.004, -0.004)]
    after = [point(0.050, restart=True), point(0.054)]
    cell = learn(series(*before, *after))
    assert cell.level == pytest.approx(math.exp(0.052)) and cell.level_count == 2
    # squared deviations 32e-6 (first segment) + 8e-6 (second) over 5 values - 2 segments
    sd = math.sqrt(40e-6 / 3)
    assert (cell.pooled.count, cell.pooled.levels) == (5, 2) and cell.pooled.sd == pytest.approx(sd)
    # t(3 df) is 10.2, held at FEW_RUNS_QUANTILE: 3.6%, and that at the unlearned tolerance
    assert cell.tolerance == pytest.approx(min(FEW_RUNS_QUANTILE * math.sqrt(1 + 1 / 2) * sd, UNLEARNED_TOLERANCE))
    # the first run at the new level: learned still, its noise that of the segment before
    first = learn(series(*before, after[0]))
    assert first.state == LEARNED and first.pooled.sd == pytest.approx(0.004)
    assert first.tolerance == pytest.approx(min(FEW_RUNS_QUANTILE * math.sqrt(2) * 0.004, UNLEARNED_TOLERANCE))
    assert first.level == pytest.approx(math.exp(0.05))


def test_a_failing_or_slowed_run_does_not_count_towards_the_level_or_the_noise():
    clean = learn(series(*(point(x) for x in (0.0, 0.004, -0.004, 0.002, -0.002))))
    with_failure = learn(series(*(point(x) for x in (0.0, 0.004, -0.004)), point(-0.1, counts=False),
                                *(point(x) for x in (0.002, -0.002))))
    assert with_failure.level == pytest.approx(clean.level) and with_failure.pooled == clean.pooled
    assert with_failure.tolerance == pytest.approx(clean.tolerance)


@pytest.mark.parametrize("logs, state, tolerance", [
    ((), LEARNING, UNLEARNED_TOLERANCE),
    ((0.0,), UNLEARNED, UNLEARNED_TOLERANCE),
    ((0.0, 0.004), UNLEARNED, UNLEARNED_TOLERANCE),
    # from the third run: sd 0.004 (squared deviations 32e-6 over 2 df), t(2 df) x sqrt(1 + 1/3), t held at
    # FEW_RUNS_QUANTILE and the whole never looser than the unlearned tolerance
    ((0.0, 0.004, -0.004), LEARNED, min(FEW_RUNS_QUANTILE * math.sqrt(4 / 3) * 0.004, UNLEARNED_TOLERANCE)),
    ((0.0, 0.001, -0.001), LEARNED, FEW_RUNS_QUANTILE * math.sqrt(4 / 3) * 0.001),
])
def test_a_new_gpu_model_learns_first_then_judges_unlearned_then_learned(logs, state, tolerance):
    cell = learn(series(*(point(x) for x in logs)))
    assert cell.state == state and cell.tolerance == pytest.approx(tolerance, rel=1e-6)
    assert (cell.level is None) == (state == LEARNING)


def test_a_run_that_did_not_count_leaves_the_cell_learning_and_a_restart_without_a_run_too():
    assert learn(series(point(0.0, counts=False))).state == LEARNING
    restarted = learn(series(*(point(x) for x in (0.0, 0.004, -0.004)), point(0.1, counts=False, restart=True)))
    assert restarted.state == LEARNING and restarted.pooled.sd == pytest.approx(0.004)
    assert restarted.sentence() == "learning: the next accepted run sets the level; noise 0.4% from 3 runs kept"


def test_an_unlearned_cell_is_held_to_twice_its_widest_interval_where_that_is_wider_than_the_floor():
    cell = learn(series(point(0.0, half=0.02), point(0.01, half=0.01)))
    assert cell.state == UNLEARNED and cell.recorded_noise == pytest.approx(0.02)
    assert cell.tolerance == pytest.approx(0.04)


def test_each_ratio_is_held_to_its_rule_as_its_verdicts_hold_it():
    # one rule per kind of ratio, read off its row: the file's verdicts and the history's alike
    assert rule_for("speedup") == WALL.rule(DEFAULT_TOLERANCE) == (WALL_TOLERANCE_FLOOR, UNLEARNED_TOLERANCE)
    assert rule_for("device_speedup", 0.01) == DEVICE.rule(0.01) == (0.01, UNLEARNED_TOLERANCE)
    assert rule_for("memory_ratio", 0.01) == (0.01, 0.0)  # no ratio of a timed cell: the user's floor alone
    assert learn(series(point(0.0), figure="speedup")).tolerance == WALL_TOLERANCE_FLOOR


def test_the_sentence_says_how_far_the_tolerance_is_learned_and_where_more_runs_take_it():
    a = 0.0014 * math.sqrt(3) / 2  # four ln values +-a: sd 0.0014
    cell = learn(series(*(point(x) for x in (a, -a, a, -a))))
    assert cell.pooled.sd == pytest.approx(0.0014)
    # now t(3 df) (10.2, held at FEW_RUNS_QUANTILE) x sqrt(1.25) x sd = 1.3%; after 10 runs t(9 df) x
    # sqrt(1.1) x sd = 0.63%
    assert cell.tolerance == pytest.approx(FEW_RUNS_QUANTILE * math.sqrt(1.25) * 0.0014, rel=1e-6)
    assert cell.tolerance_after(10) == pytest.approx(T999[9] * math.sqrt(1.1) * 0.0014, rel=1e-6)
    assert cell.sentence() == "1.3% from 4 runs; about 0.63% after 10"
    young = learn(series(point(0.0), point(0.004)))
    assert young.sentence() == ("3% (unlearned) from 2 runs; learned from 3; about "
                                f"{percent(young.tolerance_after(10))} after 10")
    assert learn(series(point(0.0))).sentence() == "3% (unlearned) from 1 run; learned from 3"


def test_a_baseline_files_spread_pools_in_as_a_level_of_its_own():
    figures = {"device_speedup": 1.2, "device_recorded_speedup": 1.19, "device_between_run_sd": 0.002,
               "device_between_run_count": 20}
    prior = prior_of(DEVICE, SpeedEntry.from_figures(figures))
    cell = learn(series(*(point(x) for x in (0.0, 0.002, -0.002))), prior=prior)
    # squared deviations 19 x 0.002^2 from the file and 8e-6 from the history, over 23 values - 2 levels
    sd = math.sqrt((19 * 0.002**2 + 8e-6) / 21)
    assert (cell.pooled.count, cell.pooled.levels, cell.prior_count) == (23, 2, 20)
    assert cell.pooled.sd == pytest.approx(sd) and cell.level == pytest.approx(1.0)
    assert cell.tolerance == pytest.approx(max(DEFAULT_TOLERANCE, T999[21] * math.sqrt(4 / 3) * sd), rel=1e-6)
    assert cell.sentence().startswith(f"{percent(cell.tolerance)} from 23 runs, 20 of them from the baseline file")


def test_the_entry_figures_read_back_as_the_same_spread_and_tolerance():
    cell = learn(series(*(point(x) for x in (0.0, 0.004, -0.004)), point(0.05, restart=True), point(0.054)))
    ratio = cell.into(RatioEntry(noise=0.01), stores_tolerance=True)
    assert ratio.speedup == pytest.approx(math.exp(0.052)) and ratio.noise == 0.01
    assert ratio.recorded_speedup == pytest.approx(math.exp(0.05))
    assert learned_spread(ratio) == cell.between_runs
    assert ratio.tolerance == cell.tolerance
    assert cell.into(RatioEntry(), stores_tolerance=False).tolerance is None
    assert learn(series()).into(RatioEntry(speedup=2.0), stores_tolerance=True) == RatioEntry(speedup=2.0)


def test_a_figure_that_cannot_be_logged_is_refused_naming_its_run():
    bad = Point("run-7", "2026-01-01T00:00:00Z", 0.0, None, None, True, False)
    with pytest.raises(ValueError, match="run run-7: value 0.0 is not a finite positive figure"):
        learn(series(point(0.0), bad))
