"""The largest-batch search and the memory verdict on the CPU, against fake training steps.

A fake step has a memory model (peak bytes as a function of the batch) and an allocator limit: above
the limit it raises ``torch.OutOfMemoryError`` like the caching allocator does. The limit can sit
below the cap the search is told (fragmentation makes the real boundary lower than the allocated
peak's line predicts), and the memory model can be linear, noisy or curved.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import weakref
from pathlib import Path

import pytest
import torch

from ampbench import models
from ampbench import memory
from ampbench.baselines.entries import MemoryEntry
from ampbench.memory import CapTooSmall, SearchError, find_largest_batch, granule, judge
from ampbench.modes import get_mode
from ampbench.train import Trainer
from ampbench.verdict import Verdict

MIB = 2**20
GIB = 2**30


class FakeStep:
    """peak(b) bytes per step; out of memory above `limit` bytes. Counts its calls like real steps."""

    def __init__(self, peak, limit: float):
        self.peak, self.limit = peak, limit
        self.calls: list[int] = []

    def __call__(self, batch: int) -> float:
        self.calls.append(batch)
        y = self.peak(batch)
        if y > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {y - self.limit:.0f} bytes")
        return y

    def fits(self, batch: int) -> bool:
        return self.peak(batch) <= self.limit


def linear(fixed: float, per_sample: float, noise: float = 0.0, seed: int = 0):
    """fixed + per_sample * b, plus a deterministic per-batch jitter of up to +-noise bytes."""

    def peak(b: int) -> float:
        jitter = random.Random(b * 7919 + seed).uniform(-1.0, 1.0) * noise if noise else 0.0
        return fixed + per_sample * b + jitter

    return peak


def assert_confirmed(result, step: FakeStep) -> None:
    """The result's claim holds for the fake: max_batch fits, the next size up does not."""
    assert result.confirmed, result.describe()
    assert step.fits(result.max_batch), result.describe()
    if not result.limited:
        assert result.next_failing is not None and result.next_failing <= result.max_batch + result.granularity
        assert not step.fits(result.next_failing), result.describe()


# -- the grid ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("predicted, step", [(1, 1), (100, 1), (127, 1), (128, 2), (1000, 8), (2000, 16), (131072, 2048)])
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
        assert cell["max_batch"] - grid < result.max_batch <= cell["max_batch"] or result.limited, (name, result.describe())
        assert result.steps <= 9, (name, result.describe())
        steps += result.steps
    recorded = sum(len(c["probes"]) - 1 for c in H100_CELLS.values())  # the first entry is the default batch
    assert recorded == 425 and steps < 0.95 * recorded, (steps, recorded)


@pytest.mark.parametrize("name", sorted(H100_CELLS))
def test_h100_cells_started_from_their_baseline_take_two_steps(name):
    cell, result = _replay(name, start=H100_CELLS[name]["max_batch"], granularity=H100_CELLS[name]["max_batch_step"])
    assert result.max_batch == cell["max_batch"], result.describe()
    assert result.steps == (1 if cell["max_batch_limited"] else 2), result.describe()


# -- the limit, the smallest batch, errors ------------------------------------------------------------


def test_the_search_stops_at_the_batch_limit_and_says_so():
    peak = linear(600 * MIB, 130 * 1024)  # mlp-like: ~550k samples would fit
    step = FakeStep(peak, 70 * GIB)
    result = find_largest_batch(step, 70 * GIB, 512, first_peak=peak(512), limit=256 * 512)
    assert result.limited and result.confirmed
    assert result.max_batch == 256 * 512
    assert result.predicted > result.limit  # what the line says lies beyond: reported, not confirmed
    assert result.steps == 2  # the second size and the limit itself


def test_a_cap_below_the_smallest_batch_is_a_clear_error():
    step = FakeStep(linear(5 * GIB, 100 * MIB), 4 * GIB)
    with pytest.raises(CapTooSmall, match=r"even a batch of 1 does not fit under the memory cap of 4\.00 GiB"):
        find_largest_batch(step, 4 * GIB, 128)
    assert step.calls[-1] == 1


def test_a_first_batch_over_the_cap_descends_to_one_that_fits():
    peak = linear(1 * GIB, 100 * MIB)
    step = FakeStep(peak, 4 * GIB)
    result = find_largest_batch(step, 4 * GIB, 128, first_peak=peak(128))  # 13.5 GiB: not even stepped
    assert_confirmed(result, step)
    assert result.max_batch == 30
    assert 128 not in step.calls  # known to be over the cap from the handed-in peak


def test_a_non_oom_error_propagates():
    def broken(batch: int) -> float:
        raise ValueError("CUDNN_STATUS_NOT_SUPPORTED")

    with pytest.raises(ValueError, match="NOT_SUPPORTED"):
        find_largest_batch(broken, GIB, 8)


def test_a_runtime_error_saying_out_of_memory_counts_as_oom():
    assert memory.is_out_of_memory(RuntimeError("CUDA error: out of memory"))
    assert memory.is_out_of_memory(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert not memory.is_out_of_memory(RuntimeError("CUDNN_STATUS_NOT_SUPPORTED"))


def test_too_many_steps_is_an_error_with_the_trail():
    step = FakeStep(linear(GIB, MIB), 60 * GIB)
    with pytest.raises(SearchError, match=r"no confirmed largest batch after 3 steps: .*steps: "):
        find_largest_batch(step, 60 * GIB, 8, granularity=1, max_steps=3)


@pytest.mark.parametrize("total_gb, cap_gib", [(80, 24.0), (141, 24.0), (24, 0.9 * 24e9 / 2**30), (16, 0.9 * 16e9 / 2**30)])
def test_the_default_cap_is_90_percent_of_the_card_up_to_24_gib(total_gb, cap_gib):
    assert memory.nominal_cap_for(int(total_gb * 1e9)) / memory.GIB == pytest.approx(cap_gib, rel=1e-6)


def test_a_cap_that_is_not_positive_is_refused():
    with pytest.raises(ValueError, match="must be positive"):
        find_largest_batch(FakeStep(linear(0, 1), 1), 0, 8)


# -- out of memory as an expected event ---------------------------------------------------------------


class Activations:
    """Stands for the tensors a failed step's frames hold."""


def test_after_each_oom_the_failed_steps_objects_are_gone_before_recovery_runs():
    refs: list[weakref.ref] = []
    seen_alive: list[bool] = []
    peak = linear(2 * GIB, 85 * MIB)

    def step(batch: int) -> float:
        held = Activations()  # a local of the failing frame, reachable only from the traceback
        refs.append(weakref.ref(held))
        if peak(batch) > 60 * GIB:
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return peak(batch)

    def on_oom() -> None:
        seen_alive.append(refs[-1]() is not None)

    result = find_largest_batch(step, 70 * GIB, 128, on_oom=on_oom)
    assert seen_alive and not any(seen_alive), "the failed step's frame outlived its exception"
    assert len(seen_alive) == sum(not p.fits for p in result.probes if p.stepped)


# -- the verdict ---------------------------------------------------------------------------------


def figures(**overrides) -> dict:
    f = {
        "batch_size": 128, "peak_mem_bytes": 10 * GIB, "memory_ratio": 0.55, "max_batch": 1456,
        "max_batch_ref": 800, "max_batch_ratio": 1.82, "max_batch_step": 16, "max_batch_ref_step": 8,
        "max_batch_limited": False, "max_batch_ref_limited": False, "max_batch_throughput": 3000.0,
        "max_batch_throughput_ratio": 2.4, "cap_bytes": 70 * GIB, "alloc_conf": None,
    }
    f.update(overrides)
    return f


def baseline_of(f: dict) -> MemoryEntry:
    return MemoryEntry.from_figures({k: f[k] for k in memory.BASELINE_FIGURES})


def test_no_baseline_reports_the_figures():
    j = judge("resnet50", "amp_bf16", figures(), None, 0.03)
    assert j.verdict is Verdict.NO_BASELINE and not j.failures
    assert "largest batch 1456 (1.82x fp32's 800)" in j.message


def test_the_same_figures_pass():
    j = judge("resnet50", "amp_bf16", figures(), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.PASS, j.message


def test_a_grown_memory_ratio_fails_naming_model_mode_figure_and_values():
    j = judge("resnet50", "amp_bf16", figures(memory_ratio=0.60), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.REGRESSION
    (msg,) = j.failures
    assert "resnet50 amp_bf16: memory ratio to fp32 0.6 against baseline 0.55 (+9.1%)" in msg


def test_a_smaller_largest_batch_fails_beyond_tolerance_and_grid():
    base = baseline_of(figures())
    # 1.82 -> 1.75 is -3.8%: inside 3% + the two grid steps (1.1% + 1.0%)
    assert judge("resnet50", "amp_bf16", figures(max_batch_ratio=1.75), base, 0.03).verdict is Verdict.PASS
    j = judge("resnet50", "amp_bf16", figures(max_batch=1296, max_batch_ratio=1.62), base, 0.03)
    assert j.verdict is Verdict.REGRESSION
    assert any("largest batch 1296 against baseline 1456" in m for m in j.failures)


def test_the_largest_batch_is_not_compared_across_caps_or_at_the_limit():
    base = baseline_of(figures())
    j = judge("resnet50", "amp_bf16", figures(cap_bytes=40 * GIB, max_batch=800, max_batch_ratio=1.0), base, 0.03)
    assert j.verdict is Verdict.PASS and "largest batch not compared" in j.message
    j = judge("mlp", "bf16", figures(max_batch_limited=True, max_batch=131072), base, 0.03)
    assert j.verdict is Verdict.PASS and "batch limit" in j.message


def test_less_memory_than_the_baseline_is_an_improvement():
    j = judge("gpt", "amp_bf16", figures(memory_ratio=0.40, peak_mem_bytes=7 * GIB), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.IMPROVED, j.message


# -- without a search (the quick tier): the default batch's figures only ---------------------------------


def unsearched(**overrides) -> dict:
    """figures() as a cell that did not search its largest batch has them."""
    f = {k: v for k, v in figures(**overrides).items() if k in memory.DEFAULT_BATCH_FIGURES or k == "peak_mem_ref_bytes"}
    return dict(f, max_batch_searched=False)


def test_without_a_search_the_summary_says_so_and_names_no_batch():
    line = memory.summary("wide_resnet28_10", "amp_bf16", unsearched())
    assert line.startswith("wide_resnet28_10 amp_bf16: peak 10.00 GiB at batch 128 (0.550x fp32)")
    assert memory.NOT_SEARCHED in line and "--perf-tier full" in line
    assert "samples/s" not in line and "cap" not in line


def test_without_a_search_and_without_a_baseline_the_default_batch_is_reported():
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(), None, 0.03)
    assert j.verdict is Verdict.NO_BASELINE and not j.failures
    assert "largest batch not searched" in j.message


def test_without_a_search_the_peak_and_ratio_are_held_against_a_full_baseline():
    base = baseline_of(figures())  # recorded by the full tier: it has the largest batch
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(), base, 0.03)
    assert j.verdict is Verdict.PASS, j.message
    assert "peak memory (bytes)" in j.message and "memory ratio to fp32" in j.message
    assert "largest batch 1456" not in j.message and "largest batch not compared" not in j.message
    assert "largest batch not searched" in j.message
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(memory_ratio=0.60), base, 0.03)
    assert j.verdict is Verdict.REGRESSION
    (msg,) = j.failures
    assert msg.startswith("wide_resnet28_10 amp_bf16: memory ratio to fp32 0.6 against baseline 0.55")


def test_without_a_search_a_baseline_of_the_default_batch_only_holds_too():
    base = MemoryEntry.from_figures({k: unsearched()[k] for k in memory.DEFAULT_BATCH_FIGURES})
    assert judge("gpt", "bf16", unsearched(), base, 0.03).verdict is Verdict.PASS
    j = judge("gpt", "bf16", figures(), base, 0.03)  # a full run against it: the batch has nothing to meet
    assert j.verdict is Verdict.PASS and "largest batch not compared" in j.message


def cell_memory(mode: str, peak: int, search: memory.SearchResult | None) -> memory.CellMemory:
    """A CellMemory as measure_memory returns it, without a device: figures only."""
    breakdown = memory.Breakdown(
        batch_size=128, peak_bytes=peak, steady_bytes=peak // 4,
        held={"weights": peak // 8, "grads": peak // 8, "master": 0, "optimizer_state": 0, "batch": 0},
        reserved_peak_bytes=peak + MIB, allocator={"large_pool_peak_bytes": peak})
    return memory.CellMemory(
        model="resnet50", mode=mode, breakdown=breakdown, search=search, cap_bytes=24 * GIB,
        step_seconds=[0.5, 0.4] if search else [], probe_log=[{"batch": 128, "peak_bytes": peak,
        "reserved_peak_bytes": peak + MIB, "seconds": 0.01, "alloc_retries": 0}], warmup_steps=1,
        search_seconds=3.0 if search else None, allocator_events={"alloc_retries": 0, "ooms": 0},
        timed_alloc_retries=0 if search else None, seconds=4.0)


def a_search(per_sample: float) -> memory.SearchResult:
    return find_largest_batch(FakeStep(linear(GIB, per_sample), 24 * GIB), 24 * GIB, 128)


def test_a_cell_without_a_search_has_no_largest_batch_figures_not_zeros():
    cell, ref = cell_memory("amp_bf16", 5 * GIB, None), cell_memory("fp32", 10 * GIB, None)
    f = memory.figures_of(cell, ref)
    assert f["memory_ratio"] == pytest.approx(0.5) and f["max_batch_searched"] is False
    assert not [k for k in f if k.startswith("max_batch") and k != "max_batch_searched"]
    assert not {"search_steps", "search_seconds", "cap_bytes", "alloc_conf"} & set(f)
    assert f["weights_bytes"] == 5 * GIB // 8  # the breakdown is still there
    record, j = memory.memory_record(cell, ref, "cuda:0", baseline_of(figures()), 0.03)
    assert record.max_batch is None and record.max_batch_ratio is None and record.search is None
    assert not record.batch_searched and not type(record).times_steps(record.to_info())
    assert j.verdict is Verdict.IMPROVED and record.verdict is Verdict.IMPROVED, j.message  # 0.5x against 0.55x
    assert memory.baseline_figures(record) == {"batch_size": 128, "peak_mem_bytes": 5 * GIB, "memory_ratio": 0.5}


def test_a_searched_cell_has_every_figure_a_baseline_keeps():
    cell, ref = cell_memory("amp_bf16", 6 * GIB, a_search(MIB)), cell_memory("fp32", 10 * GIB, a_search(2 * MIB))
    record, _ = memory.memory_record(cell, ref, "cuda:0", None, 0.03)
    assert record.batch_searched and type(record).times_steps(record.to_info())
    assert record.max_batch_ratio == pytest.approx(record.max_batch / record.max_batch_ref)
    kept = memory.baseline_figures(record)
    assert set(kept) == set(memory.BASELINE_FIGURES)
    assert all(kept[k] is not None for k in kept if k != "alloc_conf")


def test_a_quick_recording_leaves_the_next_full_run_its_largest_batch(tmp_path, monkeypatch):
    """Recorded by the full tier, then by the quick tier: the entry still starts the next search and
    holds its largest batch, under the cap it was found under."""
    from ampbench.baselines.store import BaselineStore

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    test_id = "test_memory[resnet50-amp_bf16]"
    full, quick_ref = figures(cap_bytes=24 * GIB), cell_memory("fp32", 10 * GIB, None)
    store = BaselineStore.open(tmp_path, "GPU X", "gpu-x")
    store.record(test_id, baseline_of(full).to_figures(), {})
    store.write()
    quick, _ = memory.memory_record(cell_memory("amp_bf16", 5 * GIB, None), quick_ref, "cuda:0", MemoryEntry.of(store.figures(test_id)), 0.03)
    store.record(test_id, memory.baseline_figures(quick), {})
    store.write()
    entry = MemoryEntry.of(BaselineStore.open(tmp_path, "GPU X", "gpu-x").figures(test_id))
    assert entry.memory_ratio == 0.5 and entry.cap_bytes == 24 * GIB
    assert memory.search_start(entry, 24 * GIB) == (1456, 16)
    j = judge("resnet50", "amp_bf16", figures(cap_bytes=24 * GIB, max_batch=1296, max_batch_ratio=1.62), entry, 0.03)
    assert any("largest batch 1296 against baseline 1456" in m for m in j.failures)


def test_a_cell_and_its_reference_are_measured_alike():
    with pytest.raises(ValueError, match="resnet50 amp_bf16: the cell did not search its largest batch and fp32's reference did"):
        memory.figures_of(cell_memory("amp_bf16", 6 * GIB, None), cell_memory("fp32", 10 * GIB, a_search(MIB)))


# -- where the memory goes (tensor accounting runs on any device) ------------------------------------


def bytes_of(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def mlp_after_one_step(mode: str) -> tuple[Trainer, dict[str, int], list[torch.nn.Parameter]]:
    """The smoke MLP after one CPU training step in `mode`: the trainer, its held bytes, its parameters."""
    trainer = Trainer(models.get_model("mlp"), get_mode(mode), torch.device("cpu"), smoke=True)
    trainer.run(1)
    return trainer, memory.held_bytes(trainer), list(trainer.model.parameters())


def test_held_bytes_splits_weights_grads_and_optimizer_state():
    trainer, held, params = mlp_after_one_step("fp32")
    assert held["weights"] == bytes_of(params)
    assert held["grads"] == bytes_of(p.grad for p in params)
    assert held["optimizer_state"] == bytes_of(params)  # SGD momentum: one buffer per parameter
    assert held["master"] == 0
    assert held["batch"] == bytes_of((trainer.inputs, trainer.targets))


def test_held_bytes_counts_fp16_masters_once():
    _, held, params = mlp_after_one_step("fp16_master")
    assert held["weights"] == bytes_of(params)  # fp16
    assert held["master"] == 2 * 2 * bytes_of(params)  # fp32 copies and their fp32 gradients


def test_probes_switch_the_trainers_batch():
    """The search trains one trainer at many batch sizes: each probe replaces the synthetic pools
    with one batch of its size (the pools themselves are read-only)."""
    trainer = Trainer(models.get_model("mlp"), get_mode("amp_bf16"), torch.device("cpu"), smoke=True)
    prober = memory.probe._Prober(trainer, base_allocated=0, base_reserved=0)
    prober.set_batch(5)
    assert trainer.inputs.shape[0] == 5 and trainer.targets.shape[0] == 5 and trainer.batch_size == 5
    trainer.run(2)
    assert memory.held_bytes(trainer)["batch"] == 2 * 5 * 64 * 4  # inputs and targets, fp32
    prober.set_batch(None)
    assert trainer.input_pool == [] and trainer.target_pool == []
