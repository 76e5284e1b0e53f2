"""Speed: every model in every precision mode, timed in interleaved rounds against fp32 in this
process, and held against this GPU's baseline."""

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
from ampbench.verdict import SpeedupCheck, Verdict, tolerance_for, trusted_between_run_sd


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


def test_speed(benchmark, model_spec, mode, reference, perf_settings, perf_device, baseline_store, software, peak_tflops,
               fail_on_oom):
    settings = perf_settings
    test_id = f"test_speed[{model_spec.name}-{mode.name}]"
    policy = _policy(perf_device, settings)
    batch = model_spec.batch_size_for(settings.smoke)

    side = _prepare(model_spec, mode, perf_device, settings, policy, fail_on_oom, mode.name)

    # identity first, so a cell that fails later is still recognisable in --benchmark-json
    benchmark.extra_info.update(ampbench_schema=1, kind="speed", model=model_spec.name, mode=mode.name,
                                device=str(perf_device), batch_size=batch)
    before = speed.parameters_fingerprint(side.trainer)
    timer = speed.fresh_timer(reference, side, policy)
    benchmark.pedantic(timer.mode_block, setup=timer.before_mode_block, rounds=policy.rounds.min_rounds,
                       iterations=1, warmup_rounds=0)

    measured_with = {"cudnn_benchmark": settings.cudnn_benchmark, "block_seconds": settings.block_seconds}
    baseline = baseline_store.figures(test_id) if baseline_store is not None else None
    check = None
    mismatch = measurement_mismatch(baseline, measured_with) if baseline is not None else None
    if baseline is not None:
        benchmark.extra_info["baseline_noise"] = baseline.get("noise")
        tol = tolerance_for(settings.tolerance, baseline.get("noise"), trusted_between_run_sd(baseline))
        check = SpeedupCheck(model_spec.name, mode.name, float(baseline["speedup"]), tol)

    second: list = []

    def second_batch(rounds=policy.rounds):
        t = speed.fresh_timer(reference, side, policy)
        second.append(t)
        return speed.extend_until_tight(t, rounds)

    outcome = speed.judge(check, timer, policy, second_batch)
    est = outcome.estimate
    # reported beside the verdict's own interval, not judged (see across_runs_of)
    across = speed.across_runs_of(est, baseline)
    message = outcome.message + (f"; across runs {speed.describe_across(across, baseline)}" if across else "")

    # the mode really trained: its weights moved and its loss scale is still usable. (Whether the
    # loss stays finite on random data is a property of that task, not of the mode: it is recorded
    # here and judged by the convergence tests on real data.)
    last_loss = side.trainer.run(1)
    moved = bool((speed.parameters_fingerprint(side.trainer) != before).any())
    loss_ok = bool(torch.isfinite(last_loss))
    scale = speed.loss_scale(side.trainer)

    step_s, ref_step_s = median(timer.mode_times), median(timer.ref_times)
    flops = model_spec.flops_per_sample(side.trainer.config)
    tflops = flops * batch / step_s / 1e12
    peak = peak_tflops(mode.peak_dtype)
    ratio = (side.peak_bytes / reference.peak_bytes) if side.peak_bytes and reference.peak_bytes else None
    benchmark.extra_info.update(
        ampbench_schema=1, kind="speed", model=model_spec.name, mode=mode.name, device=str(perf_device),
        batch_size=batch, steps_per_block=timer.mode_steps, ref_steps_per_block=timer.ref_steps,
        speedup=est.speedup, speedup_low=est.low, speedup_high=est.high, rounds=est.rounds, confidence=est.confidence,
        speedup_across_low=across.low if across else None, speedup_across_high=across.high if across else None,
        between_run_sd=across.between_run_sd if across else None,
        between_run_count=baseline.get("between_run_count") if across else None,
        throughput=batch / step_s, throughput_ref=batch / ref_step_s, step_ms=step_s * 1e3, step_ms_ref=ref_step_s * 1e3,
        peak_mem_bytes=side.peak_bytes, peak_mem_ref_bytes=reference.peak_bytes, memory_ratio=ratio,
        tflops=tflops, tflops_peak=peak, tflops_fraction=(tflops / peak) if peak else None,
        baseline_speedup=check.expected if check else None, tolerance=check.tolerance if check else None,
        line=check.line if check else None, drop=check.drop(est) if check else None,
        confirm_speedup=outcome.confirmation.speedup if outcome.confirmation else None,
        verdict=outcome.verdict.value, message=message, recording=settings.update_baselines,
        weights_moved=moved, final_loss_finite=loss_ok,
        loss_scale=scale, prepare_s=side.prepare_seconds, ref_prepare_s=reference.prepare_seconds, **measured_with,
        # per-step milliseconds of every round, in order: what drift or a stray slow block looked like
        round_ms=[t * 1e3 for t in timer.mode_times], ref_round_ms=[t * 1e3 for t in timer.ref_times],
    )

    problems = []
    if not (math.isfinite(est.speedup) and est.low <= est.speedup <= est.high):
        problems.append(f"malformed speedup estimate {est}")
    if not moved:
        problems.append("no optimizer step changed the weights during the timed run (every step skipped?)")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        problems.append(f"loss scale is {scale} after the timed run; expected finite and positive")

    # only a cell that really trained may become a baseline
    if settings.update_baselines and baseline_store is not None and not problems:
        if not second:
            second_batch(policy.record_rounds)
        # `baseline` is still the entry this recording replaces (record() only queues the new one)
        comparable = speed.comparable_recording(baseline, baseline_store.software(test_id), software, measured_with)
        second_est = second[0].estimate(policy.rounds.confidence)
        pooled = speed.pooled_estimate(timer, second[0], policy.rounds.confidence)
        baseline_store.record(test_id, {
            "speedup": pooled.speedup, "ci_low": pooled.low, "ci_high": pooled.high, "rounds": pooled.rounds,
            "noise": speed.recorded_noise(est, second_est, baseline, comparable),
            "throughput": batch / step_s, "step_ms": step_s * 1e3, "step_ms_ref": ref_step_s * 1e3,
            "batch_size": batch, "memory_ratio": ratio, "peak_mem_bytes": side.peak_bytes, **measured_with,
            **spread.carried(baseline, comparable),
        }, software)

    # freed before any failure is raised: pytest keeps a failed test's frames, and with them its trainer
    side = timer = None
    second.clear()
    release(perf_device)

    if mismatch and not settings.update_baselines:
        warnings.warn(UserWarning(f"{test_id}: {mismatch}"))
    if problems:
        pytest.fail(f"{model_spec.name} {mode.name}: " + "; ".join(problems), pytrace=False)
    if outcome.verdict is Verdict.REGRESSION:
        pytest.fail(f"speed regression: {message}", pytrace=False)
    if outcome.verdict is Verdict.INCONCLUSIVE:
        if settings.strict:
            pytest.fail(f"inconclusive speed verdict (--perf-strict): {message}", pytrace=False)
        warnings.warn(InconclusiveSpeed(f"inconclusive: {message}"))
    if baseline_store is not None and not baseline_store.exists and not settings.update_baselines:
        warnings.warn(UserWarning(
            f"no baseline file {baseline_store.path}; measured {est}. Record one with "
            f"`pytest perf/ --perf-tier full --perf-update-baselines`"))
