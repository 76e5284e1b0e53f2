"""Bad input on the command line: usage errors that name the flag and list what is valid."""

import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import torch

from ampbench.device import catch_oom

ROOT = Path(__file__).parent.parent


def run_pytest(*args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_speed.py", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--perf-models", "resnet51"], ["--perf-models: unknown model 'resnet51'", "valid models: mlp,", "resnet50"]),
        (["--perf-precisions", "fp8"], ["--perf-precisions: unknown precision mode 'fp8'", "amp_bf16"]),
        (["--perf-tolerance", "2"], ["--perf-tolerance must lie in (0.0, 0.9]"]),
        (["--perf-rounds", "5"], ["--perf-rounds must lie in [8, 1000]"]),
        (["--perf-tier", "huge"], ["--perf-tier", "invalid choice", "quick"]),
        (["--perf-device", "tpu"], ["--perf-device"]),
        (["--loss-scaler", "torch.amp.GradScaler"], ["--loss-scaler expects MODULE:CALLABLE"]),
        (["--perf-block-seconds", "0"], ["--perf-block-seconds must lie in (0.0, 10.0]"]),
        (["--perf-block-seconds", "fast"], ["--perf-block-seconds expects a float"]),
        (["--perf-cudnn-benchmark", "maybe"], ["--perf-cudnn-benchmark", "invalid choice", "'on'"]),
        (["--perf-world-size", "0"], ["--perf-world-size must lie in [1, 1024]"]),
        (["--perf-world-size", "two"], ["--perf-world-size expects a int"]),
    ],
)
def test_usage_errors(args, expected):
    result = run_pytest(*args)
    assert result.returncode == 4, result.stdout + result.stderr
    for part in expected:
        assert part in result.stderr, result.stderr


def test_cells_are_model_major_with_readable_ids():
    result = run_pytest("--perf-models", "mlp,resnet50", "--perf-precisions", "fp32,amp_bf16")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert ids == [
        "test_speed[mlp-fp32]", "test_speed[mlp-amp_bf16]", "test_speed[resnet50-fp32]", "test_speed[resnet50-amp_bf16]",
    ]


def test_quick_tier_is_the_default():
    result = run_pytest("--perf-precisions", "fp32")
    models = [line.split("[")[1].split("-")[0] for line in result.stdout.splitlines() if "::" in line]
    assert models == ["mlp", "wide_resnet28_10", "resnet50", "lstm_lm", "gpt"]


def test_out_of_memory_is_described_and_its_tensors_freed():
    holder = {}

    def cell():
        big = torch.empty(1024)
        holder["ref"] = weakref.ref(big)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB\nmore detail")

    result, oom = catch_oom(cell)
    assert result is None
    assert "Tried to allocate 9.00 GiB" in oom and "more detail" not in oom and "peak memory" in oom
    assert holder["ref"]() is None, "the failed cell's tensors are still referenced after the OOM"
