"""Speed: every model in every precision mode, timed in interleaved rounds against fp32 in this
process, and held against this GPU's baseline.

Two speedups per cell: the device-time speedup (the step replayed as a CUDA graph, or the profiler's
kernel sum where it cannot be captured), which gates the cell by default, and the wall-clock speedup of
eager steps, which is what eager training gets on this host and gates only under --perf-gate wall|both.
A compiled cell has a third, in device time beside the first: its ratio over its versus side
(``modes.versus_of``), the same mode eager (its compile gain) or, for fp8, compiled amp_bf16.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from ampbench import progress
from ampbench.baselines.entries import SpeedEntry
from ampbench.device import release
from ampbench.modes import FP32_MODE, compiled, get_mode, label, versus_of
from ampbench.plugin.budget import not_run
from ampbench.results.ratios import DEVICE
from ampbench.speed import cell as speed_cell
from ampbench.speed import jobtime, sides
from ampbench.speed.ahead import CompileAhead
from ampbench.speed.compiled import VersusSides, served
from ampbench.suite.outcome import STEP_TIMES, finish, record_step_times


class InconclusiveSpeed(UserWarning):
    """A speed verdict whose interval still straddles the regression line after extension."""


# The kept sides last as long as the module of speed cells: once its cells are done their models go, so
# the tests after it (the memory cells, the out-of-memory demonstration) find the device as they would
# alone. With gpt's fp32 side still kept, the demonstration's 4x step fit under the cap it must run out
# under, and test_oom_recovery failed when it ran after the speed cells.
@pytest.fixture(scope="module")
def _fp32_cache(perf_device) -> Iterator[dict]:
    cache: dict = {}
    yield cache
    _drop_fp32(cache, perf_device)


def _drop_fp32(cache: dict, device, keep_graphs: bool = False) -> None:
    """Drop the kept fp32 side and, where it was compiled, the compiled graphs (nothing will run them
    again), unless `keep_graphs` (the next cell's side is the same model's); then free the device."""
    _, was_compiled = cache.get("key", (None, False))
    cache.clear()
    if was_compiled and not keep_graphs:
        import torch._dynamo

        torch._dynamo.reset()
    release(device)


@pytest.fixture(scope="module")
def _versus_cache(perf_settings, perf_device) -> Iterator[VersusSides]:
    kept = VersusSides(served(perf_settings.precisions))
    yield kept
    kept.drop()
    release(perf_device)


@pytest.fixture
def versus_sides(_versus_cache, perf_device) -> Iterator[VersusSides]:
    """The kept versus side; after the cell, one that no later cell is timed against is released."""
    yield _versus_cache
    if _versus_cache.settle():
        release(perf_device)


@pytest.fixture
def fp32_side(fits_in_memory, model_spec, mode, perf_device, perf_settings, _fp32_cache, _versus_cache, fail_on_oom,
              compiled_ahead) -> sides.Side:
    """The fp32 side of this model's cells, built and warmed up once and shared by its modes, compiled
    where the cell's mode is (fp8 and the -compiled cells are timed against compiled fp32); only the
    current model's fp32 side (and versus side) is kept, so one model at a time occupies the device. A cell
    whose sides do not fit the memory it is given is skipped first (`fits_in_memory`)."""
    key = (model_spec.name, mode.compile)
    if _fp32_cache.get("key") != key:
        _versus_cache.drop()  # a versus side serves one model's cells of one kind
        last_model, _ = _fp32_cache.get("key", (None, False))
        _drop_fp32(_fp32_cache, perf_device, keep_graphs=last_model == model_spec.name)
    fits_in_memory()  # nothing of another model is held now
    if "side" not in _fp32_cache:
        ref_mode = compiled(get_mode(FP32_MODE), mode.compile)
        side = _prepare(model_spec, ref_mode, perf_device, perf_settings, fail_on_oom, f"{label(ref_mode)} side",
                        compiled_ahead)
        _fp32_cache.update(key=key, side=side)
    return _fp32_cache["side"]


def _prepare(model_spec, mode, device, settings, fail_on_oom, label: str, ahead: CompileAhead | None) -> sides.Side:
    """A warmed-up side, or this test's failure naming its batch and peak memory if it does not fit; a
    compiled side that read its compile from the cache reports the cold compile measured `ahead`."""
    policy = speed_cell.policy(device, settings)
    progress.update(f"preparing {label}" + (": compiling its first step" if mode.compile else ""))
    side = fail_on_oom(lambda: sides.prepare_side(model_spec, mode, device, settings.smoke, policy),
                       f"{model_spec.name} {label}", model_spec.batch_size_for(settings.smoke))
    if ahead is not None and side.cache_read:
        side.compiled_ahead_s = ahead.seconds_of(model_spec.name, mode.name)
    return side


def _out_of_budget(model_spec, mode, fp32_side: sides.Side, settings, device, source, test_id: str) -> str | None:
    """Why the cell is not run under --perf-time-budget: its fewest rounds no longer fit (``speed.jobtime``),
    its mode's step taken from its baseline entry where it holds one, else as long as fp32's."""
    if settings.deadline is None:
        return None
    entry = source.entry(test_id) if source is not None else None
    step_ms = entry.ratio(DEVICE).step_ms if isinstance(entry, SpeedEntry) else None
    mode_s = step_ms / 1e3 if isinstance(step_ms, (int, float)) and step_ms > 0 else fp32_side.step_seconds
    cell = jobtime.CellSteps(f"{model_spec.name} {label(mode)}", fp32_side.step_seconds, mode_s, builds_fp32=False,
                             judged=entry is not None)
    return jobtime.out_of_budget(cell, speed_cell.policy(device, settings), settings.deadline)


# the quick tier spends its time on the 16-bit modes; fp32 against fp32 (a control of the harness, its
# speedup must be 1.0) and TF32 run in the full tier (the rows' full_tier_only)
@pytest.mark.cells(modes_tiered=True)
@pytest.mark.benchmark(group="speed", **STEP_TIMES)
def test_speed(request, benchmark, record_result, model_spec, mode, compiled_cell, fp32_side, versus_sides,
               perf_settings, perf_device, baseline_source, software, peak_tflops, fail_on_oom, compiled_ahead):
    # compiled amp_bf16's own side is kept: the fp8 cells after it are timed against it
    prepare = lambda: versus_sides.offer(  # noqa: E731
        model_spec.name, mode, _prepare(model_spec, mode, perf_device, perf_settings, fail_on_oom, label(mode),
                                        compiled_ahead))
    versus_mode = versus_of(mode)
    versus = None if versus_mode is None else lambda: versus_sides.get(
        model_spec.name, versus_mode,
        lambda: _prepare(model_spec, versus_mode, perf_device, perf_settings, fail_on_oom,
                         f"{label(versus_mode)} versus", compiled_ahead))
    why = _out_of_budget(model_spec, mode, fp32_side, perf_settings, perf_device, baseline_source, request.node.name)
    if why:
        not_run(why, perf_settings.strict)
    # the rounds run eager steps too (the wall-clock figure), beside both sides' graph pools: running out there
    # takes the one out-of-memory outcome, as building a side does
    cell = fail_on_oom(lambda: speed_cell.measure_speed(
        model_spec, mode, fp32_side, prepare, versus=versus,
        settings=perf_settings, device=perf_device, test_id=request.node.name,
        source=baseline_source, software=software, peak_tflops=peak_tflops,
        prepared=lambda identity: record_result(identity, identity=True)),
        f"{model_spec.name} {label(mode)} beside its fp32 side", model_spec.batch_size_for(perf_settings.smoke))
    record_result(cell.record)
    record_step_times(benchmark, cell.device_step_seconds)
    finish(cell.record.verdict, cell.problems, f"{model_spec.name} {label(mode)}", cell.record.message,
           strict=perf_settings.strict, kind="speed", inconclusive=InconclusiveSpeed,
           warn_first=cell.warn_first, warn_after=cell.warn_after)
