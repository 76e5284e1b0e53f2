"""The clocks of a ratio's two sides. A block of one side's training steps is timed on the device
(`DeviceClock`: graph replays behind a hold, the profiler's kernel sum where the step could not be
captured, the wall time off CUDA) or on the host (``timing.wall_block``: eager steps); a ratio's two sides
are timed by one clock, the same way on both (`Clock`): the one its kind names (``RatioKind.clock``) in
`CLOCKS`. A new way of timing a ratio is one entry there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ampbench.device import card_uuid
from ampbench.nvml import Reader, reader_for
from ampbench.speed.devicetime import CapturedStep, profile_steps
from ampbench.speed.held import BlockQueue
from ampbench.speed.sides import Side, SpeedPolicy
from ampbench.speed.timing import PairedTimer, steps_per_block, time_block, wall_block
from ampbench.train import Trainer

METHODS = ("graph", "kernels", "wall")  # what `DeviceClock.method` can be


@dataclass
class DeviceClock:
    """Times blocks of one side's training steps on the device; `block()` returns seconds per step.
    On CUDA each block is queued whole behind `queue`'s hold (``ampbench.speed.held``)."""

    trainer: Trainer
    method: str  # one of METHODS
    steps: int  # training steps per timed block
    graph: CapturedStep | None = None
    fallback: str | None = None  # why this side is not measured by graph replay, where it could be
    queue: BlockQueue | None = None  # the cell's hold, shared by both sides; None off CUDA

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"unknown device-time method {self.method!r}; one of {', '.join(METHODS)}")
        if self.method == "graph" and self.graph is None:
            raise ValueError("method 'graph' needs a captured step")
        if self.queue is None and self.method != "wall":
            self.queue = BlockQueue(self.trainer.device)

    def block(self) -> float:
        if self.method == "graph":
            graph, n = self.graph, self.steps
            assert graph is not None and self.queue is not None  # as __post_init__ leaves a graph's clock
            return self.queue.replays(graph.replay, n, graph.replay_each_timed, graph.chunk_for(n)) / n
        if self.method == "kernels":
            return profile_steps(self.trainer, self.steps, self.queue).kernel_ms / 1e3
        return time_block(self.trainer.device, lambda: self.trainer.run(self.steps)) / self.steps


def clock_for(trainer: Trainer, steps: int, graph: CapturedStep | None, fallback: str | None,
              queue: BlockQueue | None = None) -> DeviceClock:
    """The device clock of one side: graph replay where a graph was captured, the profiler's kernel
    sum where capture failed (`fallback` says why), the wall clock off CUDA."""
    if trainer.device.type != "cuda":
        return DeviceClock(trainer, "wall", steps, fallback="no CUDA device: device time is the wall time")
    if graph is not None:
        return DeviceClock(trainer, "graph", steps, graph, queue=queue)
    return DeviceClock(trainer, "kernels", steps, fallback=fallback, queue=queue)


def paired_blocks(ref: DeviceClock, mode: DeviceClock) -> tuple[Callable[[], float],
                                                                Callable[[], float], str, str | None]:
    """The two sides' block functions measured the same way (a graph on one side and a kernel sum
    on the other would compare two different things), the method and why it is not a graph."""
    if ref.method == mode.method:
        return ref.block, mode.block, ref.method, ref.fallback or mode.fallback
    # one side could not be captured: both fall back to the kernel sum
    why = mode.fallback or ref.fallback or "one side could not be captured"
    ref_k = DeviceClock(ref.trainer, "kernels", ref.steps, fallback=why, queue=ref.queue)
    mode_k = DeviceClock(mode.trainer, "kernels", mode.steps, fallback=why, queue=mode.queue)
    return ref_k.block, mode_k.block, "kernels", why


@dataclass(frozen=True)
class Clock:
    """How a ratio's two sides are timed: a fresh timer of both under a policy, one for each set of rounds
    (`timer`), and, in device time, by which method, why not by graph replay where that was wanted, and
    behind which hold (the queue both sides' blocks share)."""

    timer: Callable[[SpeedPolicy], PairedTimer]
    method: str | None = None  # one of METHODS in device time; None in wall-clock time
    fallback: str | None = None
    queue: BlockQueue | None = None  # ``ampbench.speed.held``; None off CUDA and in wall-clock time


def _block_steps(over: Side, mode: Side, policy: SpeedPolicy) -> tuple[int, int]:
    """Training steps per timed block of each side: each block long enough on its own."""
    return (steps_per_block(over.step_seconds, policy.block_seconds),
            steps_per_block(mode.step_seconds, policy.block_seconds))


def fresh_timer(over: Side, mode: Side, policy: SpeedPolicy) -> PairedTimer:
    """Interleaved wall-clock blocks of eager steps: what eager training gets on this host."""
    ref_steps, mode_steps = _block_steps(over, mode, policy)
    return PairedTimer(wall_block(over.trainer, ref_steps), wall_block(mode.trainer, mode_steps),
                       ref_steps, mode_steps)


def _paired_clocks(over: Side, mode: Side, ref_steps: int, mode_steps: int,
                   queue: BlockQueue | None = None) -> tuple[Callable[[], float], Callable[[], float], str, str | None]:
    return paired_blocks(clock_for(over.trainer, ref_steps, over.graph, over.capture_failure, queue),
                         clock_for(mode.trainer, mode_steps, mode.graph, mode.capture_failure, queue))


def conditions_reader(device: torch.device) -> tuple[Reader | None, str | None]:
    """NVML's reader of `device`'s card (``ampbench.nvml``), or None and why not."""
    if device.type != "cuda":
        return None, "no CUDA device"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return reader_for(card_uuid(device), index)


def device_clock(over: Side, mode: Side) -> Clock:
    """Both sides in device time, measured the same way (``paired_blocks``), behind one hold (CUDA); where its
    policy reads them, the card's conditions over each block (NVML's reads, taken by the hold's queue)."""
    device = over.trainer.device
    queue = BlockQueue(device) if device.type == "cuda" else None
    _, _, method, fallback = _paired_clocks(over, mode, 1, 1, queue)

    def timer(policy: SpeedPolicy) -> PairedTimer:
        ref_steps, mode_steps = _block_steps(over, mode, policy)
        ref_block, mode_block, _, _ = _paired_clocks(over, mode, ref_steps, mode_steps, queue)
        taken = None
        if queue is not None and policy.read_conditions:
            queue.reader = conditions_reader(device)[0]
            taken = (lambda: queue.last) if queue.reader is not None else None
        return PairedTimer(ref_block, mode_block, ref_steps, mode_steps, conditions=taken)
    return Clock(timer, method, fallback, queue)


def wall_clock(over: Side, mode: Side) -> Clock:
    """Both sides in wall-clock time (`fresh_timer`)."""
    return Clock(lambda policy: fresh_timer(over, mode, policy))


# a ratio's clock by the name its kind gives it (``RatioKind.clock``), made of the side the ratio is over and
# the mode's side
CLOCKS: dict[str, Callable[[Side, Side], Clock]] = {"device": device_clock, "wall": wall_clock}
