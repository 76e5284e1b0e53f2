"""Memory: what each precision mode saves, and how large a batch it fits.

Per model and mode: the peak memory of a training step at the model's default batch with a breakdown
(weights, gradients, fp32 masters, optimizer state, batch, activations), its ratio to fp32. Under
``--perf-tier full`` also the largest batch under the memory cap, confirmed by a real step that fits and
one a size up that does not, and its ratio to fp32's; samples/s at that batch and the ratio to fp32 at
fp32's largest batch. The quick tier leaves the search out: it is most of the test's time (WRN-28-10
fp32's steps near the cap take seconds each). Held against this GPU's baseline; GPU only (the search
logic is tested on the CPU in tests/test_memory_search.py).
"""

from __future__ import annotations

import warnings
from typing import NoReturn

import pytest

from ampbench import memory
from ampbench.baselines.entries import MemoryEntry
from ampbench.baselines.source import BaselineSource
from ampbench.device import release
from ampbench.memory import CellMemory, MemoryMeasurementError
from ampbench.memory.limit import limit_bytes
from ampbench.models import get_model
from ampbench.modes import FP32_MODE, get_mode
from ampbench.plugin.fixtures import card_where_unrecorded, out_of_memory
from ampbench.settings import TIERS
from ampbench.verdict import Verdict


def _searches(settings) -> bool:
    """Whether this run searches the largest batch: the full tier does, the quick tier measures the
    default batch only (the tier's row, ``settings.TIERS``)."""
    return TIERS[settings.tier].memory_search


@pytest.fixture(scope="session")
def memory_cap_bytes(perf_settings, perf_device) -> int | None:
    """--perf-memory-cap in bytes, or 90% of the card's total memory (or of --perf-memory-limit) up to
    24 GiB (less where the card is shared); None off CUDA."""
    if perf_device.type != "cuda":
        return None
    release(perf_device)
    cap = memory.cap_bytes_for(perf_device, perf_settings.memory_cap_gib)
    nominal = memory.nominal_cap_bytes(perf_device)
    if perf_settings.memory_limit_gib is not None:
        # the card is the limit: its default cap is the limit's share (a given cap was checked against it)
        nominal = memory.nominal_cap_for(limit_bytes(perf_settings.memory_limit_gib))
        cap = min(cap, nominal) if perf_settings.memory_cap_gib is None else cap
    # the cap bounds the search only: without one a lowered cap changes nothing worth a warning
    if _searches(perf_settings) and perf_settings.memory_cap_gib is None and cap < nominal:
        warnings.warn(UserWarning(
            f"the card has less free memory than the default cap of {memory.gib(nominal)} needs: the cap "
            f"is lowered to {memory.gib(cap)}, and largest batches are not held against baselines recorded "
            f"under the full cap"))
    return cap


@pytest.fixture(scope="session")
def _fp32_memories() -> dict:
    """model name -> fp32's CellMemory (figures only, no tensors), or its failure (no traceback)."""
    return {}


@pytest.fixture
def needs_cuda(perf_device) -> None:
    if perf_device.type != "cuda":
        pytest.skip(memory.NO_CUDA_REASON)


def _fail(failure: MemoryMeasurementError, settings, message: str, card_gib: float | None = None) -> NoReturn:
    """A cell that could not be measured fails with `message`; one that ran out of memory takes the
    suite's one out-of-memory outcome (a skip with its need under --perf-memory-limit, or on a card of
    `card_gib` where no baseline of this GPU has the cell)."""
    if failure.out_of_memory:
        out_of_memory(message, settings.memory_limit_gib, card_gib)
    pytest.fail(message, pytrace=False)


def _measure(spec, mode, device, settings, cap, baseline: MemoryEntry | None,
             timed=None) -> CellMemory | MemoryMeasurementError:
    """The cell's measurement, or a failure message naming model, mode, batch and figures. The search,
    where this tier runs it, starts at `baseline`'s largest batch where it was recorded under this cap
    (see ``memory.search_start``)."""
    try:
        return memory.measure_memory(spec, mode, device, cap, smoke=settings.smoke, timed=timed,
                                     start=memory.search_start(baseline, cap), search=_searches(settings))
    except MemoryMeasurementError as exc:
        return exc.with_traceback(None)  # kept for the mode cells: its frames would keep the failed work alive


def _test_id(model: str, mode: str) -> str:
    return f"test_memory[{model}-{mode}]"


def _baseline(baseline_source: BaselineSource | None, model: str, mode: str) -> MemoryEntry | None:
    entry = baseline_source.entry(_test_id(model, mode)) if baseline_source is not None else None
    return entry if isinstance(entry, MemoryEntry) else None


@pytest.fixture
def fp32_memory(needs_cuda, fits_in_memory, model_spec, mode, perf_device, perf_settings, memory_cap_bytes,
                baseline_source, _fp32_memories) -> CellMemory | None:
    """fp32's figures for this model, measured once per session and shared by its modes, with the
    search where the tier runs it, as the cells are; None in the fp32 cell itself, which measures them
    (with the benchmark fixture) and leaves them here."""
    fits_in_memory()
    if mode.name == FP32_MODE:
        return None
    baseline = _baseline(baseline_source, model_spec.name, FP32_MODE)
    if model_spec.name not in _fp32_memories:
        _fp32_memories[model_spec.name] = _measure(
            model_spec, get_mode(FP32_MODE), perf_device, perf_settings, memory_cap_bytes, baseline)
    ref = _fp32_memories[model_spec.name]
    if isinstance(ref, MemoryMeasurementError):
        _fail(ref, perf_settings, f"{model_spec.name} fp32 side could not be measured: {ref}",
              card_where_unrecorded(baseline, perf_device))
    return ref


# a memory cell is timed only where it searched its largest batch: its steps there (the full tier)
@pytest.mark.benchmark(group="memory")
def test_memory(benchmark, record_result, model_spec, mode, fp32_memory, perf_settings, perf_device,
                memory_cap_bytes, baseline_source, software, _fp32_memories):
    """Peak memory and its ratio to fp32, and under the full tier the confirmed largest batch and its
    ratio, throughput there; held against this GPU's baseline. pytest-benchmark times the steps at the
    largest batch; a cell that searched none hands it no timing (its record is kept all the same)."""
    settings, spec = perf_settings, model_spec

    def timed(step, rounds: int) -> None:
        benchmark.pedantic(step, rounds=rounds, iterations=1, warmup_rounds=0)

    baseline = _baseline(baseline_source, spec.name, mode.name)  # where the search starts, and what it is held to
    cell = _measure(spec, mode, perf_device, settings, memory_cap_bytes, baseline, timed)
    if fp32_memory is None:  # this is the fp32 cell
        _fp32_memories[spec.name] = cell
    if isinstance(cell, MemoryMeasurementError):
        _fail(cell, perf_settings, str(cell), card_where_unrecorded(baseline, perf_device))
    record, judgement = memory.memory_record(cell, fp32_memory or cell, str(perf_device), baseline,
                                             settings.tolerance)
    record_result(record)
    if settings.update_baselines and baseline_source is not None:
        baseline_source.record(_test_id(spec.name, mode.name), memory.baseline_figures(record), software)

    s = cell.search
    assert s is None or s.confirmed, (
        f"{spec.name} {mode.name}: largest batch not confirmed: {s.max_batch} fit, but no step at "
        f"{s.max_batch + s.granularity} or below ran out of memory ({s.describe()})")
    if judgement.verdict is Verdict.REGRESSION:
        pytest.fail("memory regression: " + "; ".join(judgement.failures) + f" ({judgement.message})", pytrace=False)
    if baseline_source is not None and not baseline_source.exists and not settings.update_baselines:
        warnings.warn(UserWarning(
            f"no baseline file {baseline_source.path}; {judgement.message}. Record one with "
            f"`pytest perf/ --perf-tier full --perf-update-baselines`"))


def test_oom_recovery(needs_cuda, perf_device, perf_settings):
    """A deliberate out-of-memory training step (4x the batch under a cap that leaves room for about
    1.5x), then the same step as before it: the allocator is back where it was, the step has the same
    peak, and once the trainer is dropped nothing is left allocated for the next test."""
    spec, mode = get_model("mlp"), get_mode("fp32")
    r = memory.demonstrate_oom_recovery(spec, mode, perf_device, smoke=perf_settings.smoke)
    where = f"{spec.name} {mode.name} batch {r.batch}"
    assert r.ran_out, f"{where}: the step at batch {r.oom_batch} fit under the cap; nothing was shown"
    assert r.peak_after == r.peak_before, (
        f"{where}: peak after recovery {r.peak_after} bytes, expected {r.peak_before} as before the OOM")
    assert r.steady_after == r.steady_before, (
        f"{where}: allocated after a step {r.steady_after} bytes after recovery, expected {r.steady_before}")
    # emptied: what the allocator holds beyond live tensors is at most the partly used segments
    slack = r.reserved_after_recovery - r.allocated_after_recovery
    assert slack <= 64 * 2**20, (
        f"{where}: {slack} bytes reserved but unallocated after recovery, expected at most 64 MiB (cache not emptied)")
    assert r.allocated_at_end == r.allocated_at_start, (
        f"{where}: {r.allocated_at_end} bytes allocated after the test, expected {r.allocated_at_start} as before it")
