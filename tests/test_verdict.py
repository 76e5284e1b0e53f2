"""Verdicts: the line, the straddle, the confirmation, the tolerance that follows a cell's noise."""

import math
from dataclasses import replace

import pytest

from ampbench.baselines.entries import RatioEntry, SpeedEntry, entry_tolerance, learned_spread
from ampbench.gate.writers import comparable_recording, recorded_noise
from ampbench.results.ratios import DEVICE, SPEED_RATIOS, WALL
from ampbench.speed.clocks import Clock
from ampbench.speed.ratio import Ratio
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import FEW_RUNS_QUANTILE, GATE_CONFIDENCE, UNLEARNED_TOLERANCE, BetweenRuns, tolerance_for
from ampbench.verdict import RatioCheck, SpeedupCheck, Verdict
from tests.references import entry_check


def est(s, lo, hi, n=12):
    return SpeedupEstimate(s, lo, hi, n, 0.99)


CHECK = SpeedupCheck("resnet50", "amp_bf16", expected=2.0, tolerance=0.05)  # line 1.9


def _kind(prefix: str):
    return next(kind for kind in SPEED_RATIOS.values() if kind.prefix == prefix)


def _spread(figures, prefix=""):
    """The learned spread of the ratio `figures` (a baseline entry's) hold under `prefix`."""
    return learned_spread(None if figures is None else RatioEntry.read(figures, _kind(prefix)))


def _tolerance(floor, figures, prefix, noise=None):
    """The tolerance of the ratio `figures` hold under `prefix`."""
    return entry_tolerance(_kind(prefix), floor, RatioEntry.read(figures, _kind(prefix)), noise)


@pytest.mark.parametrize(
    "estimate, verdict",
    [
        (est(2.0, 1.98, 2.02), Verdict.PASS),
        (est(1.85, 1.80, 1.89), Verdict.REGRESSION),
        (est(1.9, 1.85, 1.95), Verdict.INCONCLUSIVE),
        (est(2.3, 2.2, 2.4), Verdict.IMPROVED),
        (est(1.9, 1.9, 1.95), Verdict.PASS),  # touching the line is not below it
    ],
)

def test_classify(estimate, verdict):
    assert CHECK.classify(estimate) is verdict


def test_message_names_model_mode_figures_and_drop():
    msg = CHECK.describe(est(1.8, 1.78, 1.82))
    for part in ("resnet50", "amp_bf16", "1.800x", "2.000x", "-10.0%", "1.900x", "5.0%"):
        assert part in msg


def test_tolerance_allows_for_two_runs_with_a_t_quantile_from_few_values():
    # an uncentred recording: the new run and the recording each sit at their own offset
    five = BetweenRuns(0.0154, 5, centred=False)
    # at GATE_CONFIDENCE (99.8%): t(4 df) is 7.173
    assert tolerance_for(0.03, 0.0159, five) == pytest.approx(7.1732 * 2**0.5 * 0.0154, rel=1e-4)
    assert tolerance_for(0.03, 0.0159, None) == pytest.approx(0.0318)  # no spread learned: twice the noise
    # centred on the mean of the values: a new value lies sd x sqrt(1 + 1/n) from it
    assert BetweenRuns(0.0154, 5, centred=True).bound(0.99) == pytest.approx(4.6041 * 1.2**0.5 * 0.0154, rel=1e-4)
    # few values, a wide quantile: from 3 values t is 9.92, not z = 2.58, and held at FEW_RUNS_QUANTILE
    three = BetweenRuns(0.001, 3, centred=True)
    assert three.student_quantile(0.99) == pytest.approx(9.9248, rel=1e-4) and three.few_runs(0.99)
    assert three.bound(0.99) == pytest.approx(FEW_RUNS_QUANTILE * (4 / 3) ** 0.5 * 0.001, rel=1e-4)
    # a learned spread replaces the recorded noise, which only stood in for it
    assert tolerance_for(0.005, 0.0159, BetweenRuns(0.002, 8, True)) == pytest.approx(
        BetweenRuns(0.002, 8, True).bound(GATE_CONFIDENCE))
    # another card's share of the level's error adds in quadrature to the run-to-run term
    assert BetweenRuns(0.002, 8, True, card_sd=0.003).bound(0.99) == pytest.approx(
        BetweenRuns(0.002, 8, True).bound(0.99) * math.hypot(0.002 * (9 / 8) ** 0.5, 0.003) / (0.002 * (9 / 8) ** 0.5))
    assert tolerance_for(0.03, None, BetweenRuns(0.001, 8, True)) == 0.03  # never below the floor
    assert tolerance_for(0.03, 0.0159, None) == tolerance_for(0.03, 0.0159)


def test_a_spread_from_two_values_is_not_trusted_to_loosen_a_verdict():
    assert _spread({"between_run_sd": 0.0154, "between_run_count": 5}) == BetweenRuns(0.0154, 5, False)
    assert _spread({"between_run_sd": 0.0154, "between_run_count": 3}) == BetweenRuns(0.0154, 3, False)
    assert _spread({"between_run_sd": 0.215, "between_run_count": 2}) is None
    assert _spread({"between_run_sd": 0.0154}) is None
    assert _spread({"between_run_sd": float("nan"), "between_run_count": 5}) is None
    assert _spread({"speedup": 2.0}) is None
    assert _spread(None) is None


def test_a_spread_is_centred_where_the_recording_is_kept_beside_the_mean():
    figures = {"device_speedup": 3.1, "device_recorded_speedup": 3.12, "device_between_run_sd": 0.002,
               "device_between_run_count": 6}
    assert _spread(figures, "device_") == BetweenRuns(0.002, 6, True)
    assert _spread(figures) is None  # the wall figure has no spread here


def test_a_cell_held_against_a_baseline_is_not_held_tighter_than_the_unlearned_floor_until_its_spread_is_learned():
    # H100, wide_resnet28_10 amp_bf16 compiled: recorded at 10.996x with 0.25% noise (tolerance 0.5%), its
    # first runs on two other cards read 10.943x and 10.877x (-1.1%), the second failing unchanged
    young = {"device_speedup": 10.996, "device_noise": 0.0025, "device_between_run_sd": 0.0031,
             "device_between_run_count": 2}
    assert _tolerance(0.005, young, "device_") == UNLEARNED_TOLERANCE
    check, _ = entry_check(Ratio(DEVICE, method="graph"), "wide_resnet28_10", "amp_bf16 compiled",
                           SpeedEntry.from_figures(dict(young, speedup=10.0, device_method="graph")), 0.005)
    assert check.tolerance == UNLEARNED_TOLERANCE
    assert check.classify(est(10.877, 10.856, 10.910)) is Verdict.PASS
    assert check.classify(est(10.0, 9.9, 10.1)) is Verdict.REGRESSION, "a drop of 9% still fails"
    # a noisier recording keeps its own, wider tolerance
    assert _tolerance(0.005, {"device_noise": 0.02}, "device_") == pytest.approx(0.04)
    # learned from 3 values or more, the cell is held to its spread, below the unlearned floor
    learned = dict(young, device_between_run_count=12, device_recorded_speedup=10.99)
    assert _tolerance(0.005, learned, "device_") == pytest.approx(BetweenRuns(0.0031, 12, True).bound(GATE_CONFIDENCE))
    assert _tolerance(0.005, learned, "device_") < UNLEARNED_TOLERANCE
    # the figure being written (a recording) is read with its new noise
    assert _tolerance(0.005, {}, "versus_", noise=0.001) == UNLEARNED_TOLERANCE
    # a comparison of two runs (no baseline entry) has no such floor
    assert tolerance_for(0.005, 0.001) == 0.005


def test_tolerance_follows_recorded_noise():
    assert tolerance_for(0.03, None) == 0.03
    assert tolerance_for(0.03, 0.001) == 0.03
    assert tolerance_for(0.03, 0.05) == pytest.approx(0.10)
    assert tolerance_for(0.03, float("nan")) == 0.03


def test_ratio_check_is_one_sided():
    check = RatioCheck("gpt", "bf16", "memory ratio", expected=0.5, tolerance=0.05, worse="higher")
    assert check.failure(0.4) is None
    assert check.failure(0.52) is None
    msg = check.failure(0.6)
    assert msg and "gpt bf16" in msg and "memory ratio" in msg and "+20.0%" in msg


class FakeTimer:
    """Stands in for PairedTimer where a test needs only its estimates: hands them out as rounds are added
    (its rounds' times, which a measurement keeps, are zeros)."""

    ref_steps = mode_steps = 1

    def __init__(self, estimates):
        self.estimates = list(estimates)
        self.mode_times = [0.0] * 12
        self.ref_times = self.mode_times

    def rounds(self, n):
        self.mode_times += [0.0] * n
        if len(self.estimates) > 1:
            self.estimates.pop(0)

    def estimate(self, confidence):
        return self.estimates[0]


def rounds_of(*ratios):
    """A real PairedTimer whose k-th round measures speedup ratios[k] (the last repeated after them)."""
    it = iter(ratios)
    last = [ratios[-1]]

    def mode():
        last[0] = next(it, last[0])
        return 1.0 / last[0]
    return PairedTimer(lambda: 1.0, mode, 1, 1)


def judge(check, first, policy, confirming=None) -> Ratio:
    """A gated ratio timed by `first`, and by `confirming` where it asks for a second batch (none may be
    asked for where it is None)."""
    timers = iter([first, confirming])

    def clock(_):
        timer = next(timers)
        return timer if timer is not None else pytest.fail("no confirming batch was to be asked for")
    return Ratio(DEVICE, check=check, clock=Clock(clock)).time(policy, gated=True)


POLICY = SpeedPolicy(0, 0.0, 0.01, RoundsPolicy(12, 12, 1.0, 1.0), RoundsPolicy(8, 8, 1.0, 1.0), extend_to=24,
                     first_look=5, decide_seconds=60.0)
ABOVE, BELOW = (2.0, 2.01, 1.99, 2.02, 1.98), (1.8, 1.81, 1.79, 1.82, 1.78)  # CHECK's line is 1.9


def test_a_clear_pass_stops_at_the_first_look_and_a_regression_needs_the_second_batch_to_agree():
    timer = rounds_of(*ABOVE)
    assert judge(CHECK, timer, POLICY).verdict is Verdict.PASS
    assert len(timer.mode_times) == 5, "all five rounds above the line: a pass at the first look"
    timer, again = rounds_of(*BELOW), rounds_of(1.5)
    out = judge(CHECK, timer, POLICY, again)
    assert len(timer.mode_times) == 8, "no regression before 8 rounds: 2^-5 errs more than its side may spend"
    assert out.verdict is Verdict.REGRESSION and out.confirmation.speedup == pytest.approx(1.5)
    assert "confirming batch 1.500x" in out.judgement
    out = judge(CHECK, rounds_of(*BELOW), POLICY, rounds_of(*ABOVE))
    assert out.verdict is Verdict.INCONCLUSIVE


def test_a_straddling_ratio_is_looked_at_again_until_it_leaves_its_line_or_its_rounds_run_out():
    # one round below the line among five: not yet a pass; twelve rounds with one below are (rank 2)
    timer = rounds_of(1.85, *ABOVE)
    assert judge(CHECK, timer, POLICY).verdict is Verdict.PASS
    assert len(timer.mode_times) == 12
    # rounds on both sides of the line, to the end: inconclusive after every look, at the limit
    timer = rounds_of(*((1.85, 1.95, 1.95, 1.85) * 6))
    assert judge(CHECK, timer, POLICY).verdict is Verdict.INCONCLUSIVE
    assert len(timer.mode_times) == POLICY.extend_to
    # out of seconds after the first look: inconclusive there
    timer = rounds_of(*((1.85, 1.95, 1.95, 1.85) * 6))
    assert judge(CHECK, timer, replace(POLICY, decide_seconds=0.0)).verdict is Verdict.INCONCLUSIVE
    assert len(timer.mode_times) == 5


def test_a_check_whose_line_is_at_or_below_zero_judges_nothing():
    """Runs that vary by more than the figure learn a tolerance of 100% or more: its line cannot be crossed,
    so every run would pass. It says so instead, is inconclusive, and spends no rounds past the first look."""
    wide = replace(CHECK, tolerance=1.9)  # a host-bound wall clock's, from four runs
    assert not wide.has_line and CHECK.has_line
    assert wide.regression_line is None and CHECK.regression_line == CHECK.line  # what a record stores
    for estimate in (est(2.0, 1.98, 2.02), est(0.5, 0.4, 0.6), est(3.0, 2.9, 3.1)):
        assert wide.classify(estimate) is Verdict.INCONCLUSIVE
    assert "no regression line" in wide.describe(est(2.0, 1.98, 2.02))
    timer = rounds_of(*((1.85, 1.95, 1.95, 1.85) * 6))
    out = judge(wide, timer, POLICY)
    assert out.verdict is Verdict.INCONCLUSIVE and len(timer.mode_times) == POLICY.first_look
    assert "its runs vary by more than the figure (tolerance 190%)" in out.judgement


def test_a_run_that_passes_alone_fails_with_the_runs_its_history_held_back():
    said = []

    def group_failure(speedup, tolerance):
        said.append((speedup, tolerance))
        return "with the 2 runs held back before it it lies -6% below the level"
    check = replace(CHECK, group_failure=group_failure)
    out = judge(check, rounds_of(*ABOVE), POLICY)
    assert out.verdict is Verdict.REGRESSION and "held back before it" in out.judgement
    assert said == [(pytest.approx(2.0, rel=0.01), 0.05)]
    # a run that fails on its own is not asked
    said.clear()
    assert judge(check, rounds_of(*BELOW), POLICY, rounds_of(1.5)).verdict is Verdict.REGRESSION
    assert said == []


def test_no_baseline_reports_without_judging():
    out = judge(None, FakeTimer([est(2.0, 1.9, 2.1)]), POLICY)
    assert out.verdict is Verdict.NO_BASELINE and "no baseline" in out.judgement


def test_recorded_noise_learns_run_to_run_spread_only_from_a_comparable_recording():
    a, b = est(2.0, 1.99, 2.01), est(2.02, 2.01, 2.03)
    base = recorded_noise(a, b, None, False)
    assert base == pytest.approx(max(a.half_width, 0.00995), rel=1e-2)
    prev = {"speedup": 2.2, "noise": 0.5}
    assert recorded_noise(a, b, prev["speedup"], comparable=False) == base
    assert 0.08 < recorded_noise(a, b, prev["speedup"], comparable=True) < 0.1, "an old noise must not be carried over"


def test_a_recording_is_comparable_only_on_the_same_software_measured_the_same_way():
    sw = {"torch": "2.11.0+cu130", "cudnn": 91900}
    now = {"cudnn_benchmark": False, "block_seconds": 0.1}
    same = {"speedup": 4.0, "cudnn_benchmark": False, "block_seconds": 0.1}
    assert comparable_recording(SpeedEntry.from_figures(same), sw, sw, now)
    assert not comparable_recording(None, None, sw, now)
    assert not comparable_recording(SpeedEntry.from_figures(same), {**sw, "cudnn": 91800}, sw, now)
    # an entry from before the settings were stored counts as autotuned: a shift, not noise
    assert not comparable_recording(SpeedEntry.from_figures({"speedup": 3.2}), sw, sw, now)
    assert not comparable_recording(SpeedEntry.from_figures({**same, "block_seconds": 0.25}), sw, sw, now)
    # an entry recorded before the compiler's versions were stored names no Triton to hold a run to
    assert comparable_recording(SpeedEntry.from_figures(same), sw,
                                {**sw, "triton": "3.6.0", "inductor": "2.11.0+cu130"}, now)
    assert not comparable_recording(SpeedEntry.from_figures(same), {**sw, "triton": "3.5.0"},
                                    {**sw, "triton": "3.6.0"}, now)


def test_one_stray_round_in_the_short_batch_does_not_set_the_noise():
    first = est(2.0, 1.996, 2.004, n=12)
    short = est(2.001, 1.6, 2.01, n=8)  # [min, max] of 8 rounds, one of them disturbed
    assert recorded_noise(first, short, None, False) < 0.005


def test_a_baseline_measured_another_way_is_named():
    from ampbench.baselines.entries import SpeedEntry
    from ampbench.baselines.file import measurement_mismatch

    same = {"cudnn_benchmark": True, "block_seconds": 0.1}
    # entries recorded before the settings were stored count as the defaults they were measured with
    assert measurement_mismatch(SpeedEntry.from_figures({"speedup": 4.0}), same) is None
    assert measurement_mismatch(SpeedEntry.from_figures({"speedup": 4.0, **same}), same) is None
    msg = measurement_mismatch(SpeedEntry.from_figures({"speedup": 4.0}),
                               {"cudnn_benchmark": False, "block_seconds": 0.1})
    assert msg is not None and "cudnn_benchmark True in the baseline, False here" in msg
    msg = measurement_mismatch(SpeedEntry.from_figures({"speedup": 4.0, "block_seconds": 0.25}), same)
    assert msg is not None and "block_seconds 0.25 in the baseline, 0.1 here" in msg


def test_an_entry_without_device_time_or_measured_another_way_leaves_the_wall_verdict():
    def _checks(figures, method):
        entry = SpeedEntry.from_figures(figures)
        device = entry_check(Ratio(DEVICE, method=method), "gpt", "amp_bf16", entry, 0.005)
        wall, _ = entry_check(Ratio(WALL), "gpt", "amp_bf16", entry, 0.005)
        return device[0], wall, device[1]

    device, wall, why = _checks({"speedup": 2.0}, "graph")
    assert device is None and wall.expected == 2.0
    assert why == "no device-time baseline: record with --perf-update-baselines"
    entry = {"speedup": 2.0, "device_speedup": 2.2, "device_method": "kernels"}
    device, wall, why = _checks(entry, "graph")
    assert device is None and why.startswith("device time measured by kernels in the baseline and by graph here")
    learned = {"device_between_run_sd": 0.001, "device_between_run_count": 10, "device_recorded_speedup": 2.21}
    device, _, why = _checks({**entry, "device_method": "graph", "device_noise": 0.004, **learned}, "graph")
    assert why == "" and device.expected == 2.2 and device.tolerance == pytest.approx(0.005)


def test_a_recording_tightens_the_interval_it_keeps_as_its_noise():
    wide_pass = est(2.0, 1.95, 2.05)  # half-width 2.5%, wholly above the line (1.9)
    loose = replace(POLICY, rounds=RoundsPolicy(12, 24, 0.001, 5.0), tighten_judged=True)
    timer = FakeTimer([wide_pass, est(2.0, 1.99, 2.01)])
    out = judge(CHECK, timer, loose)
    assert len(timer.mode_times) > 12 and out.estimate.half_width < 0.01 and out.verdict is Verdict.PASS


def test_a_confirming_batch_on_the_line_is_looked_at_as_the_first_batch_is():
    """A 1% slowdown under a busy host: the first batch lay below the line and the confirming one
    straddled it by a hair at first; cut short there it would have called a real regression inconclusive."""
    ratio = judge(CHECK, rounds_of(*BELOW), POLICY, rounds_of(1.95, *BELOW))
    assert ratio.verdict is Verdict.REGRESSION and ratio.confirmation.rounds == 16
    # a confirming batch that more rounds leave above the line makes it inconclusive
    assert judge(CHECK, rounds_of(*BELOW), POLICY, rounds_of(1.85, *ABOVE)).verdict is Verdict.INCONCLUSIVE
