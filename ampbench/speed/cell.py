"""One speed cell from its prepared sides to its record: time the device-time and the wall-clock speedup
in interleaved rounds (and a compiled cell's second ratio, ``ampbench.speed.compiled``), judge each against
this GPU's baseline entry, check the mode really trained, record a new baseline entry when asked, and
say what the test must warn about or fail on.

``measure_speed`` returns a ``SpeedCell``; ``perf/test_speed.py`` only wires fixtures into it, writes the
record and ends the test by it (``perf/outcome.finish``). Nothing here imports pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from ampbench import progress

from ampbench.speed import sides as speed

from ampbench.baselines import spread
from ampbench.baselines.store import BaselineStore, measurement_mismatch
from ampbench.speed.compiled import DynamoState, compile_problems, compile_time_check, measure_versus
from ampbench.device import release
from ampbench.speed.devicetime import IDLE_WARN_SHARE
from ampbench.speed.hostload import host_load
from ampbench.modes import PrecisionMode, label, versus_of
from ampbench.results import SpeedRecord
from ampbench.settings import GATES, PerfSettings
from ampbench.stats import median
from ampbench.verdict import (
    WALL_TOLERANCE_FLOOR,
    HostOverhead,
    SpeedupCheck,
    Verdict,
    kernel_changes,
    learned_spread,
    recorded_check,
    tolerance_for,
)
from models.spec import ModelSpec


@dataclass
class SpeedCell:
    """What a speed cell concluded, and what its test must do about it."""

    record: SpeedRecord
    device_step_seconds: list[float]  # the mode's device time per step, one per round: pytest-benchmark's figures
    problems: list[str] = field(default_factory=list)  # the mode did not really train: the test fails
    warn_first: list[Warning] = field(default_factory=list)  # before the verdict is concluded
    warn_after: list[Warning] = field(default_factory=list)  # once it passed or only warned


def policy(device: torch.device, settings: PerfSettings) -> speed.SpeedPolicy:
    return speed.policy_for(device, settings.min_rounds, settings.tolerance, settings.block_seconds,
                            recording=settings.update_baselines)


def _checks(model: str, mode: str, baseline: dict | None, device_method: str, floor: float):
    """(device check, wall check, why there is no device check) against this cell's baseline entry."""
    if baseline is None:
        return None, None, None
    wall = SpeedupCheck(model, mode, float(baseline["speedup"]),
                        tolerance_for(max(floor, WALL_TOLERANCE_FLOOR), baseline.get("noise"), learned_spread(baseline)))
    device, why = recorded_check(model, mode, baseline, "device_", device_method, floor,
                                 "no device-time baseline: record with --perf-update-baselines")
    if device is None and baseline.get("device_speedup") is not None:
        why = f"device time {why}"  # the entry has the figure, measured another way
    return device, wall, why or None


def _combined(verdicts: list[Verdict | None]) -> Verdict:
    for v in (Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.IMPROVED, Verdict.PASS):
        if v in verdicts:
            return v
    return Verdict.NO_BASELINE


def _named_failures(verdict: Verdict, figures: list[tuple[str, Verdict | None, bool]]) -> str:
    """Which gated ratios brought a failing or inconclusive verdict: 'compile gain over amp_bf16
    regression', so a cell's message says which of its ratios to look at first."""
    if verdict not in (Verdict.REGRESSION, Verdict.INCONCLUSIVE):
        return ""
    names = [name for name, v, gated in figures if gated and v is verdict]
    return f"{' and '.join(names)} {verdict}" if names else ""


def identity(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool) -> SpeedRecord:
    """Who the cell is, written before it measures: a cell that fails later is still recognisable."""
    return SpeedRecord(model=spec.name, mode=label(mode), device=str(device), batch_size=spec.batch_size_for(smoke))


def measure_speed(spec: ModelSpec, mode: PrecisionMode, reference: speed.Side, prepare: Callable[[], speed.Side], *,
                  settings: PerfSettings, device: torch.device, test_id: str, store: BaselineStore | None,
                  software: dict, peak_tflops: Callable[[str], float | None],
                  prepared: Callable[[SpeedRecord], None],
                  versus: Callable[[], speed.Side] | None = None) -> SpeedCell:
    """Prepare the cell's versus side (`versus`, for a compiled cell: ``modes.versus_of``) and the mode's
    side (`prepare`), tell `prepared` the cell's identity, then time, judge and (under
    --perf-update-baselines) record the cell against `reference`, fp32's side, and, where compiled,
    against its versus side. Every tensor of the cell is released before it returns, but for sides the
    callables keep elsewhere: a failing test keeps its frames, and with them whatever they hold."""
    pol = policy(device, settings)
    batch = spec.batch_size_for(settings.smoke)
    if (versus is None) != (versus_of(mode) is None):
        raise ValueError(f"{spec.name} {label(mode)}: a versus side is needed exactly where the cell is compiled")
    # the versus side first: its own compilation (compiled amp_bf16 for an fp8 cell) is no part of this
    # cell's compile time, graph breaks or recompiles
    versus_side = versus() if versus is not None else None
    dynamo_before = DynamoState.now() if mode.compile else None
    side = prepare()
    dynamo_prepared = DynamoState.now() if mode.compile else None
    compile_s = side.first_step_seconds if mode.compile else None
    speed.recapture_reference(reference)
    if versus_side is not None:
        speed.recapture_reference(versus_side)
    prepared(identity(spec, mode, device, settings.smoke))
    before = speed.parameters_fingerprint(side.trainer)

    measured_with = {"cudnn_benchmark": settings.cudnn_benchmark, "block_seconds": settings.block_seconds}
    baseline = store.figures(test_id) if store is not None else None
    mismatch = measurement_mismatch(baseline, measured_with) if baseline is not None else None
    timing = speed.device_timing(reference, side)
    device_check, wall_check, no_device_baseline = _checks(spec.name, label(mode), baseline, timing.method,
                                                           settings.tolerance)
    gate = settings.gate
    gated = GATES[gate]
    if "device" in gated and device_check is None and wall_check is not None:
        gated = ("wall",)  # an entry from before device time: the wall verdict still holds it

    with progress.scope("device time"):
        dev_fig = speed.time_figure(device_check, lambda: timing.timer(reference, side, pol), pol, "device" in gated)
    with progress.scope("wall clock"):
        wall_fig = speed.time_figure(wall_check, lambda: speed.fresh_timer(reference, side, pol), pol, "wall" in gated)
    dev, wall = dev_fig.outcome, wall_fig.outcome
    dev_timer, wall_timer = dev_fig.first, wall_fig.first
    # the second ratio is a device-time figure: it holds the cell wherever device time does
    with progress.scope("over its versus side"):
        vs = (measure_versus(spec.name, mode, versus_side, side, baseline, settings.tolerance, pol, "device" in gated)
              if versus_side is not None else None)
    verdict = _combined([dev.verdict if "device" in gated else None, wall.verdict if "wall" in gated else None,
                         vs.verdict if vs is not None and vs.gated else None])
    kernels = side.profile.top() if side.profile else None  # what a baseline entry keeps
    changes = kernel_changes(baseline.get("kernels") if baseline else None, kernels)
    across = speed.across_runs_of(wall.estimate, baseline)
    dev_across = speed.across_runs_of(dev.estimate, baseline, "device_between_run_sd")
    message = f"device time ({timing.method}): {dev.message}; wall: {wall.message}"
    if vs is not None:
        message += f"; {vs.message}"
    if across:
        message += f"; wall across runs {speed.describe_across(across, baseline)}"
    failing = _named_failures(verdict, [("device-time speedup over fp32", dev.verdict, "device" in gated),
                                        ("wall-clock speedup over fp32", wall.verdict, "wall" in gated),
                                        (vs.figure if vs else "", vs.verdict if vs else None, bool(vs and vs.gated))])
    if failing:
        message = f"{failing}: {message}"
    if changes and dev.verdict in (Verdict.REGRESSION, Verdict.IMPROVED):
        message += f"; {changes}"

    # the mode really trained: its weights moved and its loss scale is still usable. (Whether the
    # loss stays finite on random data is a property of that task, not of the mode: it is recorded
    # here and judged by the convergence tests on real data.)
    last_loss = side.trainer.run(1)
    moved = bool((speed.parameters_fingerprint(side.trainer) != before).any())
    loss_ok = bool(torch.isfinite(last_loss))
    scale = speed.loss_scale(side.trainer)

    step_s, ref_step_s = median(wall_timer.mode_times), median(wall_timer.ref_times)
    dev_step_s, dev_ref_step_s = median(dev_timer.mode_times), median(dev_timer.ref_times)
    load = host_load(side.profile.busy_ms / 1e3 if side.profile else dev_step_s, step_s)
    ref_load = host_load(reference.profile.busy_ms / 1e3 if reference.profile else dev_ref_step_s, ref_step_s)
    tflops = spec.flops_per_sample(side.trainer.config) * batch / dev_step_s / 1e12
    peak = peak_tflops(mode.peak_dtype)
    ratio = (side.peak_bytes / reference.peak_bytes) if side.peak_bytes and reference.peak_bytes else None
    est, d = wall.estimate, dev.estimate
    record = SpeedRecord(
        model=spec.name, mode=label(mode), device=str(device), batch_size=batch,
        gate=gate, gated=list(gated), steps_per_block=wall_timer.mode_steps, ref_steps_per_block=wall_timer.ref_steps,
        # the wall-clock speedup of eager steps, as before device time was measured
        **wall.fields("", wall_check, "wall_verdict"),
        speedup_across_low=across.low if across else None, speedup_across_high=across.high if across else None,
        between_run_sd=across.between_run_sd if across else None,
        between_run_count=baseline.get("between_run_count") if across else None,
        # the device-time speedup
        device_method=timing.method, device_fallback=timing.fallback, **dev.fields("device_", device_check),
        **queue_fields(timing, side, reference),
        device_speedup_across_low=dev_across.low if dev_across else None,
        device_speedup_across_high=dev_across.high if dev_across else None,
        device_step_ms=dev_step_s * 1e3, device_step_ms_ref=dev_ref_step_s * 1e3,
        device_round_ms=[t * 1e3 for t in dev_timer.mode_times], device_ref_round_ms=[t * 1e3 for t in dev_timer.ref_times],
        kernel_ms=side.profile.kernel_ms if side.profile else None,
        kernel_ms_ref=reference.profile.kernel_ms if reference.profile else None,
        kernel_speedup=(reference.profile.kernel_ms / side.profile.kernel_ms) if side.profile and reference.profile else None,
        kernels=kernels, kernel_changes=changes,
        # how far the eager step waits on the host
        busy_ms=load.busy_ms, host_overhead_ms=load.overhead_ms, idle_share=load.idle_share, host_bound=load.host_bound,
        busy_ms_ref=ref_load.busy_ms, host_overhead_ms_ref=ref_load.overhead_ms, idle_share_ref=ref_load.idle_share,
        host_bound_ref=ref_load.host_bound,
        throughput=batch / step_s, throughput_ref=batch / ref_step_s, step_ms=step_s * 1e3, step_ms_ref=ref_step_s * 1e3,
        device_throughput=batch / dev_step_s,
        peak_mem_bytes=side.peak_bytes, peak_mem_ref_bytes=reference.peak_bytes, memory_ratio=ratio,
        tflops=tflops, tflops_peak=peak, tflops_fraction=(tflops / peak) if peak else None,
        verdict=verdict, message=message, recording=settings.update_baselines,
        weights_moved=moved, final_loss_finite=loss_ok,
        loss_scale=scale, prepare_s=side.prepare_seconds, ref_prepare_s=reference.prepare_seconds,
        compile_s=compile_s, ref_compile_s=reference.first_step_seconds if mode.compile else None,
        baseline_compile_s=baseline.get("compile_s") if baseline else None, **measured_with,
        **(vs.record_fields() if vs is not None else {}),
        # per-step milliseconds of every wall round, in order: what drift or a stray slow block looked like
        round_ms=[t * 1e3 for t in wall_timer.mode_times], ref_round_ms=[t * 1e3 for t in wall_timer.ref_times],
    )
    cell = SpeedCell(record, list(dev_timer.mode_times))
    queued_badly = queue_problems(timing, side, reference)
    cell.problems += compile_problems(mode, dynamo_before, dynamo_prepared, DynamoState.now() if mode.compile else None)
    slow_compile = compile_time_check(spec.name, label(mode), baseline, compile_s)
    if slow_compile:
        cell.problems.append(slow_compile)

    for name, e in (("device-time", d), ("wall-clock", est), *([(vs.figure, vs.timed.outcome.estimate)] if vs else [])):
        if not (math.isfinite(e.speedup) and e.low <= e.speedup <= e.high):
            cell.problems.append(f"malformed {name} speedup estimate {e}")
    if not moved:
        cell.problems.append("no optimizer step changed the weights during the timed run (every step skipped?)")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        cell.problems.append(f"loss scale is {scale} after the timed run; expected finite and positive")

    # only a cell that really trained may become a baseline
    if settings.update_baselines and store is not None and not cell.problems:
        # `baseline` is still the entry this recording replaces (record() only queues the new one)
        comparable = speed.comparable_recording(baseline, store.software(test_id), software, measured_with)
        dev_comparable = comparable and baseline is not None and baseline.get("device_method") == timing.method
        dev_pooled, device_noise = dev_fig.recording(pol, baseline, dev_comparable, "device_speedup")
        pooled, noise = wall_fig.recording(pol, baseline, comparable, "speedup")
        # the spread is kept on other software too; only the level is this recording's
        carried = spread.kept_on_rerecording(baseline, measured_with, timing.method, settings.tolerance, device_noise)
        store.record(test_id, {
            **speed.recorded_figures("", pooled, noise), **speed.recorded_figures("device_", dev_pooled, device_noise),
            "device_method": timing.method, "device_fallback": timing.fallback,
            "device_step_ms": dev_step_s * 1e3, "device_step_ms_ref": dev_ref_step_s * 1e3,
            "throughput": batch / step_s, "step_ms": step_s * 1e3, "step_ms_ref": ref_step_s * 1e3,
            "idle_share": load.idle_share, "host_bound": load.host_bound,
            "batch_size": batch, "memory_ratio": ratio, "peak_mem_bytes": side.peak_bytes, **measured_with,
            **({"kernels": kernels} if kernels else {}), **({"compile_s": compile_s} if compile_s else {}), **carried,
            **(vs.baseline_figures(baseline, comparable, measured_with, pol, settings.tolerance) if vs is not None else {}),
        }, software)

    # freed before the test can fail: pytest keeps a failed test's frames, and with them its trainer
    side = versus_side = dev_timer = wall_timer = None
    for fig in (dev_fig, wall_fig, vs.timed if vs is not None else None):
        if fig is not None:
            fig.release()
    release(device)

    if mismatch and not settings.update_baselines:
        cell.warn_first.append(UserWarning(f"{test_id}: {mismatch}"))
    if no_device_baseline and baseline is not None and not settings.update_baselines:
        cell.warn_first.append(UserWarning(f"{test_id}: {no_device_baseline}; the wall verdict holds the cell"))
    for problem in queued_badly:
        cell.warn_after.append(UserWarning(f"{test_id}: {problem}"))
    if timing.fallback and device.type == "cuda":
        cell.warn_first.append(UserWarning(f"{test_id}: device time from the profiler's kernel sum: {timing.fallback}"))
    if vs is not None and vs.timing.fallback and device.type == "cuda":
        cell.warn_first.append(UserWarning(f"{test_id}: {vs.figure} from the profiler's kernel sum: {vs.timing.fallback}"))
    if vs is not None and vs.check is None and baseline is not None and not settings.update_baselines:
        cell.warn_first.append(UserWarning(f"{test_id}: {vs.figure}: {vs.why_unchecked}"))
    if "wall" not in gated and wall.verdict is Verdict.REGRESSION and dev.verdict in (Verdict.PASS, Verdict.IMPROVED):
        cell.warn_after.append(HostOverhead(f"{test_id}: wall-clock speedup below its line while device time held: "
                                            f"{wall.message}; the host that launches the steps is slower or busier"))
    if store is not None and not store.exists and not settings.update_baselines:
        cell.warn_after.append(UserWarning(
            f"no baseline file {store.path}; measured {d} in device time. Record one with "
            f"`pytest perf/ --perf-tier full --perf-update-baselines`"))
    return cell


def queue_fields(timing: speed.DeviceTiming, side: speed.Side, reference: speed.Side) -> dict:
    """How the cell's device blocks were queued (``ampbench.speed.held``) and how long the GPU sat idle inside
    a profiled held block of each side: the record's check that no host entered the device time."""
    if timing.queue is None:
        return {}
    q = timing.queue.stats
    return dict(device_queue=q.describe(), device_blocks=q.blocks, device_held_blocks=q.held,
                device_retried_blocks=q.retried, device_per_replay_blocks=q.per_replay, device_hold_ms=q.hold_s * 1e3,
                device_block_idle_share=side.idle.share if side.idle else None,
                device_block_idle_share_ref=reference.idle.share if reference.idle else None,
                device_block_longest_gap_us=side.idle.longest_gap_us if side.idle else None)


def queue_problems(timing: speed.DeviceTiming, side: speed.Side, reference: speed.Side) -> list[str]:
    """What a warning should say of the queueing: blocks timed by events around each replay, or a
    profiled held block in which the GPU idled over IDLE_WARN_SHARE of the time."""
    problems = []
    if timing.queue is not None and timing.queue.stats.per_replay:
        problems.append(f"device time: {timing.queue.stats.describe()}")
    for name, s in (("the mode", side), ("fp32", reference)):
        if s.graph is not None and s.idle is None:
            problems.append(f"device time: the profiler saw no kernel of a held block of {name}: its idle time is unchecked")
        elif s.idle is not None and s.idle.share > IDLE_WARN_SHARE:
            problems.append(f"device time: the GPU sat idle {s.idle.share:.2%} of a profiled held block of {name} "
                            f"({s.idle.idle_ms:.3f} of {s.idle.span_ms:.1f} ms; queued whole: {s.idle.queued})")
    return problems
