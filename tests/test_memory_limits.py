"""The largest-batch search at its edges, against fake training steps (``memory_steps``): the batch limit,
the smallest batch, a cap too small, errors that are no out-of-memory, and the objects of a failed step
gone before recovery."""

from __future__ import annotations

import weakref

import pytest
import torch

from ampbench import memory
from ampbench.memory import CapTooSmall, SearchError, find_largest_batch
from memory_steps import GIB, MIB, FakeStep, assert_confirmed, linear

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


@pytest.mark.parametrize("total_gb, cap_gib",
                         [(80, 24.0), (141, 24.0), (24, 0.9 * 24e9 / 2**30), (16, 0.9 * 16e9 / 2**30)])
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
