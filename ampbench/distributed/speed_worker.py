"""One rank of a distributed speed cell, run by torchrun::

    torchrun --nproc-per-node 2 --standalone -m ampbench.distributed.speed_worker \\
        --model resnet50 --mode amp_bf16 --comm fp32,bf16_hook --out DIR

Per comm variant, the fp32 side (the same parallelism, fp32 reduction) and the mode alternate in
rounds as in ``PairedTimer``, every rank starting each block together; rank 0 also times, between
rounds, the same mode on its GPU alone (a plain ``Trainer``), the 1-GPU side of the scaling
efficiency, in wall clock and, on CUDA, as held replays of its step captured as a CUDA graph
(``single_device_block``), the device time the efficiency is held to. On CUDA each round also times one block of each
side on the device (``device_timer``):
replays of the rank's step captured as a CUDA graph, held and started on every rank together
(``graphed``), or where a rank cannot capture it, the profiler's busy time of the rank's GPU per step;
beside the wall-clock blocks. Each rank writes ``DIR/<comm>/rank{R}.json``, or, for a variant this
build or device cannot run, a document saying what is missing (``variants.VariantUnsupported``), and
goes on to the next. On CUDA a few further, untimed steps run under torch.profiler for NCCL's share of a
step and its overlap with compute.

Every rank runs the same steps in the same order: a collective that one rank skips hangs the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist

from ampbench import models
from ampbench.device import configure_backends, device_name, prime_libraries, release
from ampbench.distributed.figures import GRAPH_FALLBACK, NO_DEVICE
from ampbench.distributed.graphed import CAPTURE_ERROR_MODE, RankedReplays, capture_sides, own_stream
from ampbench.distributed.launch import injected, load_worker_plugins
from ampbench.distributed.ranks import agree_max, together
from ampbench.distributed.variants import (
    STRATEGIES,
    CommVariant,
    VariantUnsupported,
    comm_figures,
    exit_failed_rank,
    get_comm,
    kernels_from_trace,
)
from ampbench.modes import FP32_MODE, PrecisionMode, compiled, get_mode
from ampbench.speed import sides
from ampbench.speed.clocks import DeviceClock
from ampbench.speed.devicetime import CapturedStep, CaptureError, profile_steps
from ampbench.speed.timing import PairedTimer, steps_per_block, sync, time_block, wall_block, warm_up
from ampbench.train import Trainer


def after(before_block: Callable[[], None], block: Callable[[], float]) -> Callable[[], float]:
    """`block`, each time after `before_block` (every rank's start together)."""
    def run() -> float:
        before_block()
        return block()
    return run


def ranked_timer(ref: Trainer, trainer: Trainer, ref_steps: int, mode_steps: int,
                 before_block: Callable[[], None]) -> PairedTimer:
    """A PairedTimer of wall-clock blocks whose every block starts on all ranks together."""
    return PairedTimer(after(before_block, wall_block(ref, ref_steps)),
                       after(before_block, wall_block(trainer, mode_steps)), ref_steps, mode_steps)


@dataclass
class DeviceBlocks:
    """How a cell's device time is measured on this rank, and its PairedTimer (None off CUDA)."""

    timer: PairedTimer | None
    method: str  # "graph", "kernels" or "wall", as figures.DistFigures.device_method
    fallback: str | None  # why not graph replays
    replays: RankedReplays | None = None  # the held blocks' bookkeeping, for graph replays

    def fields(self) -> dict:
        """The rank document's device-time fields."""
        timer = self.timer
        return {"device_method": self.method, "device_fallback": self.fallback,
                "device_queue": self.replays.describe() if self.replays else None,
                "device_ref_times": timer.ref_times if timer else None,
                "device_mode_times": timer.mode_times if timer else None}


def device_timer(ref: Trainer, trainer: Trainer, ref_steps: int, mode_steps: int,
                 before_block: Callable[[], None]) -> DeviceBlocks:
    """The device-time blocks of both sides: each rank's step captured as a CUDA graph and replayed in
    held blocks every rank times together (``graphed``), or, where some rank could not capture a side,
    the profiler's busy time of the rank's GPU over a block of eager steps, per step
    (``devicetime.profile_steps``: the union of every kernel, memcpy and memset, NCCL's included), each
    started on all ranks together. Blocks of their own, not the wall-clock ones: a hold or the
    profiler costs wall time, and the wall-clock figure is what eager training gets."""
    if trainer.device.type != "cuda":
        return DeviceBlocks(None, "wall", NO_DEVICE)
    graphs, why = capture_sides((ref, trainer))
    if graphs is not None:
        replays = RankedReplays(trainer.device)
        timer = PairedTimer(replays.timed(graphs[0], ref_steps), replays.timed(graphs[1], mode_steps),
                            ref_steps, mode_steps)
        return DeviceBlocks(timer, "graph", None, replays)

    def busy(side: Trainer, steps: int) -> Callable[[], float]:
        return after(before_block, lambda: profile_steps(side, steps).busy_ms / 1e3)

    timer = PairedTimer(busy(ref, ref_steps), busy(trainer, mode_steps), ref_steps, mode_steps)
    return DeviceBlocks(timer, "kernels", f"{GRAPH_FALLBACK}: {why}")


def build(spec, mode: PrecisionMode, variant: CommVariant, device: torch.device, smoke: bool) -> Trainer:
    strategy = STRATEGIES[variant.strategy]
    # the same seed on every rank: the same initial weights (FSDP2 shards each rank's own copy, it
    # broadcasts nothing) and the same synthetic batches, which change no timing
    trainer = Trainer(spec, mode, device, smoke=smoke, wrap=lambda m: strategy.wrap(m, variant, device))
    factory = strategy.scalers.get(mode.loss_scaling)
    if factory is not None:
        trainer.scaler = factory(device)
    return trainer


def single_side(spec, mode: PrecisionMode, device: torch.device, smoke: bool,
                policy: sides.SpeedPolicy) -> sides.Side:
    """The 1-GPU side: a plain Trainer of the mode, warmed up as ``timing.warm_up``. Not
    ``sides.prepare_side``, which also captures the step as a CUDA graph and profiles it: nothing here
    reads a profile, a graph captured here would hold a step's worth of memory on rank 0 for the whole
    launch, and one captured in CUDA's global mode forbids unsafe calls to every other thread of the
    process (NCCL's watchdog among them). Its graph is captured per cell, in the ranks' thread-local
    mode (``single_device_block``)."""
    t0 = time.perf_counter()
    trainer = Trainer(spec, mode, device, smoke=smoke)
    step_seconds = warm_up(trainer, min_steps=policy.warmup_steps, min_seconds=policy.warmup_seconds)
    return sides.Side(trainer, step_seconds, None, time.perf_counter() - t0)


def single_device_block(single: sides.Side | None, steps: int) -> tuple[Callable[[], float] | None, str | None]:
    """Rank 0's 1-GPU side on the device, as the distributed blocks are timed: its step captured as a
    CUDA graph (in the ranks' capture mode: NCCL's watchdog runs meanwhile) and replayed in held blocks,
    as a single-GPU cell's (``clocks.DeviceClock``): a block function of seconds per step, or None
    and why not (no side here, no device time off CUDA, a step that could not be captured). Captured per
    cell, so that its graph's memory goes with the cell's; the other ranks wait for it at the next
    block's start."""
    if single is None:
        return None, None
    device = single.trainer.device
    if device.type != "cuda":
        return None, NO_DEVICE
    try:
        graph = CapturedStep(single.trainer, CAPTURE_ERROR_MODE, torch.cuda.current_stream(device))
    except CaptureError as exc:
        return None, f"the 1-GPU side's step was not captured as a CUDA graph: {exc}"
    return DeviceClock(single.trainer, "graph", steps, graph).block, None


def warm_together(trainer: Trainer, policy: sides.SpeedPolicy) -> float:
    """Warm-up as ``timing.warm_up``, in step counts the ranks agree on; the slowest rank's step time."""
    device = trainer.device
    together(device)
    t0 = time.perf_counter()
    trainer.run(policy.warmup_steps)
    sync(device)
    per_step = agree_max((time.perf_counter() - t0) / policy.warmup_steps, device)
    extra = math.ceil(max(0.0, policy.warmup_seconds - policy.warmup_steps * per_step) / max(per_step, 1e-9))
    if extra:
        trainer.run(int(extra))
    probe = 3
    together(device)
    return agree_max(time_block(device, lambda: trainer.run(probe)) / probe, device)


def fingerprint(trainer: Trainer) -> torch.Tensor:
    """Per-parameter sums of this rank's weights (its shards under FSDP2): change when a step lands."""
    local = [getattr(p, "to_local", lambda p=p: p)() for p in trainer.model.parameters()]
    return torch.stack([p.detach().float().sum() for p in local])


def profiled_trace(trainer: Trainer, steps: int, activities: list) -> dict:
    """The chrome trace of `steps` training steps, after an unprofiled step and a warm-up step under
    the profiler. The profiler's start (CUPTI attaching, the first time in the process) takes each
    rank a different time, and a first step traced from it would show the rank that started first
    waiting in its NCCL kernels for the others, as communication. And kineto tears CUPTI down after a
    session (TEARDOWN_CUPTI, which ampbench.speed.devicetime sets) from the next CUDA call on, on a thread of
    its own: a session started back to back with the last one (the fp32 side's after the mode's) can
    lose its GPU events to that teardown, which the unprofiled step gives time to finish."""
    from torch.profiler import profile, schedule

    traces: list[dict] = []

    def keep(prof) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "trace.json"
            prof.export_chrome_trace(str(path))
            traces.append(json.loads(path.read_text()))

    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=1, repeat=1),
                 on_trace_ready=keep) as prof:
        for block in (1, 1, steps):  # unprofiled, warm-up, then the traced steps; each ends on an idle device
            trainer.run(block)
            sync(trainer.device)
            prof.step()
    return traces[0]


def profile_comm(trainer: Trainer, steps: int) -> dict:
    """NCCL's share of `steps` untimed steps, its overlap with compute and the share of the steps the
    GPU sat idle, from torch.profiler (``variants.comm_figures``); None figures off CUDA (gloo works
    on the host, there are no kernels to read)."""
    device = trainer.device
    if device.type != "cuda" or steps <= 0:
        return {"comm_share": None, "comm_overlap": None, "idle_share": None}
    from torch.profiler import ProfilerActivity

    together(device)
    return comm_figures(kernels_from_trace(profiled_trace(trainer, steps, [ProfilerActivity.CUDA])))


def run_cell(args, spec, mode: PrecisionMode, variant: CommVariant, device: torch.device,
             single: sides.Side | None, policy: sides.SpeedPolicy) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    if not variant.applies_to(mode):
        raise ValueError(f"comm variant {variant.name} does not apply to mode {mode.name}")
    # fp32 compiled where the mode compiles (fp8), as in the single-GPU suite: an eager fp32 side would
    # fold the compile gain into the mode's speedup
    ref_mode = compiled(get_mode(FP32_MODE), mode.compile)
    injected(clear=True)
    ref = build(spec, ref_mode, get_comm(variant.fp32_comm), device, args.smoke)
    trainer = build(spec, mode, variant, device, args.smoke)
    ref_step, mode_step = warm_together(ref, policy), warm_together(trainer, policy)
    timer = ranked_timer(ref, trainer, steps_per_block(ref_step, policy.block_seconds),
                         steps_per_block(mode_step, policy.block_seconds), before_block=lambda: together(device))
    on_device = device_timer(ref, trainer, timer.ref_steps, timer.mode_steps, before_block=lambda: together(device))
    single_steps = steps_per_block(single.step_seconds, policy.block_seconds) if single else 0
    single_times: list[float] = []
    # its replays are held only against N-GPU graph replays (``figures.device_efficiency``): none are taken
    # where the N-GPU side fell back to another clock
    single_device, single_why = (single_device_block(single, single_steps) if on_device.method == "graph"
                                 else (None, None))
    single_device_times: list[float] = []
    before = fingerprint(trainer)
    for _ in range(args.rounds):
        timer.rounds(1)
        if on_device.timer is not None:
            on_device.timer.rounds(1)
        together(device)  # the other ranks wait here while rank 0 trains alone
        if single is not None:
            single_times.append(time_block(device, lambda: single.trainer.run(single_steps)) / single_steps)
        if single_device is not None:
            single_device_times.append(single_device())
    together(device)
    comm = profile_comm(trainer, args.profile_steps)
    comm_ref = profile_comm(ref, args.profile_steps)
    last_loss = trainer.run(1)
    doc = {
        "rank": rank, "world_size": world, "model": spec.name, "mode": mode.name, "comm": variant.name,
        "strategy": variant.strategy, "reference_comm": variant.fp32_comm, "device": device_name(device),
        "backend": dist.get_backend(), "batch_size": trainer.batch_size, "smoke": args.smoke,
        "ref_steps": timer.ref_steps, "mode_steps": timer.mode_steps, "single_steps": single_steps or None,
        "ref_times": timer.ref_times, "mode_times": timer.mode_times, "single_times": single_times or None,
        "samples_per_s": trainer.batch_size * len(timer.mode_times) / sum(timer.mode_times),
        "ref_samples_per_s": trainer.batch_size * len(timer.ref_times) / sum(timer.ref_times),
        **on_device.fields(),
        "single_samples_per_s": (trainer.batch_size * len(single_times) / sum(single_times)) if single_times else None,
        "single_device_times": single_device_times or None, "single_device_fallback": single_why,
        **comm, "comm_share_ref": comm_ref["comm_share"], "comm_overlap_ref": comm_ref["comm_overlap"],
        "idle_share_ref": comm_ref["idle_share"],
        "weights_moved": bool((fingerprint(trainer) != before).any()),
        "final_loss_finite": bool(torch.isfinite(last_loss)), "loss_scale": sides.loss_scale(trainer),
        "injected_slowdown": injected(),
    }
    return doc


_FAILURE = re.compile(r"ampbench\.distributed\.speed_worker rank \d+: (\S+) (\S+) (\S+) failed: ")


def failure_line(rank: int, model: str, mode: str, comm: str, exc: BaseException) -> str:
    """What a rank prints when a variant raised, before the launch ends (``failed_comm`` reads it)."""
    return f"ampbench.distributed.speed_worker rank {rank}: {model} {mode} {comm} failed: {type(exc).__name__}: {exc}"


def failed_comm(output: str) -> str | None:
    """The comm variant whose failure ended a launch, from its ranks' output; None where no rank named one
    (a launch that timed out, or failed before its first variant)."""
    m = _FAILURE.search(output)
    return m.group(3) if m else None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ampbench.distributed.speed_worker",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, choices=list(models.REGISTRY))
    p.add_argument("--mode", required=True)
    p.add_argument("--comm", required=True, help="comma-separated comm variants, run one after the other")
    p.add_argument("--out", required=True, type=Path, help="folder for <comm>/rank{R}.json")
    p.add_argument("--rounds", type=int, default=sides.DEFAULT_MIN_ROUNDS)
    p.add_argument("--block-seconds", type=float, default=sides.DEFAULT_BLOCK_SECONDS)
    p.add_argument("--profile-steps", type=int, default=3, help="untimed profiled steps per side on CUDA (0: none)")
    p.add_argument("--no-single", dest="single", action="store_false", help="skip the 1-GPU side on rank 0")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--collective-timeout", type=float, default=300.0,
                   help="seconds a collective may wait for the other ranks before this rank fails")
    args = p.parse_args(argv)
    get_mode(args.mode)
    args.comms = [get_comm(c.strip()) for c in args.comm.split(",") if c.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_worker_plugins()
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    args.smoke = not cuda  # the CPU runs the smoke pass's tiny shapes, as the single-process suite does
    if cuda:
        torch.cuda.set_device(device)
        own_stream(device)  # before any model is built: DDP keeps the stream it was built on
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=args.collective_timeout),
                            device_id=device if cuda else None)
    try:
        spec, mode = models.get_model(args.model), get_mode(args.mode)
        configure_backends(device, args.cudnn_benchmark)
        prime_libraries(device)
        policy = sides.policy_for(device, args.rounds, 0.03, args.block_seconds)
        single = None
        if rank == 0 and args.single:
            single = single_side(spec, mode, device, args.smoke, policy)
        for variant in args.comms:
            try:
                doc = run_cell(args, spec, mode, variant, device, single, policy)
            except VariantUnsupported as exc:
                # every rank refused it alike, before its own collectives: the next variant still runs
                doc = {"rank": rank, "comm": variant.name, "unsupported": str(exc)}
            except Exception as exc:
                print(failure_line(rank, spec.name, mode.name, variant.name, exc), file=sys.stderr, flush=True)
                raise
            path = args.out / variant.name / f"rank{rank}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc))
            print(f"rank {rank}: {spec.name} {mode.name} {variant.name} done", flush=True)
            release(device)
    except BaseException:
        exit_failed_rank()
    dist.destroy_process_group()  # every rank gets here together: nothing is left to flush
    return 0


if __name__ == "__main__":
    sys.exit(main())
