"""One comm variant's fault stays its own: a variant the build cannot run skips naming what is missing,
and a variant that crashes fails alone, never the siblings that share its torchrun launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from ampbench.distributed import variants
from ampbench.distributed.launch import WORKER_PLUGINS_ENV, run_launch, torchrun_command
from ampbench.distributed.speed_worker import failed_comm, failure_line
from tests import dist_faults

ROOT = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def faulty_env(faults: str) -> dict[str, str]:
    return {**os.environ, WORKER_PLUGINS_ENV: "tests.dist_faults", dist_faults.ENV: faults}


def test_a_variant_the_build_cannot_run_is_recorded_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.setenv(WORKER_PLUGINS_ENV, "tests.dist_faults")
    monkeypatch.setenv(dist_faults.ENV, "bf16_hook:unsupported")
    args = ["--model", "mlp", "--mode", "amp_bf16", "--comm", "bf16_hook,fp16_hook", "--out", str(tmp_path),
            "--device", "cpu", "--no-single", "--rounds", "8"]
    result = run_launch(torchrun_command("ampbench.distributed.speed_worker", args, 2), timeout=120.0, cwd=ROOT)
    # (the documents, not the exit status: gloo's teardown has rarely aborted a rank after its last write)
    docs = [tmp_path / comm / f"rank{rank}.json" for comm in ("bf16_hook", "fp16_hook") for rank in (0, 1)]
    assert all(p.exists() for p in docs), result.explain(2)
    for rank in (0, 1):
        refused = json.loads((tmp_path / "bf16_hook" / f"rank{rank}.json").read_text())
        assert refused["unsupported"] == "injected: this build lacks what bf16_hook needs", refused
        ran = json.loads((tmp_path / "fp16_hook" / f"rank{rank}.json").read_text())
        assert "unsupported" not in ran and ran["weights_moved"], ran


def test_the_failed_variant_is_read_from_the_ranks_output():
    line = failure_line(1, "mlp", "amp_bf16", "bf16_hook", RuntimeError("boom"))
    assert failed_comm(f"[default0]:fine\n[default1]:{line}\n") == "bf16_hook"
    assert failed_comm("[default0]:Watchdog caught collective operation timeout") is None


@pytest.fixture(scope="module")
def crashing_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """The DDP cells of mlp amp_bf16 on CPU ranks, bf16_hook crashing and fp16_hook unsupported: the run,
    and the folder of its run JSON (out.json) and history (h.sqlite)."""
    folder = tmp_path_factory.mktemp("crashing")
    cmd = [sys.executable, "-m", "pytest", "perf/test_distributed.py", "-k", "ddp", "-p", "no:cacheprovider",
           "-q", "-rfs", "--perf-device", "cpu", "--perf-models", "mlp", "--perf-precisions", "amp_bf16",
           "--perf-history", str(folder / "h.sqlite"), "--benchmark-json", str(folder / "out.json")]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env=faulty_env("bf16_hook:crash,fp16_hook:unsupported"))
    return run, folder


def test_a_crashing_variant_fails_alone_and_an_unsupported_one_skips(crashing_run):
    """bf16_hook crashes in the launch its siblings share: it fails with its own error, and fp16_hook,
    which that launch never reached, gets a launch of its own, where it is unsupported: it skips, with
    the reason. (fp32 runs first and is the others' reference: no fault there.)"""
    run, _ = crashing_run
    out = run.stdout + run.stderr
    assert run.returncode == 1, out[-4000:]
    assert "1 failed, 1 passed, 1 skipped" in out, out[-4000:]
    failed = [ln for ln in out.splitlines() if ln.startswith("FAILED ")]
    assert len(failed) == 1 and "test_ddp_speed[mlp-amp_bf16-bf16_hook]" in failed[0], failed
    assert "InjectedCrash: injected crash in bf16_hook" in out, out[-4000:]
    skipped = [ln for ln in out.splitlines() if ln.startswith("SKIPPED ")]
    assert len(skipped) == 1 and "mlp amp_bf16 fp16_hook (x2): injected: this build lacks what fp16_hook needs" \
        in skipped[0], skipped


def test_a_crashed_variant_is_an_error_in_the_json_and_the_history(crashing_run):
    """A cell that fails through its launch (no result from every rank) is a failing cell wherever the
    run is read, as a single-GPU cell that stops with an error is (``ampbench.plugin.entries``)."""
    run, folder = crashing_run
    document = json.loads((folder / "out.json").read_text())
    # its entry where the cell kept one before the launch failed (beside the benchmarks), else an error's own
    errors = {e["name"]: e["extra_info"] for key in ("ampbench_errors", "ampbench_untimed")
              for e in document.get(key, []) if e["extra_info"].get("verdict") == "error"}
    crashed = errors.get("test_ddp_speed[mlp-amp_bf16-bf16_hook]")
    assert crashed is not None, (list(errors), run.stdout[-3000:])
    assert (crashed["kind"], crashed["verdict"], crashed["comm"]) == ("distributed", "error", "bf16_hook"), crashed
    assert crashed["message"].startswith("the test failed: Failed: mlp amp_bf16 bf16_hook (x2): no result from every "
                                         "rank")
    stored = {b["name"]: b["extra_info"]["verdict"] for b in document["benchmarks"]}
    assert stored == {"test_ddp_speed[mlp-amp_bf16-fp32]": "no baseline"}  # the CPU ranks' cell that ran
    import sqlite3

    with sqlite3.connect(folder / "h.sqlite") as db:
        verdicts = dict(db.execute("SELECT test_id, verdict FROM cells"))
    assert verdicts["test_ddp_speed[mlp-amp_bf16-bf16_hook]"] == "error", verdicts


def _one_rank_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return dist


def test_fsdp2_gathering_batch_norm_in_bf16_trains_or_says_what_the_device_lacks():
    """FSDP2's param_dtype gathers a BatchNorm layer's weights in bf16 while its running statistics stay
    fp32. Where this device's batch norm has no kernel for that, the wrap refuses, naming it; where it
    has one, the wrapped model trains. A model without batch norm is never refused."""
    dist = _one_rank_group()
    try:
        bf16 = variants.get_comm("fsdp2_bf16_reduce")
        convnet = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sequential(nn.BatchNorm2d(4), nn.ReLU()))
        try:
            wrapped = variants.STRATEGIES["fsdp2"].wrap(convnet, bf16, CPU)
        except variants.VariantUnsupported as exc:
            assert "cpu's batch norm" in str(exc) and "bfloat16 weights beside fp32 running statistics" in str(exc)
        else:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                wrapped(torch.randn(2, 3, 8, 8)).float().sum().backward()
        mlp = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)))
        wrapped = variants.STRATEGIES["fsdp2"].wrap(mlp, bf16, CPU)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            wrapped(torch.randn(2, 4)).float().sum().backward()
        assert all(p.grad is not None for p in wrapped.parameters())
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("works", [True, False])
def test_the_batch_norm_probe_answers_what_the_kernel_does(works, monkeypatch):
    """The probe's answer is the kernel's own: its error where batch_norm raises, None where it runs."""
    if not works:
        def refuse(*args, **kwargs):
            raise RuntimeError("expected scalar type BFloat16 but found Float")

        monkeypatch.setattr(nn.functional, "batch_norm", refuse)
        assert variants._batch_norm_refusal(CPU, torch.bfloat16) == "expected scalar type BFloat16 but found Float"
    else:
        assert variants._batch_norm_refusal(CPU, torch.float32) is None
