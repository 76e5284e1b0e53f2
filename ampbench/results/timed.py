"""Records of the cells that time a mode against fp32 in interleaved rounds: speed (one GPU) and
distributed (N ranks). Both carry a speedup with its interval, which compare and spread read through
``estimate``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ampbench.results.base import Record, checked, flag, number, raw, scalar, text
from ampbench.results.schema import CONFIDENCE, COUNT, NON_NEGATIVE, POSITIVE, VERDICT
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


def _first(*values: Any) -> Any:
    """The first of `values` that is not None: a figure's own confidence, else the record's `confidence`
    (which a record that names no other holds for all its figures)."""
    return next((v for v in values if v is not None), None)


def _estimate(speedup: Any, low: Any, high: Any, rounds: Any, confidence: Any) -> SpeedupEstimate | None:
    if speedup is None or low is None or high is None or min(speedup, low, high) <= 0:
        return None
    return SpeedupEstimate(speedup, low, high, int(rounds) if rounds is not None else 0,
                           confidence if confidence is not None else 0.99)


@dataclass(frozen=True)
class SpeedRecord(Record):
    """``test_speed[model-mode]``: the device-time speedup (the gate by default) and the wall-clock
    speedup of eager steps, each with its interval, baseline and verdict; how long the eager step waits
    on the host; step times, throughput, memory and TFLOP/s of both sides."""

    KIND: ClassVar[str] = "speed"
    TIMED: ClassVar[bool] = True
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("speedup_low", "speedup", "speedup_high"), ("speedup_across_low", "speedup_across_high"),
        ("device_speedup_low", "device_speedup", "device_speedup_high"),
        ("versus_speedup_low", "versus_speedup", "versus_speedup_high"))

    batch_size: int | None = number()
    gate: str | None = text()  # --perf-gate
    gated: list | None = raw()  # the figures that held the cell: "device", "wall"
    steps_per_block: int | None = number()
    ref_steps_per_block: int | None = number()
    # the wall-clock speedup of eager steps
    speedup: float | None = checked(POSITIVE)
    speedup_low: float | None = checked(POSITIVE)
    speedup_high: float | None = checked(POSITIVE)
    rounds: int | None = checked(COUNT)
    confidence: float | None = checked(CONFIDENCE)
    speedup_across_low: float | None = checked(POSITIVE)  # the interval across runs, where a spread was learned
    speedup_across_high: float | None = checked(POSITIVE)
    between_run_sd: float | None = number()
    between_run_count: int | None = number()
    baseline_speedup: float | None = checked(POSITIVE)
    tolerance: float | None = checked(NON_NEGATIVE)
    line: float | None = number()
    drop: float | None = number()
    confirm_speedup: float | None = number()
    wall_verdict: Verdict | None = checked(VERDICT)
    # the device-time speedup
    device_method: str | None = text()  # graph, kernels or wall
    device_fallback: str | None = text()
    device_speedup: float | None = checked(POSITIVE)
    device_speedup_low: float | None = checked(POSITIVE)
    device_speedup_high: float | None = checked(POSITIVE)
    device_rounds: int | None = checked(COUNT)
    # 99% where the figure gates the cell, speed.LOOK_CONFIDENCE where it is only reported (``confidence``: the wall's)
    device_confidence: float | None = checked(CONFIDENCE)
    device_speedup_across_low: float | None = checked(POSITIVE)
    device_speedup_across_high: float | None = checked(POSITIVE)
    device_baseline_speedup: float | None = checked(POSITIVE)
    device_tolerance: float | None = checked(NON_NEGATIVE)
    device_line: float | None = number()
    device_drop: float | None = number()
    device_confirm_speedup: float | None = number()
    device_verdict: Verdict | None = checked(VERDICT)
    device_step_ms: float | None = number()
    # how the device blocks were queued ahead of the GPU (ampbench.speed.held) and the GPU's idle share inside
    # one profiled held block of each side: the check that no host entered the device time
    device_queue: str | None = text()
    device_blocks: int | None = number()
    device_held_blocks: int | None = number()
    device_retried_blocks: int | None = number()
    device_per_replay_blocks: int | None = number()
    device_chunk_replays: int | None = number()  # the fewest replays one hold covered, where blocks were split
    device_hold_ms: float | None = number()
    device_block_idle_share: float | None = number()
    device_block_idle_share_ref: float | None = number()
    device_block_longest_gap_us: float | None = number()
    device_step_ms_ref: float | None = number()
    device_round_ms: list | None = raw()
    device_ref_round_ms: list | None = raw()
    kernel_ms: float | None = number()
    kernel_ms_ref: float | None = number()
    kernel_speedup: float | None = number()
    kernels: list | None = raw()  # the mode's top kernels, {"name", "ms"} per step
    kernel_changes: str | None = text()
    # how far the eager step waits on the host
    busy_ms: float | None = number()
    host_overhead_ms: float | None = number()
    idle_share: float | None = number()
    host_bound: bool | None = flag()
    busy_ms_ref: float | None = number()
    host_overhead_ms_ref: float | None = number()
    idle_share_ref: float | None = number()
    host_bound_ref: bool | None = flag()
    # medians of each side's per-step wall times, over the rounds (the speedup is the centre of the
    # rounds' paired ratios, so the two need not agree exactly)
    throughput: float | None = number()
    throughput_ref: float | None = number()
    step_ms: float | None = number()
    step_ms_ref: float | None = number()
    device_throughput: float | None = number()
    peak_mem_bytes: int | None = number()
    peak_mem_ref_bytes: int | None = number()
    memory_ratio: float | None = number()
    tflops: float | None = number()
    tflops_peak: float | None = number()
    tflops_fraction: float | None = number()
    recording: bool | None = flag()  # this run recorded the cell's baseline
    # a slowdown injected on purpose (ampbench.slowdown): a fraction of the step, or how (torchao's
    # emulated fp8 matmul); no sample of noise
    injected_slowdown: float | str | None = scalar()
    weights_moved: bool | None = flag()
    final_loss_finite: bool | None = flag()
    loss_scale: float | None = number()
    prepare_s: float | None = number()
    ref_prepare_s: float | None = number()
    # a compiled cell's first step: dynamo and Inductor compiling it, caches cold (--perf-compile)
    compile_s: float | None = number()
    ref_compile_s: float | None = number()
    baseline_compile_s: float | None = number()
    # a compiled cell's second ratio, in device time: the mode's speedup over its versus side
    # (modes.versus_of): the mode eager (the compile gain), or compiled amp_bf16 for the fp8 modes
    versus: str | None = text()  # the versus side's mode: "amp_bf16", "amp_bf16 compiled"
    versus_method: str | None = text()  # graph, kernels or wall, as device_method
    versus_fallback: str | None = text()
    versus_speedup: float | None = checked(POSITIVE)
    versus_speedup_low: float | None = checked(POSITIVE)
    versus_speedup_high: float | None = checked(POSITIVE)
    versus_rounds: int | None = checked(COUNT)
    versus_confidence: float | None = checked(CONFIDENCE)
    versus_baseline_speedup: float | None = checked(POSITIVE)
    versus_tolerance: float | None = checked(NON_NEGATIVE)
    versus_line: float | None = number()
    versus_drop: float | None = number()
    versus_confirm_speedup: float | None = number()
    versus_verdict: Verdict | None = checked(VERDICT)
    versus_step_ms: float | None = number()  # the versus side's device time per step
    cudnn_benchmark: bool | None = flag()
    block_seconds: float | None = number()
    round_ms: list | None = raw()  # per-step milliseconds of every wall round, in order
    ref_round_ms: list | None = raw()

    def estimate(self, device: bool = False) -> SpeedupEstimate | None:
        """The speedup with its interval, as the suite measured it; None when incomplete. `device`
        reads the device-time speedup (the wall-clock one otherwise)."""
        if device:
            return _estimate(self.device_speedup, self.device_speedup_low, self.device_speedup_high,
                             self.device_rounds, _first(self.device_confidence, self.confidence))
        return _estimate(self.speedup, self.speedup_low, self.speedup_high, self.rounds, self.confidence)

    def versus_estimate(self) -> SpeedupEstimate | None:
        """A compiled cell's second ratio with its interval (``versus``); None for an eager cell."""
        return _estimate(self.versus_speedup, self.versus_speedup_low, self.versus_speedup_high,
                         self.versus_rounds, _first(self.versus_confidence, self.confidence))

    def speedup_of(self, device: bool = False) -> float | None:
        return self.device_speedup if device else self.speedup

    def tolerance_of(self, device: bool = False) -> float | None:
        """The tolerance the run held the figure to."""
        return self.device_tolerance if device else self.tolerance

    def verdict_of(self, device: bool = False) -> Verdict | None:
        """The verdict of one figure, where the cell wrote it apart; the cell's otherwise."""
        own = self.device_verdict if device else self.wall_verdict
        return own if own is not None else self.verdict

    def across_runs(self, device: bool = False) -> tuple[float, float] | None:
        """The speedup's interval across runs (low, high), where the baseline had a between-run spread."""
        lo, hi = ((self.device_speedup_across_low, self.device_speedup_across_high) if device
                  else (self.speedup_across_low, self.speedup_across_high))
        return (lo, hi) if lo is not None and hi is not None else None


def cluster_name(gpu: str, world_size: int, nodes: int = 1) -> str:
    """What N GPUs of one model are called where one GPU's name would be: in a baseline file's header and
    in the history's series of a distributed cell ('NVIDIA H200 x2'); N GPUs over several hosts are
    another cluster ('NVIDIA H200 x2 on 2 nodes'): their collectives cross a network."""
    return f"{gpu} x{world_size}" + (f" on {nodes} nodes" if nodes > 1 else "")


def cluster_shape(name: str, gpu: str) -> tuple[int, int] | None:
    """(N, nodes) where `name` is ``cluster_name(gpu, N, nodes)``; None where it names no GPUs of model `gpu`."""
    head, _, count = name.rpartition(" x")
    count, _, spread = count.partition(" on ")
    nodes = spread.removesuffix(" nodes") if spread.endswith(" nodes") else ("1" if not spread else "")
    return (int(count), int(nodes)) if head == gpu and count.isdigit() and nodes.isdigit() else None


def cluster_size(name: str, gpu: str) -> int | None:
    """N where `name` is ``cluster_name(gpu, N)``, N GPUs on one node; None where it names no such GPUs."""
    shape = cluster_shape(name, gpu)
    return shape[0] if shape is not None and shape[1] == 1 else None


@dataclass(frozen=True)
class DistributedRecord(Record):
    """``test_ddp_speed`` / ``test_fsdp2_speed[model-mode-comm]``: a mode's speedup over fp32 under the same
    parallelism on N ranks, in device time (the gate by default, where measured) and in wall clock, its
    scaling efficiency against one GPU, and the share of communication."""

    KIND: ClassVar[str] = "distributed"
    TIMED: ClassVar[bool] = True  # pytest-benchmark's figures: the mode's time per step in each round
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("speedup_low", "speedup", "speedup_high"),
        ("device_speedup_low", "device_speedup", "device_speedup_high"),
        ("scaling_efficiency_low", "scaling_efficiency", "scaling_efficiency_high"),
        ("device_scaling_efficiency_low", "device_scaling_efficiency", "device_scaling_efficiency_high"))

    comm: str | None = text()  # the communication variant
    world_size: int | None = number()
    nodes: int | None = number()  # the hosts the ranks ran on (torchrun's nodes); absent: one
    speedup: float | None = checked(POSITIVE)
    speedup_low: float | None = checked(POSITIVE)
    speedup_high: float | None = checked(POSITIVE)
    rounds: int | None = checked(COUNT)
    confidence: float | None = checked(CONFIDENCE)
    throughput_per_gpu: float | None = number()
    throughput_per_gpu_ref: float | None = number()
    throughput: float | None = number()
    batch_size_per_gpu: int | None = number()
    scaling_efficiency: float | None = checked(POSITIVE)
    scaling_efficiency_low: float | None = checked(POSITIVE)
    scaling_efficiency_high: float | None = checked(POSITIVE)
    comm_share: float | None = number()
    comm_overlap: float | None = number()
    comm_share_ref: float | None = number()
    comm_overlap_ref: float | None = number()
    idle_share: float | None = number()  # the most idle rank's share of the mode's step with no kernel running
    idle_share_ref: float | None = number()
    host_bound: bool | None = flag()  # idle_share above hostload.HOST_BOUND_IDLE_SHARE: a drop is not failed
    baseline_speedup: float | None = checked(POSITIVE)
    baseline_scaling_efficiency: float | None = checked(POSITIVE)
    tolerance: float | None = checked(NON_NEGATIVE)
    line: float | None = number()
    wall_verdict: Verdict | None = checked(VERDICT)  # the wall-clock speedup's
    # the device-time speedup: per round the least busy rank's device time per step
    # "graph" (held replays of each rank's step captured as a CUDA graph) or "kernels" (the profiler's
    # busy time of eager steps, where some rank could not capture them) on GPUs; "wall" on gloo ranks
    device_method: str | None = text()
    device_fallback: str | None = text()  # why not a CUDA graph's replay: each failing rank's reason
    device_queue: str | None = text()  # how rank 0's held blocks were queued (``ampbench.speed.held``)
    device_speedup: float | None = checked(POSITIVE)
    device_speedup_low: float | None = checked(POSITIVE)
    device_speedup_high: float | None = checked(POSITIVE)
    device_rounds: int | None = checked(COUNT)
    device_baseline_speedup: float | None = checked(POSITIVE)
    device_tolerance: float | None = checked(NON_NEGATIVE)
    device_line: float | None = number()
    device_verdict: Verdict | None = checked(VERDICT)
    device_step_ms: float | None = number()
    device_step_ms_ref: float | None = number()
    device_round_ms: list | None = raw()
    device_ref_round_ms: list | None = raw()
    # the scaling efficiency in device time: rank 0's 1-GPU graph replays over the N-GPU ones (graph only)
    device_scaling_efficiency: float | None = checked(POSITIVE)
    device_scaling_efficiency_low: float | None = checked(POSITIVE)
    device_scaling_efficiency_high: float | None = checked(POSITIVE)
    device_scaling_verdict: Verdict | None = checked(VERDICT)
    baseline_device_scaling_efficiency: float | None = checked(POSITIVE)
    device_scaling_tolerance: float | None = checked(NON_NEGATIVE)
    gated: list | None = raw()  # the --perf-gate figures that held the cell: "device", "wall"
    recording: bool | None = flag()
    weights_moved: bool | None = flag()
    loss_scale: float | None = number()
    backend: str | None = text()
    strategy: str | None = text()
    steps_per_block: int | None = number()
    ref_steps_per_block: int | None = number()
    block_seconds: float | None = number()
    cudnn_benchmark: bool | None = flag()
    launch_s: float | None = number()
    round_ms: list | None = raw()
    ref_round_ms: list | None = raw()

    def estimate(self, device: bool = False) -> SpeedupEstimate | None:
        """The speedup under the same parallelism with its interval; `device`: in device time (None where
        the run measured none)."""
        if device:
            return _estimate(self.device_speedup, self.device_speedup_low, self.device_speedup_high,
                             self.device_rounds, self.confidence)
        return _estimate(self.speedup, self.speedup_low, self.speedup_high, self.rounds, self.confidence)

    def efficiency(self, device: bool = False) -> SpeedupEstimate | None:
        """The scaling efficiency with its interval; `device`: in device time (None where not measured)."""
        if device:
            return _estimate(self.device_scaling_efficiency, self.device_scaling_efficiency_low,
                             self.device_scaling_efficiency_high, self.device_rounds, self.confidence)
        return _estimate(self.scaling_efficiency, self.scaling_efficiency_low, self.scaling_efficiency_high,
                         self.rounds, self.confidence)

    def speedup_of(self, device: bool = False) -> float | None:
        return self.device_speedup if device else self.speedup

    def tolerance_of(self, device: bool = False) -> float | None:
        return self.device_tolerance if device else self.tolerance

    def verdict_of(self, device: bool = False) -> Verdict | None:
        """The verdict of one figure, where the cell wrote it apart; the cell's otherwise."""
        own = self.device_verdict if device else self.wall_verdict
        return own if own is not None else self.verdict
