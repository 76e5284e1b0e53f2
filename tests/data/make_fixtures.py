"""Synthetic ampbench runs in the shape ``pytest perf/ --benchmark-json`` writes, for the report tests.

`python tests/data/make_fixtures.py` rewrites ``synthetic_h100_quick.json`` (the quick tier, with a
regression and an inconclusive cell so every part of a report shows) and ``synthetic_h100_device.json``
(the quick tier with device time, host load and kernel changes, as test_speed writes them now). The tests call
`full_tier_run()`
for a full-tier-sized run (12 models x 7 modes, speed and memory, plus convergence) when timing a report.
The numbers are plausible for an H100 but invented; ``h100_run.json`` beside this file is a real run.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

HERE = Path(__file__).parent
MODES = ("fp32", "tf32", "amp_fp16", "amp_bf16", "fp16_master", "fp16", "bf16")
# model: (batch, fp32 step ms, flops per sample, speedup per mode after fp32, run-to-run noise)
MODELS = {
    "mlp": (512, 1.3, 3 * 2 * 3 * 4096 * 4096, (2.4, 1.9, 2.0, 3.0, 3.5, 3.5), 0.08),
    "mnist_cnn": (512, 2.1, 2.4e7, (1.5, 1.3, 1.35, 1.9, 2.1, 2.0), 0.05),
    "wide_resnet28_10": (128, 96.0, 3 * 5.25e9, (2.1, 2.9, 3.0, 3.7, 4.0, 3.9), 0.06),
    "resnet18": (256, 88.0, 3 * 1.82e9, (2.0, 3.1, 3.2, 3.8, 4.1, 4.0), 0.01),
    "resnet34": (256, 170.0, 3 * 3.6e9, (2.0, 3.2, 3.3, 3.9, 4.2, 4.1), 0.01),
    "resnet50": (192, 260.0, 3 * 4.1e9, (1.9, 3.3, 3.4, 4.1, 4.4, 4.3), 0.005),
    "resnet101": (128, 300.0, 3 * 7.8e9, (1.9, 3.3, 3.4, 4.1, 4.4, 4.3), 0.005),
    "resnet152": (96, 330.0, 3 * 11.5e9, (1.9, 3.2, 3.3, 4.0, 4.3, 4.2), 0.005),
    "dpn26": (128, 70.0, 3 * 2.0e9, (1.6, 2.2, 2.3, 2.7, 2.9, 2.8), 0.02),
    "dpn92": (128, 210.0, 3 * 6.5e9, (1.7, 2.5, 2.6, 3.1, 3.3, 3.2), 0.02),
    "lstm_lm": (20, 11.5, 3 * 2 * 35 * 4.2e7, (1.4, 1.8, 1.9, 2.1, 2.3, 2.2), 0.005),
    "gpt": (8, 420.0, 6 * 1024 * 1.24e8, (2.7, 4.6, 4.8, 5.4, 5.7, 5.6), 0.015),
}
QUICK = ("mlp", "wide_resnet28_10", "resnet50", "lstm_lm", "gpt")
MEMORY_RATIO = {"fp32": 1.0, "tf32": 1.0, "amp_fp16": 0.72, "amp_bf16": 0.72,
                "fp16_master": 0.66, "fp16": 0.52, "bf16": 0.52}
PEAK_TFLOPS = {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0}
PEAK_DTYPE = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16", "fp16_master": "fp16",
              "fp16": "fp16", "bf16": "bf16"}

MACHINE = {
    "node": "gpu-runner-01", "machine": "x86_64", "system": "Linux", "python_version": "3.11.7",
    "python_implementation": "CPython", "release": "6.8.0-45-generic",
    "cpu": {"brand_raw": "Intel(R) Xeon(R) Platinum 8480+", "count": 16, "arch": "X86_64"},
    "ampbench": {
        "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91300, "device": "NVIDIA H100 80GB HBM3",
        "gpu_slug": "nvidia-h100-80gb-hbm3", "capability": "9.0", "multiprocessors": 132, "memory_gib": 79.19,
        "driver": "580.95.05", "sm_clock_mhz": 1980, "max_sm_clock_mhz": 1980, "mem_clock_mhz": 2619,
        "power_limit_w": 700.0,
    },
}


def _stats(block_s: list[float]) -> dict:
    s = sorted(block_s)
    n = len(s)
    mean = sum(s) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in s) / (n - 1)) if n > 1 else 0.0
    q1, q3 = s[n // 4], s[(3 * n) // 4]
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return {"min": s[0], "max": s[-1], "mean": mean, "stddev": sd, "rounds": n, "median": med, "iqr": q3 - q1,
            "q1": q1, "q3": q3, "iqr_outliers": 0, "stddev_outliers": 1, "outliers": "1;0", "ld15iqr": s[0],
            "hd15iqr": s[-1], "ops": 1 / mean, "total": sum(s), "data": block_s, "iterations": 1}


def _bench(test: str, model: str, mode: str, info: dict, block_s: list[float]) -> dict:
    name = f"{test}[{model}-{mode}]"
    return {
        "group": None, "name": name, "fullname": f"perf/{test}.py::{name}",
        "params": {"model_name": model, "mode_name": mode}, "param": f"{model}-{mode}",
        "extra_info": {"ampbench_schema": 1, **info},
        "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": 5, "max_time": 1.0,
                    "min_time": 5e-06, "warmup": False},
        "stats": _stats(block_s),
    }


def _judge(low: float, high: float, baseline: float, tolerance: float) -> str:
    line = baseline * (1 - tolerance)
    if high < line:
        return "regression"
    if low < line:
        return "inconclusive"
    return "improved" if low > baseline * (1 + tolerance) else "pass"


def speed_cell(rng: random.Random, model: str, mode: str, *, verdict: str | None = None, baseline: float | None = None,
               rounds: int = 12) -> dict:
    batch, ref_ms, flops, speedups, noise = MODELS[model]
    true = 1.0 if mode == "fp32" else speedups[MODES.index(mode) - 1]
    speedup = true * math.exp(rng.gauss(0, noise / 3))
    half = max(noise, 0.002) * rng.uniform(0.6, 1.2)
    low, high = speedup * math.exp(-half), speedup * math.exp(half)
    step_ms_ref = ref_ms * rng.uniform(0.98, 1.02)
    step_ms = step_ms_ref / speedup
    steps = max(1, min(64, math.ceil(50 / step_ms)))
    peak_ref = int((4.0 + 0.06 * step_ms_ref) * 2**30)
    peak = int(peak_ref * MEMORY_RATIO[mode] * rng.uniform(0.97, 1.03))
    tflops = flops * batch / (step_ms / 1e3) / 1e12
    tpeak = PEAK_TFLOPS[PEAK_DTYPE[mode]]
    if baseline is None:
        baseline = true
    tolerance = max(0.03, 2 * noise)
    line = baseline * (1 - tolerance)
    verdict = verdict or _judge(low, high, baseline, tolerance)
    drop = speedup / baseline - 1
    msg = (f"{model} {mode}: speedup over fp32 {speedup:.3f}x [{low:.3f}, {high:.3f}] (99%, {rounds} rounds) against "
           f"baseline {baseline:.3f}x ({drop:+.1%}); regression line {line:.3f}x (tolerance {tolerance:.1%})")
    info = {
        "kind": "speed", "model": model, "mode": mode, "device": "cuda:0", "batch_size": batch,
        "steps_per_block": steps,
        "speedup": speedup, "speedup_low": low, "speedup_high": high, "rounds": rounds, "confidence": 0.99,
        "throughput": batch / (step_ms / 1e3), "throughput_ref": batch / (step_ms_ref / 1e3),
        "step_ms": step_ms, "step_ms_ref": step_ms_ref, "peak_mem_bytes": peak, "peak_mem_ref_bytes": peak_ref,
        "memory_ratio": peak / peak_ref, "tflops": tflops, "tflops_peak": tpeak, "tflops_fraction": tflops / tpeak,
        "baseline_speedup": baseline, "tolerance": tolerance, "line": line, "verdict": verdict, "drop": drop,
        "message": msg, "confirm_speedup": None, "weights_moved": True, "final_loss_finite": True,
    }
    blocks = [steps * step_ms / 1e3 * math.exp(rng.gauss(0, noise / 2)) for _ in range(rounds)]
    return _bench("test_speed", model, mode, info, blocks)


def memory_cell(rng: random.Random, model: str, mode: str) -> dict:
    batch, ref_ms, *_ = MODELS[model]
    ratio = MEMORY_RATIO[mode] * rng.uniform(0.97, 1.03)
    peak = int((4.0 + 0.06 * ref_ms) * 2**30 * ratio)
    max_batch_ratio = 1 / ratio * rng.uniform(0.9, 1.0)
    max_batch = int(batch * 4 * max_batch_ratio)
    info = {
        "kind": "memory", "model": model, "mode": mode, "peak_mem_bytes": peak, "memory_ratio": ratio,
        "max_batch": max_batch, "max_batch_ratio": max_batch_ratio,
        "max_batch_throughput": max_batch / (ref_ms / 1e3) * 2.5,
        "max_batch_throughput_ratio": 2.5 * rng.uniform(0.9, 1.1),
        "verdict": "no baseline", "message": f"{model} {mode}: memory ratio {ratio:.3f}, largest batch {max_batch}",
    }
    return _bench("test_memory", model, mode, info, [0.05 * rng.uniform(0.98, 1.02) for _ in range(3)])


def convergence_cell(rng: random.Random, model: str, mode: str) -> dict:
    accuracy_ref = 0.975
    diverged = mode == "fp16" and model == "wide_resnet28_10"
    accuracy = 0.11 if diverged else accuracy_ref + rng.uniform(-0.006, 0.004)
    curve = [2.3 * math.exp(-i / 12) + 0.05 + rng.uniform(0, 0.02) for i in range(60)]
    if diverged:
        curve = curve[:20] + [2.31] * 40
    info = {
        "kind": "convergence", "model": model, "mode": mode, "accuracy": accuracy, "accuracy_ref": accuracy_ref,
        "loss_curve": curve, "verdict": "regression" if diverged else "pass",
        "message": (f"{model} {mode}: accuracy {accuracy:.3f} against fp32's {accuracy_ref:.3f}"
                    + ("; the loss stopped falling after step 20" if diverged else "")),
    }
    return _bench("test_convergence", model, mode, info, [1.2 * rng.uniform(0.98, 1.02) for _ in range(3)])


def make_run(models: tuple[str, ...], *, seed: int = 0, special: dict | None = None,
             convergence: tuple[str, ...] = ()) -> dict:
    """A whole benchmark JSON. `special` maps test ids to (verdict, baseline) forced onto speed cells."""
    rng = random.Random(seed)
    special = special or {}
    benches = []
    for model in models:
        for mode in MODES:
            tid = f"test_speed[{model}-{mode}]"
            forced = special.get(tid)
            if forced:
                benches.append(speed_cell(rng, model, mode, verdict=forced[0], baseline=forced[1], rounds=24))
            else:
                benches.append(speed_cell(rng, model, mode))
    for model in models:
        for mode in MODES:
            benches.append(memory_cell(rng, model, mode))
    for model in convergence:
        for mode in MODES:
            benches.append(convergence_cell(rng, model, mode))
    return {
        "machine_info": MACHINE,
        "commit_info": {"id": "3f9c2b1e7a4d5c6b8e9f0a1b2c3d4e5f60718293", "time": "2026-05-10T09:12:44+00:00",
                        "author_time": "2026-05-10T09:12:44+00:00", "dirty": False,
                        "project": "ampbench", "branch": "main"},
        "benchmarks": benches,
        "datetime": "2026-05-10T09:41:07.512318+00:00",
        "version": "5.2.3",
    }


# device-time speedup against the wall-clock one per model: the more the eager step waits on the host, the more
DEVICE_GAIN = {"mlp": 1.6, "wide_resnet28_10": 1.1, "resnet50": 1.2, "lstm_lm": 1.35, "gpt": 1.05}
HOST_BOUND = ("mlp", "lstm_lm")
KERNELS = ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_cublas",
           "at::native::vectorized_elementwise_kernel",
           "cudnn::batchnorm_fwtr_nhwc_semiPersist", "at::native::reduce_kernel",
           "at::native::multi_tensor_apply_kernel")
SPIN = "at::cuda::(anonymous namespace)::spin_kernel"


def add_device_time(rng: random.Random, info: dict, *, slowed: bool = False) -> None:
    """The device-time, host-load and kernel figures test_speed writes beside the wall-clock ones, with
    the device time gating the cell; `slowed` adds an extra kernel worth 5% of the mode's step."""
    model, mode = info["model"], info["mode"]
    true = 1.0 if mode == "fp32" else MODELS[model][3][MODES.index(mode) - 1] * DEVICE_GAIN[model]
    speedup = (true if mode == "fp32" else true * math.exp(rng.gauss(0, 0.002))) / (1.05 if slowed else 1.0)
    low, high = speedup * math.exp(-0.003), speedup * math.exp(0.003)
    tolerance = 0.01
    verdict = _judge(low, high, true, tolerance)
    idle = rng.uniform(0.25, 0.55) if model in HOST_BOUND and mode != "fp32" else rng.uniform(0.01, 0.08)
    busy = info["step_ms"] * (1 - idle)
    kernels = [{"name": k, "ms": round(busy * w, 5)} for k, w in zip(KERNELS, (0.45, 0.2, 0.15, 0.1, 0.05))]
    kernels.append({"name": "(rest)", "ms": round(busy * 0.05, 5)})
    if slowed:
        kernels.insert(0, {"name": SPIN, "ms": round(busy * 0.05, 5)})
        changes = f"kernels per step {busy * 0.05:+.3f} ms against the baseline; new: {SPIN} {busy * 0.05:.3f} ms"
    elif mode in ("amp_bf16", "bf16"):
        drift = busy * 0.002
        changes = (f"kernels per step {drift:+.3f} ms against the baseline; changed: {KERNELS[0]} "
                   f"{busy * 0.45 - drift:.3f}->{busy * 0.45:.3f} ms ({drift:+.3f})")
    else:
        changes = None
    method, fallback = (("kernels", "the optimizer's step cannot be captured in a CUDA graph") if model == "gpt"
                        else ("graph", None))
    wall_message = info["message"].split(": ", 1)[1]
    device_message = (f"speedup over fp32 {speedup:.3f}x [{low:.3f}, {high:.3f}] (99%, 16 rounds) against baseline "
                      f"{true:.3f}x ({speedup / true - 1:+.1%}); regression line {true * (1 - tolerance):.3f}x "
                      f"(tolerance {tolerance:.1%})")
    message = f"{model} {mode}: device time ({method}): {device_message}; wall: {wall_message}"
    if changes and verdict in ("regression", "improved"):
        message += f"; {changes}"
    info.update(
        gate="device", gated=["device"], wall_verdict=info["verdict"], verdict=verdict, message=message,
        device_method=method, device_fallback=fallback, device_speedup=speedup, device_speedup_low=low,
        device_speedup_high=high, device_rounds=16, device_baseline_speedup=true, device_tolerance=tolerance,
        device_line=true * (1 - tolerance), device_drop=speedup / true - 1, device_verdict=verdict,
        device_step_ms=busy, device_step_ms_ref=busy * speedup,
        kernels=kernels, kernel_changes=changes, busy_ms=busy, host_overhead_ms=info["step_ms"] * idle,
        idle_share=idle, host_bound=idle > 0.1,
    )


def device_run() -> dict:
    """The quick tier as test_speed writes it since device time gates a cell: resnet50 amp_fp16 carries an
    extra kernel (a device-time regression that names it), gpt's steps are timed by the kernel sum, and
    mlp and lstm_lm wait on the host."""
    document = make_run(QUICK, seed=3, special={"test_speed[gpt-amp_bf16]": ("regression", 5.2)}, convergence=("mlp",))
    rng = random.Random(4)
    for bench in document["benchmarks"]:
        info = bench["extra_info"]
        if info["kind"] == "speed":
            add_device_time(rng, info, slowed=bench["name"] == "test_speed[resnet50-amp_fp16]")
    return document


def quick_run() -> dict:
    return make_run(
        QUICK, seed=1,
        special={"test_speed[wide_resnet28_10-amp_fp16]": ("inconclusive", 3.15),
                 "test_speed[gpt-amp_bf16]": ("regression", 5.2)},
        convergence=("mlp", "wide_resnet28_10"),
    )


def full_tier_run() -> dict:
    return make_run(tuple(MODELS), seed=2, convergence=("mnist_cnn", "wide_resnet28_10", "resnet18"))


if __name__ == "__main__":
    for name, document in (("synthetic_h100_quick.json", quick_run()), ("synthetic_h100_device.json", device_run())):
        (HERE / name).write_text(json.dumps(document, indent=1) + "\n")
        print("wrote", HERE / name)
