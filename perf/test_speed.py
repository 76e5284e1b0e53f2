"""Speed: every model in every precision mode, timed in interleaved rounds against fp32 in this
process, and held against this GPU's baseline.

Two speedups per cell: the device-time speedup (the step replayed as a CUDA graph, or the profiler's
kernel sum where it cannot be captured), which gates the cell by default, and the wall-clock speedup of
eager steps, which is what eager training gets on this host and gates only under --perf-gate wall|both.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from ampbench import speed, spread
from ampbench.baselines import measurement_mismatch
from ampbench.device import release
from ampbench.modes import REFERENCE_MODE, get_mode
from ampbench.stats import median
from ampbench.timing import extend_until_tight
from perf.outcome import conclude
from ampbench.verdict import (
    WALL_TOLERANCE_FLOOR,
    HostOverhead,
    SpeedupCheck,
    Verdict,
    kernel_changes,
    tolerance_for,
    learned_spread,
)

GATES = {"device": ("device",), "wall": ("wall",), "both": ("device", "wall")}


class InconclusiveSpeed(UserWarning):
    """A speed verdict whose interval still straddles the regression line after extension."""


@pytest.fixture(scope="session")
def _reference_cache() -> dict:
    return {}


@pytest.fixture
def reference(model_spec, perf_device, perf_settings, _reference_cache, fail_on_oom) -> speed.Side:
    """The fp32 side of this model's cells, built and warmed up once and shared by its modes; only
    the current model's reference is kept, so one model at a time occupies the device."""
    if _reference_cache.get("model") != model_spec.name:
        _reference_cache.clear()
        release(perf_device)
        side = _prepare(model_spec, get_mode(REFERENCE_MODE), perf_device, perf_settings, _policy(perf_device, perf_settings),
                        fail_on_oom, "fp32 reference")
        _reference_cache.update(model=model_spec.name, side=side)
    return _reference_cache["side"]


def _policy(device, settings) -> speed.SpeedPolicy:
    return speed.policy_for(device, settings.min_rounds, settings.tolerance, settings.block_seconds)


def _prepare(model_spec, mode, device, settings, policy: speed.SpeedPolicy, fail_on_oom, label: str) -> speed.Side:
    """A warmed-up side, or this test's failure naming its batch and peak memory if it does not fit."""
    return fail_on_oom(lambda: speed.prepare_side(model_spec, mode, device, settings.smoke, policy),
                       f"{model_spec.name} {label}", model_spec.batch_size_for(settings.smoke))


def _checks(model: str, mode: str, baseline: dict | None, device_method: str, floor: float):
    """(device check, wall check, why there is no device check) against this cell's baseline entry."""
    if baseline is None:
        return None, None, None
    wall = SpeedupCheck(model, mode, float(baseline["speedup"]),
                        tolerance_for(max(floor, WALL_TOLERANCE_FLOOR), baseline.get("noise"), learned_spread(baseline)))
    if baseline.get("device_speedup") is None:
        return None, wall, "no device-time baseline: record with --perf-update-baselines"
    if baseline.get("device_method") != device_method:
        return None, wall, (f"device time measured by {baseline.get('device_method')} in the baseline and by "
                            f"{device_method} here: record with --perf-update-baselines")
    device = SpeedupCheck(model, mode, float(baseline["device_speedup"]),
                          tolerance_for(floor, baseline.get("device_noise"), learned_spread(baseline, "device_")))
    return device, wall, None


def _combined(verdicts: list[Verdict]) -> Verdict:
    for v in (Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.IMPROVED, Verdict.PASS):
        if v in verdicts:
            return v
    return Verdict.NO_BASELINE


# fp32 against fp32 is a control of the harness (its speedup must be 1.0), not a regression check:
# the full tier runs it, the quick tier spends its time on the modes
@pytest.mark.cells(reference_in_full_tier_only=True)
def test_speed(benchmark, request, model_spec, mode, reference, perf_settings, perf_device, baseline_store, software,
               peak_tflops, fail_on_oom):
    settings = perf_settings
    test_id = f"test_speed[{model_spec.name}-{mode.name}]"
    policy = _policy(perf_device, settings)
    batch = model_spec.batch_size_for(settings.smoke)
    side = _prepare(model_spec, mode, perf_device, settings, policy, fail_on_oom, mode.name)
    speed.recapture_reference(reference)
    # identity first, so a cell that fails later is still recognisable in --benchmark-json
    benchmark.extra_info.update(ampbench_schema=1, kind="speed", model=model_spec.name, mode=mode.name,
                                device=str(perf_device), batch_size=batch)
    before = speed.parameters_fingerprint(side.trainer)

    measured_with = {"cudnn_benchmark": settings.cudnn_benchmark, "block_seconds": settings.block_seconds}
    baseline = baseline_store.figures(test_id) if baseline_store is not None else None
    mismatch = measurement_mismatch(baseline, measured_with) if baseline is not None else None
    timing = speed.device_timing(reference, side)
    device_check, wall_check, no_device_baseline = _checks(model_spec.name, mode.name, baseline, timing.method,
                                                           settings.tolerance)
    gate = getattr(settings, "gate", "device")
    gated = GATES[gate]
    if "device" in gated and device_check is None and wall_check is not None:
        gated = ("wall",)  # an entry from before device time: the wall verdict still holds it

    def measure(name: str, check, make_timer):
        extra: list = []

        def again(rounds=policy.rounds):
            extra.append(make_timer())
            return extend_until_tight(extra[-1], rounds)

        first = make_timer()
        outcome = (speed.judge(check, first, policy, again) if name in gated
                   else speed.first_look(check, first, policy))
        return first, extra, again, outcome

    dev_timer, dev_extra, dev_again, dev = measure("device", device_check,
                                                   lambda: timing.timer(reference, side, policy))
    wall_timer, wall_extra, wall_again, wall = measure("wall", wall_check,
                                                       lambda: speed.fresh_timer(reference, side, policy))
    verdict = _combined([dev.verdict if "device" in gated else None, wall.verdict if "wall" in gated else None])
    kernels = side.profile.top() if side.profile else None  # what a baseline entry keeps
    changes = kernel_changes(baseline.get("kernels") if baseline else None, kernels)
    across = speed.across_runs_of(wall.estimate, baseline)
    dev_across = speed.across_runs_of(dev.estimate, baseline, "device_between_run_sd")
    message = f"device time ({timing.method}): {dev.message}; wall: {wall.message}"
    if across:
        message += f"; wall across runs {speed.describe_across(across, baseline)}"
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
    load = speed.host_load(side.profile.busy_ms / 1e3 if side.profile else dev_step_s, step_s)
    ref_load = speed.host_load(reference.profile.busy_ms / 1e3 if reference.profile else dev_ref_step_s, ref_step_s)
    flops = model_spec.flops_per_sample(side.trainer.config)
    tflops = flops * batch / dev_step_s / 1e12
    peak = peak_tflops(mode.peak_dtype)
    ratio = (side.peak_bytes / reference.peak_bytes) if side.peak_bytes and reference.peak_bytes else None
    est, d = wall.estimate, dev.estimate
    benchmark.extra_info.update(
        gate=gate, gated=list(gated), steps_per_block=wall_timer.mode_steps, ref_steps_per_block=wall_timer.ref_steps,
        # the wall-clock speedup of eager steps, as before device time was measured
        speedup=est.speedup, speedup_low=est.low, speedup_high=est.high, rounds=est.rounds, confidence=est.confidence,
        speedup_across_low=across.low if across else None, speedup_across_high=across.high if across else None,
        between_run_sd=across.between_run_sd if across else None,
        between_run_count=baseline.get("between_run_count") if across else None,
        baseline_speedup=wall_check.expected if wall_check else None, tolerance=wall_check.tolerance if wall_check else None,
        line=wall_check.line if wall_check else None, drop=wall_check.drop(est) if wall_check else None,
        confirm_speedup=wall.confirmation.speedup if wall.confirmation else None, wall_verdict=wall.verdict.value,
        # the device-time speedup
        device_method=timing.method, device_fallback=timing.fallback,
        device_speedup=d.speedup, device_speedup_low=d.low, device_speedup_high=d.high, device_rounds=d.rounds,
        device_speedup_across_low=dev_across.low if dev_across else None,
        device_speedup_across_high=dev_across.high if dev_across else None,
        device_baseline_speedup=device_check.expected if device_check else None,
        device_tolerance=device_check.tolerance if device_check else None,
        device_line=device_check.line if device_check else None, device_drop=device_check.drop(d) if device_check else None,
        device_confirm_speedup=dev.confirmation.speedup if dev.confirmation else None, device_verdict=dev.verdict.value,
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
        verdict=verdict.value, message=message, recording=settings.update_baselines,
        weights_moved=moved, final_loss_finite=loss_ok,
        loss_scale=scale, prepare_s=side.prepare_seconds, ref_prepare_s=reference.prepare_seconds, **measured_with,
        # per-step milliseconds of every wall round, in order: what drift or a stray slow block looked like
        round_ms=[t * 1e3 for t in wall_timer.mode_times], ref_round_ms=[t * 1e3 for t in wall_timer.ref_times],
    )
    speed.record_step_times(benchmark, dev_timer.mode_times)
    request.node.user_properties.append(("ampbench_speed", {
        "model": model_spec.name, "mode": mode.name, "device": str(d), "device_verdict": dev.verdict.value,
        "wall": str(est), "wall_verdict": wall.verdict.value, "idle_share": load.idle_share,
        "host_bound": load.host_bound, "method": timing.method}))

    problems = []
    for name, e in (("device-time", d), ("wall-clock", est)):
        if not (math.isfinite(e.speedup) and e.low <= e.speedup <= e.high):
            problems.append(f"malformed {name} speedup estimate {e}")
    if not moved:
        problems.append("no optimizer step changed the weights during the timed run (every step skipped?)")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        problems.append(f"loss scale is {scale} after the timed run; expected finite and positive")

    # only a cell that really trained may become a baseline
    if settings.update_baselines and baseline_store is not None and not problems:
        if not dev_extra:
            dev_again(policy.record_rounds)
        if not wall_extra:
            wall_again(policy.record_rounds)
        # `baseline` is still the entry this recording replaces (record() only queues the new one)
        comparable = speed.comparable_recording(baseline, baseline_store.software(test_id), software, measured_with)
        dev_comparable = comparable and baseline is not None and baseline.get("device_method") == timing.method
        conf = policy.rounds.confidence
        pooled = speed.pooled_estimate(wall_timer, wall_extra[0], conf)
        dev_pooled = speed.pooled_estimate(dev_timer, dev_extra[0], conf)
        device_noise = speed.recorded_noise(d, dev_extra[0].estimate(conf), baseline, dev_comparable, "device_speedup")
        carried = spread.carried(baseline, comparable) | spread.carried_device(baseline, dev_comparable)
        baseline_store.record(test_id, {
            "speedup": pooled.speedup, "ci_low": pooled.low, "ci_high": pooled.high, "rounds": pooled.rounds,
            "noise": speed.recorded_noise(est, wall_extra[0].estimate(conf), baseline, comparable),
            "device_speedup": dev_pooled.speedup, "device_ci_low": dev_pooled.low, "device_ci_high": dev_pooled.high,
            "device_rounds": dev_pooled.rounds, "device_noise": device_noise,
            "device_tolerance": tolerance_for(settings.tolerance, device_noise, learned_spread(carried, "device_")),
            "device_method": timing.method, "device_fallback": timing.fallback,
            "device_step_ms": dev_step_s * 1e3, "device_step_ms_ref": dev_ref_step_s * 1e3,
            "throughput": batch / step_s, "step_ms": step_s * 1e3, "step_ms_ref": ref_step_s * 1e3,
            "idle_share": load.idle_share, "host_bound": load.host_bound,
            "batch_size": batch, "memory_ratio": ratio, "peak_mem_bytes": side.peak_bytes, **measured_with,
            **({"kernels": kernels} if kernels else {}), **carried,
        }, software)

    # freed before any failure is raised: pytest keeps a failed test's frames, and with them its trainer
    side = dev_timer = wall_timer = None
    dev_extra.clear()
    wall_extra.clear()
    release(perf_device)

    if mismatch and not settings.update_baselines:
        warnings.warn(UserWarning(f"{test_id}: {mismatch}"))
    if no_device_baseline and baseline is not None and not settings.update_baselines:
        warnings.warn(UserWarning(f"{test_id}: {no_device_baseline}; the wall verdict holds the cell"))
    if timing.fallback and perf_device.type == "cuda":
        warnings.warn(UserWarning(f"{test_id}: device time from the profiler's kernel sum: {timing.fallback}"))
    conclude(verdict, problems, f"{model_spec.name} {mode.name}", message, strict=settings.strict, kind="speed",
             inconclusive=InconclusiveSpeed)
    if "wall" not in gated and wall.verdict is Verdict.REGRESSION and dev.verdict in (Verdict.PASS, Verdict.IMPROVED):
        warnings.warn(HostOverhead(f"{test_id}: wall-clock speedup below its line while device time held: "
                                   f"{wall.message}; the host that launches the steps is slower or busier"))
    if baseline_store is not None and not baseline_store.exists and not settings.update_baselines:
        warnings.warn(UserWarning(
            f"no baseline file {baseline_store.path}; measured {d} in device time. Record one with "
            f"`pytest perf/ --perf-tier full --perf-update-baselines`"))
