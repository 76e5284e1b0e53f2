"""The distributed harness's pure parts: the comm-variant table, FSDP2's units, NCCL figures from a
trace, merging rank documents, world size and baseline slug, and a launch that cannot outlive its limit."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest
import torch

from ampbench import models
from ampbench.device import cluster_slug
from ampbench.distributed.figures import host_bound_verdict, merge_ranks
from ampbench.distributed.launch import (
    WORKER_PLUGINS_ENV,
    LaunchResult,
    load_worker_plugins,
    run_launch,
    torchrun_command,
)
from ampbench.distributed.processes import alive
from ampbench.distributed.variants import (
    COMM_VARIANTS,
    Kernel,
    comm_figures,
    default_cells,
    fsdp2_units,
    kernels_from_trace,
    resolve_world_size,
    variants_for,
    world_size_skip_reason,
)
from ampbench.modes import MODES
from ampbench.plugin import slowdown
from ampbench.stats import estimate_speedup
from ampbench.verdict import Verdict

CPU, CUDA = torch.device("cpu"), torch.device("cuda", 0)


def test_variants_apply_by_fields():
    names = {m: [v.name for v in variants_for(MODES[m])] for m in MODES}
    assert names["amp_bf16"] == ["fp32", "bf16_hook", "fp16_hook", "fsdp2_fp32",
                                 "fsdp2_fp32_reduce", "fsdp2_bf16_reduce"]
    assert names["amp_fp16"] == ["fp32", "bf16_hook", "fp16_hook", "fsdp2_fp32"]
    for low in ("fp16_master", "fp16", "bf16"):  # low-precision parameters: only DDP in their own dtype
        assert names[low] == ["fp32"], low
    for v in COMM_VARIANTS.values():  # an fp32 side is fp32 reduction under the same parallelism
        ref = COMM_VARIANTS[v.fp32_comm]
        assert ref.strategy == v.strategy and ref.ddp_hook is None and ref.param_dtype is None
        assert ref.applies_to(MODES["fp32"])


def test_fsdp2_units_are_blocks_then_root():
    for name, blocks in (("gpt", 2), ("resnet50", 16), ("mlp", 3)):
        spec = models.get_model(name)
        model = spec.build(spec.smoke_config)
        units = fsdp2_units(model)
        assert units[-1] is model and len(units) == blocks + 1, name
    gpt = models.get_model("gpt")
    model = gpt.build(gpt.smoke_config)
    assert all(model.wte not in list(u.modules()) for u in fsdp2_units(model)[:-1])  # tied weights stay in the root


def test_comm_figures_share_and_overlap():
    kernels = [
        Kernel("sm90_gemm", 7, 0.0, 60.0),
        Kernel("ncclDevKernel_AllReduce_Sum_f32", 20, 40.0, 80.0),  # 20 of its 40 us under the gemm
        Kernel("elementwise", 7, 90.0, 100.0),
        Kernel("ncclDevKernel_AllReduce_Sum_f32", 20, 85.0, 95.0),  # 5 of 10 under the elementwise
        Kernel("fill_on_comm_stream", 20, 0.0, 10.0),  # the NCCL stream's own compute: no overlap
    ]
    figs = comm_figures(kernels)
    assert figs["comm_share"] == pytest.approx(50.0 / 100.0)
    assert figs["comm_overlap"] == pytest.approx(25.0 / 50.0)
    assert figs["idle_share"] == pytest.approx(5.0 / 100.0)  # nothing ran in [80, 85]
    assert comm_figures([Kernel("gemm", 7, 0, 1)]) == {"comm_share": 0.0, "comm_overlap": None, "comm_us": 0.0,
                                                       "idle_share": 0.0}
    assert comm_figures([])["comm_share"] is None and comm_figures([])["idle_share"] is None


def test_idle_share_is_time_no_kernel_ran_nccl_counting_as_busy():
    """A host that launches slower than the GPU runs leaves gaps between kernels; a rank's NCCL kernel
    waiting for the other rank keeps the GPU busy, so only this rank's own host shows as idle."""
    kernels = [
        Kernel("sm90_gemm", 7, 0.0, 20.0),
        Kernel("elementwise", 7, 30.0, 40.0),  # a 10 us gap: the host was late
        Kernel("ncclDevKernel_AllReduce_Sum_bf16", 20, 40.0, 70.0),  # waits for the peer: busy
        Kernel("elementwise", 7, 80.0, 100.0),  # another 10 us gap
    ]
    assert comm_figures(kernels)["idle_share"] == pytest.approx(20.0 / 100.0)


def test_comm_figures_count_concurrent_nccl_kernels_once():
    """FSDP2's all-gather and reduce-scatter kernels run at once on two streams: their time is counted once."""
    kernels = [
        Kernel("ncclDevKernel_AllGather_RING_LL", 20, 0.0, 40.0),
        Kernel("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", 21, 20.0, 60.0),
        Kernel("sm90_gemm", 7, 0.0, 30.0),
        Kernel("elementwise", 7, 50.0, 100.0),
    ]
    figs = comm_figures(kernels)
    assert figs["comm_share"] == pytest.approx(60.0 / 100.0) and figs["comm_us"] == pytest.approx(60.0)
    assert figs["comm_overlap"] == pytest.approx(40.0 / 60.0)  # [0, 30] and [50, 60] under compute


def test_kernels_from_chrome_trace():
    trace = {"traceEvents": [
        {"cat": "kernel", "name": "ncclKernel", "ts": 10.0, "dur": 5.0, "tid": 3, "args": {"stream": 13}},
        {"cat": "cpu_op", "name": "aten::mm", "ts": 0.0, "dur": 50.0},
        {"cat": "kernel", "name": "gemm", "ts": 0.0, "dur": 20.0, "tid": 7},
    ]}
    assert kernels_from_trace(trace) == [Kernel("ncclKernel", 13, 10.0, 15.0), Kernel("gemm", 7, 0.0, 20.0)]


def test_profiled_trace_leaves_out_its_warm_up_step():
    """The NCCL figures come from the steps after an unprofiled and a warm-up step under the profiler,
    whose start takes each rank a different time (shown with CPU events: GPU kernels go the same way)."""
    from torch.profiler import ProfilerActivity

    from ampbench.distributed.speed_worker import profiled_trace
    from ampbench.modes import MODES
    from ampbench.train import Trainer

    trainer = Trainer(models.get_model("mlp"), MODES["fp32"], CPU, smoke=True)
    trace = profiled_trace(trainer, 2, [ProfilerActivity.CPU])
    steps = [e for e in trace["traceEvents"] if str(e.get("name", "")).startswith("Optimizer.step#")]
    assert len(steps) == 2 and trainer.steps_taken == 4


def _doc(rank, ref, mode, single=None):
    return {"rank": rank, "world_size": 2, "batch_size": 8, "ref_times": ref, "mode_times": mode,
            "single_times": single, "comm_share": 0.2 + rank / 10, "comm_overlap": None}


def test_merge_takes_the_slowest_rank_per_round():
    n = 8
    docs = [_doc(0, [2.0] * n, [1.0] * n, single=[0.9] * n), _doc(1, [2.0] * (n - 1) + [4.0], [1.0] * (n - 1) + [1.5])]
    figs = merge_ranks(docs, 0.99)
    # per round the slower rank's time: rank 1's last round on both sides
    slowest_ref, slowest_mode = [2.0] * (n - 1) + [4.0], [1.0] * (n - 1) + [1.5]
    assert figs.speedup == estimate_speedup(slowest_ref, slowest_mode, 0.99)
    assert figs.efficiency == estimate_speedup([0.9] * n, slowest_mode, 0.99)
    assert figs.speedup.high > 2.0 and figs.efficiency.low < 0.9
    assert figs.throughput_per_gpu == pytest.approx(8.0) and figs.world_size == 2
    assert figs.comm_share == pytest.approx(0.25) and figs.comm_overlap is None
    with pytest.raises(ValueError, match="different numbers of rounds"):
        merge_ranks([docs[0], _doc(1, [2.0] * (n - 1), [1.0] * (n - 1))], 0.99)
    with pytest.raises(ValueError, match="ranks \\[0, 0\\]"):
        merge_ranks([docs[0], docs[0]], 0.99)


def test_world_size_defaults_and_limits():
    assert resolve_world_size(None, CPU, 0, 8) == 2 and resolve_world_size(3, CPU, 0, 8) == 3
    assert resolve_world_size(None, CUDA, 2, 8) == 2 and resolve_world_size(1, CUDA, 2, 8) == 1
    with pytest.raises(ValueError, match="--perf-world-size 4: only 2 GPUs visible"):
        resolve_world_size(4, CUDA, 2, 8)
    # on the CPU a rank per core at most: ranks sharing cores take turns, and their launch times out
    with pytest.raises(ValueError, match="--perf-world-size 16: only 2 CPUs to run gloo processes on"):
        resolve_world_size(16, CPU, 0, 2)
    assert resolve_world_size(None, CPU, 0, 1) == 2, "the default is never refused: a one-core runner runs two"
    assert world_size_skip_reason(1, CUDA, 1) == "needs 2+ GPUs, found 1"
    assert world_size_skip_reason(2, CUDA, 2) is None and world_size_skip_reason(2, CPU, 0) is None
    assert "--perf-world-size is 1" in world_size_skip_reason(1, CPU, 0)


def test_default_cells():
    """resnet50 and gpt on GPUs, llama too in the full tier; every mode but those whose row compiles
    (fp8, only where --perf-precisions names them), and in the quick tier none that is full_tier_only
    (fp32's control, TF32), as in test_speed; one small model and mode on the CPU."""
    assert default_cells(CPU, "quick") == (("mlp",), ("amp_bf16",))
    models_quick, modes = default_cells(CUDA, "quick")
    models_full, modes_full = default_cells(CUDA, "full")
    assert models_quick == ("resnet50", "gpt") and models_full == ("resnet50", "gpt", "llama")
    assert "amp_bf16" in modes and "fp16_master" in modes and not any(MODES[m].compile for m in modes)
    assert "fp32" not in modes and "tf32" not in modes and {"fp32", "tf32"} <= set(modes_full)
    assert set(modes) == {m for m in modes_full if not MODES[m].full_tier_only}


def test_a_host_bound_drop_is_inconclusive_not_a_regression():
    assert host_bound_verdict(Verdict.REGRESSION, True) is Verdict.INCONCLUSIVE
    assert host_bound_verdict(Verdict.REGRESSION, False) is Verdict.REGRESSION
    for v in (Verdict.PASS, Verdict.IMPROVED, Verdict.INCONCLUSIVE, Verdict.NO_BASELINE):
        assert host_bound_verdict(v, True) is v


def test_host_bound_is_the_most_idle_rank_above_ten_percent():
    n = 8
    docs = [_doc(0, [2.0] * n, [1.0] * n), _doc(1, [2.0] * n, [1.0] * n)]
    docs[0]["idle_share"], docs[1]["idle_share"] = 0.04, 0.12
    figs = merge_ranks(docs, 0.99)
    assert figs.idle_share == pytest.approx(0.12) and figs.host_bound
    docs[1]["idle_share"] = 0.08
    assert not merge_ranks(docs, 0.99).host_bound
    del docs[0]["idle_share"], docs[1]["idle_share"]  # off CUDA: no kernels, no figure
    assert merge_ranks(docs, 0.99).idle_share is None and not merge_ranks(docs, 0.99).host_bound


def test_cluster_slug():
    assert cluster_slug("NVIDIA H200", 2) == "nvidia-h200-x2"
    assert cluster_slug("NVIDIA H100 80GB HBM3", 1) == "nvidia-h100-80gb-hbm3"
    with pytest.raises(ValueError):
        cluster_slug("NVIDIA H200", 0)


def _gone_within(pids: list[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not any(map(alive, pids))


def test_a_hanging_launch_is_killed_with_its_children(tmp_path):
    """A launch past its limit ends within it, taking every process it started along (here a child
    that ignores SIGTERM in a session of its own, as torchrun starts its ranks), and keeps the output
    it printed."""
    pidfile = tmp_path / "child.pid"
    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    script = (f"import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', {child!r}], "
              "start_new_session=True); "
              f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('[default1]:started', flush=True); p.wait()")
    t0 = time.monotonic()
    result = run_launch([sys.executable, "-c", script], timeout=3.0, cwd=tmp_path)
    assert result.timed_out and time.monotonic() - t0 < 15
    assert result.rank_lines(1) == ["started"]
    assert _gone_within([int(pidfile.read_text())], 5), "the launch's child outlived it"
    assert "timed out after 3 s" in result.explain(2)


def test_a_hanging_torchrun_launch_leaves_no_rank(tmp_path):
    """The same through torchrun itself: ranks that ignore SIGTERM are gone when the launch returns."""
    # torchrun substitutes its own macros in the arguments as a string.Template does: $$ gives one $
    rank = f'echo $$$$ > {tmp_path}/rank$LOCAL_RANK.pid; echo started; trap "" TERM; exec sleep 600'
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--tee=3",
               "--no-python", "sh", "-c", rank]
    result = run_launch(command, timeout=12.0, cwd=tmp_path)
    assert result.timed_out
    assert all(result.rank_lines(r) == ["started"] for r in (0, 1)), result.output[-2000:]
    pids = [int((tmp_path / f"rank{r}.pid").read_text()) for r in (0, 1)]
    assert _gone_within(pids, 5), "a rank outlived its torchrun launch"


def test_worker_plugins_are_the_modules_the_environment_names(monkeypatch):
    """Each module WORKER_PLUGINS_ENV names is imported and its worker_configure() called; none: nothing."""
    monkeypatch.delenv(WORKER_PLUGINS_ENV, raising=False)
    assert load_worker_plugins() == []
    called = []
    monkeypatch.setattr(slowdown, "worker_configure", lambda: called.append("slowdown"))
    monkeypatch.setenv(WORKER_PLUGINS_ENV, " ampbench.plugin.slowdown, ")
    assert load_worker_plugins() == ["ampbench.plugin.slowdown"] and called == ["slowdown"]


def test_a_slowdown_reaches_every_rank_of_a_launch(tmp_path, monkeypatch):
    """With the environment ampbench.slowdown leaves for worker processes, each rank slows the named
    cell's steps by the fraction of its own wall-clock step: here 300%, a busy wait of three plain steps,
    so every timed step of the mode takes at least that. (Held against the busy wait, not against a
    multiple of the plain step: the calibration's few steps on a loaded CPU ran up to 3x slower than the
    timed ones.)"""
    monkeypatch.setenv(slowdown.ENV, "mlp:bf16:3.0")
    monkeypatch.setenv(WORKER_PLUGINS_ENV, "ampbench.plugin.slowdown")
    args = ["--model", "mlp", "--mode", "bf16", "--comm", "fp32", "--out", str(tmp_path),
            "--device", "cpu", "--no-single"]
    root = Path(__file__).resolve().parents[1]
    result = run_launch(torchrun_command("ampbench.distributed.speed_worker", args, 2), timeout=120.0, cwd=root)
    assert result.ok, result.explain(2)
    for rank in (0, 1):
        lines = [ln for ln in result.rank_lines(rank) if ln.startswith("ampbench.slowdown: mlp bf16: step")]
        assert len(lines) == 1, f"rank {rank} printed {result.rank_lines(rank)}"
        plain_ms = float(lines[0].split("step ")[1].split(" ms")[0])
        added_ms = float(lines[0].split(", ")[1].split(" ms")[0])
        assert added_ms == pytest.approx(3.0 * plain_ms, rel=0.01, abs=0.002), lines[0]
        doc = json.loads((tmp_path / "fp32" / f"rank{rank}.json").read_text())
        slowed_ms = min(doc["mode_times"]) * 1e3
        assert slowed_ms >= added_ms, f"rank {rank}: slowed step {slowed_ms:.3f} ms, busy wait {added_ms:.3f} ms"


def test_a_failing_rank_ends_the_launch_with_its_error(tmp_path):
    """A rank that raises prints its traceback and exits at once, without the process group's teardown
    (on NCCL that waits for ranks stuck in a collective), and the launch's explanation shows why."""
    args = ["--model", "mlp", "--mode", "fp16", "--comm", "fsdp2_fp32_reduce", "--out", str(tmp_path),
            "--device", "cpu", "--no-single"]
    root = Path(__file__).resolve().parents[1]
    result = run_launch(torchrun_command("ampbench.distributed.speed_worker", args, 2), timeout=120.0, cwd=root)
    assert not result.ok and not result.timed_out, result.output[-3000:]
    text = result.explain(2)
    assert ("Traceback" in text
            and "ValueError: comm variant fsdp2_fp32_reduce does not apply to mode fp16" in text), text


def test_failure_names_the_root_cause_rank():
    output = "\n".join(["[default0]:fine", "[default1]:Traceback", "[default1]:ValueError: mlp amp_bf16 fp16_hook",
                        "Root Cause (first observed failure):", "[0]:", "  rank      : 1 (local_rank: 1)"])
    text = LaunchResult(1, output, 5.0, 60.0).explain(2)
    assert "rank 1 (root cause)" in text and "ValueError: mlp amp_bf16 fp16_hook" in text and "fine" not in text
    assert math.isfinite(LaunchResult(1, output, 5.0, 60.0).seconds)


def test_failure_lines_leave_out_cpp_frames():
    """NCCL's watchdog prints its message, then a C++ stack trace: the message stays in the last lines."""
    message = ("[default0]:  what():  [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
               "OpType=ALLREDUCE)")
    frames = [f"[default0]:frame #{i}: c10::Error::Error() + 0x96 (0x7f in libc10.so)" for i in range(20)]
    text = LaunchResult(None, "\n".join([message, *frames]), 60.0, 60.0).explain(1)
    assert "Watchdog caught collective operation timeout" in text and "frame #" not in text


def test_distributed_cells_and_ids():
    """Cells are model x mode x the comm variants that apply to the mode, ids model-mode-comm."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_distributed.py", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--perf-models", "resnet50,gpt", "--perf-precisions", "amp_bf16,bf16"],
        cwd=root, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert ids[:4] == ["test_ddp_speed[resnet50-amp_bf16-fp32]", "test_ddp_speed[resnet50-amp_bf16-bf16_hook]",
                       "test_ddp_speed[resnet50-amp_bf16-fp16_hook]", "test_ddp_speed[resnet50-bf16-fp32]"]
    assert "test_fsdp2_speed[gpt-amp_bf16-fsdp2_bf16_reduce]" in ids and len(ids) == 2 * (4 + 3)


def test_fsdp2_wraps_a_channels_last_convnet():
    """On CUDA a convnet's Trainer makes its weights channels_last before the wrap, and fully_shard
    refuses parameters that are not contiguous (the CPU smoke pass never makes them channels_last)."""
    import torch.distributed as dist

    from ampbench.distributed.variants import STRATEGIES, get_comm

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3),
                                   torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU()))
        model = conv.to(memory_format=torch.channels_last)
        assert not model[0].weight.is_contiguous()
        wrapped = STRATEGIES["fsdp2"].wrap(model, get_comm("fsdp2_fp32"), CPU)
        wrapped(torch.randn(2, 3, 8, 8).to(memory_format=torch.channels_last)).sum().backward()
        assert all(p.grad is not None for p in wrapped.parameters())
    finally:
        dist.destroy_process_group()


def test_a_host_bound_fsdp2_cell_says_that_fsdp2_s_own_host_is_the_cause():
    """Only a host-bound cell carries its strategy's note, and only FSDP2 has one (docs/design.md,
    "FSDP2's scaling"): DDP's idle host is the harness's host, not DDP's."""
    from ampbench.distributed.figures import DistFigures
    from ampbench.distributed.judging import CellChecks, cell_message
    from ampbench.distributed.variants import STRATEGIES
    from ampbench.stats import SpeedupEstimate

    def figs(idle: float) -> DistFigures:
        est = SpeedupEstimate(2.0, 1.9, 2.1, 8, 0.99)
        return DistFigures(est, None, 100.0, 50.0, 0.4, 0.5, 2, idle_share=idle)

    note = STRATEGIES["fsdp2"].host_bound_note
    assert note and not STRATEGIES["ddp"].host_bound_note
    unchecked = CellChecks()
    bound = cell_message("gpt amp_bf16 fsdp2_fp32 x2", figs(0.36), unchecked, {}, None, gpu=True, note=note)
    assert "host-bound" in bound and note in bound
    busy = cell_message("gpt amp_bf16 fsdp2_fp32 x2", figs(0.02), unchecked, {}, None, gpu=True, note=note)
    assert "host-bound" not in busy and note not in busy
