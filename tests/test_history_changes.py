"""Change points in a cell's run history (ruptures' PELT with an RBF cost on the noise-scaled ln values):
no false changes in pure noise, a controlled slowdown found at the run it started, what a change says
of itself, and the lines `history changes` prints of it."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pytest

from ampbench.history.changes import MIN_RUNS, NOISE_FLOOR, Change, find_changes, noise_scale
from ampbench.history.learn import learn
from ampbench.history.report_changes import describe_change, differences, segment_kernels
from ampbench.history.series import Point, Series
from ampbench.stats import robust_sd

SD = 0.0025  # a device-time speedup's between-run spread on an H100, in ln units


def series(logs, counts=None, restarts=(), figure: str = "device_speedup") -> Series:
    counts = [True] * len(logs) if counts is None else counts
    points = tuple(Point(f"r{i}", f"2026-02-{i + 1:02d}T10:00:00Z", math.exp(x), None, None, c, i in restarts)
                   for i, (x, c) in enumerate(zip(logs, counts)))
    return Series("NVIDIA H100 80GB HBM3", "test_speed[resnet50-amp_bf16]", figure, points)


def noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """An unchanged cell's ln values: normal noise, and a stray run 4-8 sd off in 3% of the runs."""
    z = rng.standard_normal(n)
    stray = rng.random(n) < 0.03
    z[stray] += rng.choice([-1.0, 1.0], stray.sum()) * rng.uniform(4, 8, stray.sum())
    return SD * z


def test_pure_noise_gives_at_most_one_false_change_in_a_thousand_series():
    rng = np.random.default_rng(20260201)
    t0 = time.perf_counter()
    false = [n for n in rng.integers(8, 61, 1000) if find_changes(series(noise(rng, int(n))))]
    assert len(false) <= 1, f"false changes in series of {false} runs"
    assert time.perf_counter() - t0 < 60  # ~12 ms a series with its replay on one core; generous for a busy CI machine


@pytest.mark.parametrize("n, k", [(8, 4), (10, 5), (12, 4), (12, 8), (20, 10), (30, 6), (60, 45)])
def test_a_controlled_slowdown_of_one_and_a_half_percent_is_found_at_the_run_it_started(n, k):
    rng = np.random.default_rng(1000 * n + k)
    logs = SD * rng.standard_normal(n)
    logs[k:] += math.log(1 - 0.015)
    # the slowed runs fail their verdicts, so they count towards neither the level nor the noise
    found = find_changes(series(logs, counts=[i < k for i in range(n)]))
    assert [c.index for c in found] == [k]
    assert found[0].step == pytest.approx(-0.015, abs=4 * SD)


def test_the_slowdown_is_found_at_its_run_in_nearly_every_draw_of_the_noise():
    # what the exact-run test above stands for: 8 runs, the slowdown from the fifth, noise sd 0.25%
    hits = 0
    for seed in range(200):
        logs = SD * np.random.default_rng(seed).standard_normal(8)
        logs[4:] += math.log(1 - 0.015)
        hits += [c.index for c in find_changes(series(logs, counts=[i < 4 for i in range(8)]))] == [4]
    assert hits >= 180


def test_a_stray_run_is_no_change_and_neither_is_a_pair_at_the_end():
    logs = SD * np.random.default_rng(3).standard_normal(20)
    logs[9] += 10 * SD
    assert find_changes(series(logs)) == []
    logs[18:] += 10 * SD  # the two newest runs: a change there, if any, is at 18 and nowhere else
    assert all(c.index == 18 for c in find_changes(series(logs)))


def test_a_change_says_its_levels_step_segments_and_the_runs_around_it():
    logs = np.concatenate([np.zeros(6), np.full(5, math.log(0.98))]) + SD * np.tile([1, -1], 6)[:11]
    change, = find_changes(series(logs))
    assert isinstance(change, Change) and change.index == 6
    assert (change.before, change.after) == (range(0, 6), range(6, 11))
    # the median of each segment's ln values: +-SD alternate around 0 and ln 0.98
    assert change.level_before == pytest.approx(1.0, abs=SD) and change.level_after == pytest.approx(0.98, abs=SD)
    assert change.step == pytest.approx(-0.02, abs=2 * SD)
    assert (change.run_before.run_id, change.run_after.run_id) == ("r5", "r6") and not change.accepted
    assert str(change).startswith("test_speed[resnet50-amp_bf16] device_speedup: ")


def test_a_change_at_an_accepted_restart_is_marked_accepted():
    logs = np.concatenate([np.zeros(6), np.full(6, math.log(1.03))]) + SD * np.tile([1, -1], 6)
    change, = find_changes(series(logs, restarts={6}))
    assert change.accepted and change.index == 6


def test_too_short_a_series_has_no_change_and_a_figure_that_never_moves_has_a_noise_floor():
    assert find_changes(series([0.0, 0.1, 0.1])) == []
    assert 2 * MIN_RUNS == 4
    flat = np.zeros(12)
    assert noise_scale(flat, None) == NOISE_FLOOR
    flat[6:] += 0.0002  # a rounding, not a change
    assert find_changes(series(flat, figure="memory_ratio")) == []
    flat[6:] += 0.02
    assert [c.index for c in find_changes(series(flat, figure="memory_ratio"))] == [6]


def test_the_scale_joins_the_learned_noise_with_the_series_own_robust_one():
    logs = SD * np.random.default_rng(5).standard_normal(20)
    own = noise_scale(logs, None)
    assert own == pytest.approx(robust_sd(np.diff(logs)) / math.sqrt(2))
    learned = learn(series(logs)).pooled.sd
    assert noise_scale(logs, learned) == pytest.approx(math.sqrt((own**2 + learned**2) / 2))


def test_a_step_among_runs_that_pass_neither_swells_the_learned_noise_nor_hides_itself():
    # an improvement passes its verdict, but its runs lie above the level by more than noise says: they
    # wait as suspect runs, so the learned sd stays the noise's (it held the step, 3 times the noise,
    # when they counted), and the change is found at its run
    logs = SD * np.random.default_rng(8).standard_normal(12)
    logs[6:] += math.log(1.02)
    cell = learn(series(logs))
    assert cell.pooled.sd < 1.5 * SD and cell.level == pytest.approx(math.exp(np.mean(logs[:6])), rel=1e-9)
    assert [c.index for c in find_changes(series(logs))] == [6]


# -- what `history changes` prints ---------------------------------------------------------------

@dataclass
class Run:
    id: str
    when: str
    label: str | None = None
    suite_revision: str | None = None
    software: dict = field(default_factory=dict)
    card_uuid: str | None = None


SOFTWARE = {"torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "driver": "580.159.04", "triton": "3.6.0"}


def _change() -> Change:
    logs = np.concatenate([np.zeros(6), np.full(6, math.log(0.985))]) + SD * np.tile([1, -1], 6)
    change, = find_changes(series(logs))
    return change


def test_differences_name_the_label_revision_each_software_layer_and_the_card():
    a = Run("r5", "2026-02-06T10:00:00Z", "v1.2", "abc123", dict(SOFTWARE), "GPU-1")
    b = Run("r6", "2026-02-07T10:00:00Z", "v1.3", "abc123",
            {**SOFTWARE, "torch": "2.12.0+cu130", "torchao": "0.18"}, "GPU-2")
    assert differences(a, b) == ["label v1.2 -> v1.3", "torch 2.11.0+cu130 -> 2.12.0+cu130", "torchao - -> 0.18",
                                 "card GPU-1 -> GPU-2"]
    assert differences(a, a) == []


def test_a_change_is_described_by_its_runs_what_differs_and_the_kernels_that_moved():
    change = _change()
    before = Run("r5", "2026-02-06T10:00:00Z", "v1.2", "abc123", dict(SOFTWARE))
    after = Run("r6", "2026-02-07T10:00:00Z", "v1.3", "def456", {**SOFTWARE, "driver": "590.10"})
    kernels_before = segment_kernels([[{"name": "gemm", "ms": 2.0}, {"name": "relu", "ms": 0.5}],
                                      [{"name": "gemm", "ms": 2.2}, {"name": "relu", "ms": 0.5}]])
    kernels_after = segment_kernels([[{"name": "gemm", "ms": 2.1}, {"name": "relu", "ms": 0.5},
                                      {"name": "stall", "ms": 0.5}]])
    lines = describe_change(change, before, after, kernels_before, kernels_after)
    assert lines[0] == ("test_speed[resnet50-amp_bf16] device_speedup on NVIDIA H100 80GB HBM3: 1 -> 0.985 (-1.50%) "
                        "from run #7 of 12, 6 runs before and 6 after")
    assert lines[1] == "  before: #6 run r5, 2026-02-06 10:00, label v1.2, suite abc123"
    assert lines[2] == "  after: #7 run r6, 2026-02-07 10:00, label v1.3, suite def456"
    assert lines[3] == "  differs: label v1.2 -> v1.3; suite revision abc123 -> def456; driver 580.159.04 -> 590.10"
    assert lines[4] == "  kernels per step +0.500 ms against the runs before; new: stall 0.500 ms"
    same = describe_change(change, before, Run("r6", "2026-02-07T10:00:00Z", "v1.2", "abc123", dict(SOFTWARE)))
    assert same[3] == "  differs: nothing the history records (label, suite revision, software and card alike)"
    assert same[4] == "  kernels: no kernel summary on both sides"


def test_a_segments_kernel_summary_is_the_median_of_the_kernels_most_of_its_runs_list():
    runs = [[{"name": "gemm", "ms": 2.0}, {"name": "cast", "ms": 0.1}], [{"name": "gemm", "ms": 2.4}],
            [{"name": "gemm", "ms": 2.2}, {"name": "cast", "ms": 0.3}], None, [{"name": "odd", "ms": 9.0}]]
    assert segment_kernels(runs) == [{"name": "gemm", "ms": 2.2}, {"name": "cast", "ms": 0.2}]


def test_describing_a_change_with_other_runs_than_its_own_is_refused():
    change = _change()
    with pytest.raises(ValueError, match="runs r1 and r2 are not the runs around the change"):
        describe_change(change, Run("r1", "2026-02-02T10:00:00Z"), Run("r2", "2026-02-03T10:00:00Z"))
