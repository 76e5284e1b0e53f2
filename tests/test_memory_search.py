"""The largest-batch search on the CPU, against fake training steps (``memory_steps``): the grid, a
prediction confirmed or corrected, curved peaks, a start from the baseline, and the H100's cells replayed."""

from __future__ import annotations

import bisect
import json
import math
from pathlib import Path

import pytest
import torch

from ampbench import memory
from ampbench.baselines.entries import MemoryEntry
from ampbench.memory import find_largest_batch, granule
from memory_steps import GIB, MIB, FakeStep, assert_confirmed, linear

# -- the grid ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("predicted, step",
                         [(1, 1), (100, 1), (127, 1), (128, 2), (1000, 8), (2000, 16), (131072, 2048)])
def test_granule_is_a_power_of_two_near_one_64th(predicted, step):
    assert granule(predicted) == step


# -- prediction confirmed ----------------------------------------------------------------------------


@pytest.mark.parametrize("fixed, per_sample, first", [
    (2 * GIB, 85 * MIB, 128),  # resnet50-like: ~800 samples
    (1 * GIB, 1.9 * GIB, 8),  # gpt-like: a few dozen samples
    (600 * MIB, 130 * 1024, 512),  # mlp-like: hundreds of thousands
])
def test_a_linear_peak_is_confirmed_by_two_steps_after_the_two_sizes(fixed, per_sample, first):
    cap = 70 * GIB
    step = FakeStep(linear(fixed, per_sample), cap)
    result = find_largest_batch(step, cap, first, first_peak=linear(fixed, per_sample)(first))
    assert_confirmed(result, step)
    assert result.predicted == result.max_batch, result.describe()
    assert result.max_batch + result.granularity > (cap - fixed) / per_sample >= result.max_batch
    # the second size, then the next size up (out of memory), then the prediction (fits, left warm)
    assert result.steps == 3, result.describe()
    assert step.calls[-2:] == [result.max_batch + result.granularity, result.max_batch]


def test_granularity_one_finds_the_exact_largest_batch():
    fixed, per_sample, cap = 3 * GIB, 85 * MIB, 70 * GIB
    step = FakeStep(linear(fixed, per_sample), cap)
    result = find_largest_batch(step, cap, 128, granularity=1)
    assert result.max_batch == math.floor((cap - fixed) / per_sample)
    assert result.next_failing == result.max_batch + 1
    assert result.steps == 4  # the first size (no peak handed in), the second, the prediction + 1, the prediction


@pytest.mark.parametrize("seed", range(8))
def test_noise_in_the_peak_still_ends_confirmed_in_few_steps(seed):
    fixed, per_sample, cap = 2 * GIB, 85 * MIB, 70 * GIB
    # up to +-40 MiB of jitter per step: allocator rounding and workspaces that differ per shape
    step = FakeStep(linear(fixed, per_sample, noise=40 * MIB, seed=seed), cap)
    result = find_largest_batch(step, cap, 128, first_peak=step.peak(128))
    assert_confirmed(result, step)
    assert result.steps <= 5, result.describe()


# -- prediction off, corrected -----------------------------------------------------------------------


@pytest.mark.parametrize("loss, most_steps", [(0.005, 5), (0.02, 5), (0.05, 7), (0.12, 9)])
def test_a_prediction_that_overshoots_is_corrected_inside_the_bracket(loss, most_steps):
    """The allocator's real limit lies below the cap (fragmentation): the line's prediction runs out of
    memory and the search walks down to the real boundary."""
    fixed, per_sample, cap = 2 * GIB, 85 * MIB, 70 * GIB
    step = FakeStep(linear(fixed, per_sample), cap * (1 - loss))
    result = find_largest_batch(step, cap, 128, first_peak=step.peak(128))
    assert_confirmed(result, step)
    assert result.max_batch < result.predicted
    true_max = math.floor((cap * (1 - loss) - fixed) / per_sample)
    assert true_max - result.granularity < result.max_batch <= true_max
    # a miss of m grid steps costs about 2 log2(m) steps: galloping down, then bisecting
    assert result.steps <= most_steps, result.describe()


@pytest.mark.parametrize("gain", [0.01, 0.05, 0.2])
def test_a_prediction_that_undershoots_is_corrected_upwards(gain):
    """The small sizes overstate the per-sample cost (e.g. a workspace that stops growing): the next
    size up fits too, and the search climbs with the refitted line."""
    fixed, per_sample, cap = 2 * GIB, 85 * MIB, 70 * GIB
    knee = 256  # per-sample cost drops by `gain` above this batch

    def peak(b: int) -> float:
        return fixed + per_sample * min(b, knee) + per_sample * (1 - gain) * max(0, b - knee)

    step = FakeStep(peak, cap)
    result = find_largest_batch(step, cap, 128, first_peak=peak(128))
    assert_confirmed(result, step)
    assert result.max_batch > result.predicted
    assert result.steps <= 7, result.describe()


# -- non-linear peaks --------------------------------------------------------------------------------


NONLINEAR = {
    # quadratic growth (e.g. attention materialised at growing size), noticeable only at large batches
    "superlinear": lambda b: 2 * GIB + 60 * MIB * b + 30 * 1024 * b * b,
    # sublinear: cheaper per sample as the batch grows
    "sublinear": lambda b: 2 * GIB + 400 * MIB * b**0.8,
    # a workspace that jumps by 3 GiB above batch 500 (another algorithm is picked)
    "step": lambda b: 2 * GIB + 85 * MIB * b + (3 * GIB if b > 500 else 0),
    # allocator rounding to 2 MiB blocks of 40 tensors, plus jitter
    "rounded": lambda b: 2 * GIB + 40 * 2 * MIB * math.ceil(b * 85 * MIB / 40 / (2 * MIB)),
}


@pytest.mark.parametrize("name", list(NONLINEAR))
def test_non_linear_peaks_end_confirmed(name):
    peak = NONLINEAR[name]
    cap = 70 * GIB
    step = FakeStep(peak, cap)
    result = find_largest_batch(step, cap, 64, first_peak=peak(64))
    assert_confirmed(result, step)
    assert result.steps <= 10, result.describe()


def test_a_non_monotone_boundary_is_confirmed_locally():
    """Where fragmentation makes b fit and b - 1 not, the answer is still a batch that fits whose next
    size up does not."""
    base = linear(2 * GIB, 85 * MIB)
    step = FakeStep(lambda b: base(b) + (200 * MIB if b % 3 == 0 else 0), 70 * GIB)
    result = find_largest_batch(step, 70 * GIB, 64, granularity=1)
    assert_confirmed(result, step)


# -- a start from the baseline ----------------------------------------------------------------------


def test_a_start_at_the_largest_batch_is_confirmed_in_two_steps():
    """Unchanged since the baseline: the next size up runs out of memory, the start fits, and the
    trainer is left warm at it; no second size is measured."""
    fixed, per_sample, cap = 2 * GIB, 85 * MIB, 70 * GIB
    step = FakeStep(linear(fixed, per_sample), cap)
    true_max = math.floor((cap - fixed) / per_sample) // 8 * 8
    result = find_largest_batch(step, cap, 128, first_peak=step.peak(128), start=true_max, granularity=8)
    assert_confirmed(result, step)
    assert (result.max_batch, result.steps, step.calls) == (true_max, 2, [true_max + 8, true_max]), result.describe()
    assert result.started_at == true_max and f"started at {true_max}" in result.describe()


@pytest.mark.parametrize("shift", [-0.2, -0.03, 0.03, 0.2])
def test_a_start_that_no_longer_holds_is_corrected(shift):
    """Memory per sample grew (the start runs out of memory) or shrank (the next size up fits): the
    bracket logic takes over from the start and confirms the new largest batch on the same grid."""
    fixed, per_sample, cap = 2 * GIB, 85 * MIB, 70 * GIB
    step = FakeStep(linear(fixed, per_sample * (1 - shift)), cap)
    recorded = math.floor((cap - fixed) / per_sample) // 8 * 8
    result = find_largest_batch(step, cap, 128, first_peak=step.peak(128), start=recorded, granularity=8)
    assert_confirmed(result, step)
    assert result.granularity == 8
    assert (result.max_batch > recorded) == (shift > 0), result.describe()
    assert result.steps <= 8, result.describe()


def test_a_start_at_the_limit_takes_one_step():
    step = FakeStep(linear(600 * MIB, 130 * 1024), 70 * GIB)
    result = find_largest_batch(step, 70 * GIB, 512, first_peak=step.peak(512), limit=256 * 512,
                                start=256 * 512, granularity=2048)
    assert result.limited and result.steps == 1, result.describe()


def test_a_start_no_larger_than_the_first_fit_is_ignored():
    step = FakeStep(linear(2 * GIB, 85 * MIB), 70 * GIB)
    result = find_largest_batch(step, 70 * GIB, 128, first_peak=step.peak(128), start=64, granularity=8)
    assert_confirmed(result, step)
    assert result.started_at is None and "predicted" in result.describe(), result.describe()


def test_a_start_without_its_grid_is_refused():
    with pytest.raises(ValueError, match="start.*granularity"):
        find_largest_batch(FakeStep(linear(0, 1), 100), 100, 8, start=64)


@pytest.mark.parametrize("baseline, expected", [
    ({"max_batch": 560, "max_batch_step": 8, "cap_bytes": 24 * GIB, "alloc_conf": None}, (560, 8)),
    ({"max_batch": 560, "max_batch_step": 8, "cap_bytes": 71 * GIB, "alloc_conf": None}, None),  # another cap
    ({"max_batch": 560, "max_batch_step": 8, "cap_bytes": 24 * GIB, "alloc_conf": "expandable_segments:True"}, None),
    ({"max_batch": 560, "cap_bytes": 24 * GIB, "alloc_conf": None}, None),  # no grid recorded
    ({"max_batch": True, "max_batch_step": 8, "cap_bytes": 24 * GIB, "alloc_conf": None}, None),
    (None, None),
])
def test_the_search_starts_from_a_baseline_only_under_the_same_budget(baseline, expected, monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    assert memory.search_start(MemoryEntry.of(baseline), 24 * GIB) == expected


# -- the H100's cells, replayed ---------------------------------------------------------------------

H100_CELLS = json.loads((Path(__file__).parent / "data" / "memory_search" / "h100_full_tier.json").read_text())["cells"]


class RecordedCell(FakeStep):
    """A memory cell of a real H100 run (tests/data/memory_search/h100_full_tier.json): a step at a recorded batch
    returns its recorded peak, one between recorded batches the interpolated peak; a batch above the
    recorded largest batch runs out of memory, as its next size up did on the H100."""

    def __init__(self, cell: dict):
        self.points = cell["fit_peaks"]
        ceiling = math.inf if cell["max_batch_limited"] else cell["max_batch"]
        super().__init__(self.peak_at, limit=math.inf)
        self.ceiling = ceiling

    def peak_at(self, b: int) -> float:
        xs = [x for x, _ in self.points]
        i = min(max(bisect.bisect_left(xs, b), 1), len(xs) - 1)
        (x0, y0), (x1, y1) = self.points[i - 1], self.points[i]
        return y0 + (y1 - y0) * (b - x0) / (x1 - x0)

    def __call__(self, batch: int) -> float:
        self.calls.append(batch)
        if batch > self.ceiling:
            raise torch.OutOfMemoryError(f"CUDA out of memory (batch {batch} did not fit on the H100)")
        return self.peak_at(batch)

    def fits(self, batch: int) -> bool:
        return batch <= self.ceiling


def _replay(name: str, **kwargs):
    cell = H100_CELLS[name]
    step = RecordedCell(cell)
    result = find_largest_batch(step, cell["cap_bytes"], cell["batch_size"], first_peak=cell["peak_mem_bytes"],
                                fixed_bytes=cell["fixed_bytes"], limit=cell["max_batch_limit"], **kwargs)
    assert_confirmed(result, step)
    return cell, result


def test_h100_cells_searched_blind_take_fewer_steps_than_on_the_h100():
    """Every recorded cell, searched without a start, lands within one grid step of the H100's answer in
    at most 9 steps, and all 84 together take fewer steps than the H100's search did (425)."""
    steps = 0
    for name in H100_CELLS:
        cell, result = _replay(name)
        grid = max(result.granularity, cell["max_batch_step"])
        assert (cell["max_batch"] - grid < result.max_batch <= cell["max_batch"]
                or result.limited), (name, result.describe())
        assert result.steps <= 9, (name, result.describe())
        steps += result.steps
    recorded = sum(len(c["probes"]) - 1 for c in H100_CELLS.values())  # the first entry is the default batch
    assert recorded == 425 and steps < 0.95 * recorded, (steps, recorded)


@pytest.mark.parametrize("name", sorted(H100_CELLS))
def test_h100_cells_started_from_their_baseline_take_two_steps(name):
    cell, result = _replay(name, start=H100_CELLS[name]["max_batch"], granularity=H100_CELLS[name]["max_batch_step"])
    assert result.max_batch == cell["max_batch"], result.describe()
    assert result.steps == (1 if cell["max_batch_limited"] else 2), result.describe()
