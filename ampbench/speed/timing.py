"""Timing a precision mode against the fp32 side: interleaved blocks of training steps in one
process, timed with CUDA events, with no host sync inside a timed block; and the device's synchronisation
around them (`sync`), kept quiet after a graph capture that failed half-way (`sync_quietly`,
`end_rng_capture`), which can leave an error and a generator still in capture behind."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ampbench import progress
from ampbench.nvml import BlockConditions
from ampbench.stats import (
    SpeedupEstimate,
    alternating,
    coverage_percent,
    estimate_speedup,
    median,
    min_rounds,
    over_first,
)
from ampbench.train import Trainer

PROBE_STEPS = 3  # the most steps warm_up's closing probe times


def time_block(device: torch.device, fn: Callable[[], object]) -> float:
    """Seconds `fn` keeps the device busy, from an idle device to the end of its last kernel."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def warm_up(trainer: Trainer, *, min_steps: int, min_seconds: float, probe_seconds: float = 0.1) -> float:
    """Train until cuDNN has tuned, the loss scaler has settled and the clocks are up; return the
    seconds per step measured at the end. Warm-up is real training: the SM clock idles low and only
    rises under load. The closing probe times up to PROBE_STEPS steps, no more than fit in about
    `probe_seconds`: it only sizes the timed blocks, and a 0.15 s fp32 step needs no three."""
    t0 = time.perf_counter()
    trainer.run(min_steps)
    sync(trainer.device)
    steps = min_steps
    while time.perf_counter() - t0 < min_seconds:
        more = max(1, steps // 2)
        trainer.run(more)
        sync(trainer.device)
        steps += more
    rough = (time.perf_counter() - t0) / steps  # host clock, syncs included: a size, not a figure
    probe = steps_per_block(rough, probe_seconds, max_steps=PROBE_STEPS)
    return time_block(trainer.device, lambda: trainer.run(probe)) / probe


def steps_per_block(step_seconds: float, target_seconds: float, max_steps: int = 64) -> int:
    """Steps in one timed block: enough that launch latency and event overhead are small against it."""
    return max(1, min(max_steps, math.ceil(target_seconds / max(step_seconds, 1e-9))))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def end_rng_capture(device: torch.device) -> None:
    """Take the CUDA random generator out of capture after a failed one. A capture that fails never
    reaches the generator's end-of-capture step, so every later random draw on the device (a model's
    initial weights) would fail with "Offset increment outside graph capture"; a trivial capture that
    succeeds runs that step."""
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.zeros(1, device=device).add_(1)
        del graph
    except Exception:  # noqa: BLE001 - the failed capture's own error is the one worth reporting
        sync_quietly(device)


def sync_quietly(device: torch.device) -> None:
    """Synchronize after a failed capture; a capture that failed half-way can leave an error behind."""
    try:
        sync(device)
    except Exception:  # noqa: BLE001 - the capture's own error is the one worth reporting
        pass


def wall_block(trainer: Trainer, steps: int) -> Callable[[], float]:
    """A block of `steps` eager training steps timed from an idle device to the end of its last
    kernel: what eager training gets on this host, launch overhead included; seconds per step."""
    return lambda: time_block(trainer.device, lambda: trainer.run(steps)) / steps


@dataclass
class PairedTimer:
    """Round k times one block of the side it is over and one of the mode, that side first in even rounds
    and mode first in odd ones, so drift and order effects fall on both sides alike (and the estimate
    takes the two orders as two groups: ``stats.order_aligned``). A block is any
    function that trains and returns seconds per step (``wall_block``, or a device clock's block);
    each holds enough steps that the ramp from an idle device is small against it."""

    over: Callable[[], float]  # one timed block of the side the ratio is over, seconds per step
    mode: Callable[[], float]  # one timed block of the mode, seconds per step
    ref_steps: int  # training steps per block of the side it is over
    mode_steps: int  # training steps per mode block: each side's block is long enough on its own
    ref_times: list[float] = field(default_factory=list)  # seconds per step, one per round
    mode_times: list[float] = field(default_factory=list)
    # the card's conditions over the block just timed (the last block of ``held.BlockQueue``), asked after each block
    # returns, outside its timed region; None where they are not read
    conditions: Callable[[], BlockConditions | None] | None = None
    ref_conditions: list[BlockConditions | None] = field(default_factory=list)  # one per round, where read
    mode_conditions: list[BlockConditions | None] = field(default_factory=list)

    @property
    def ref_first(self) -> list[bool]:
        """Which of its rounds so far ran the side it is over first."""
        return alternating(len(self.mode_times))

    def rounds(self, n: int) -> None:
        for _ in range(n):
            if over_first(len(self.mode_times)):
                self._timed(self.over, self.ref_times, self.ref_conditions)
                self._timed(self.mode, self.mode_times, self.mode_conditions)
            else:
                self._timed(self.mode, self.mode_times, self.mode_conditions)
                self._timed(self.over, self.ref_times, self.ref_conditions)
            if progress.active():
                so_far = median(self.ref_times) / median(self.mode_times)
                progress.update(f"round {len(self.mode_times)}, {so_far:.3f}x so far", often=True)

    def estimate(self, confidence: float) -> SpeedupEstimate:
        return estimate_speedup(self.ref_times, self.mode_times, confidence, self.ref_first)

    def _timed(self, block: Callable[[], float], times: list[float], conditions: list[BlockConditions | None]) -> None:
        times.append(block())
        if self.conditions is not None:
            conditions.append(self.conditions())


@dataclass(frozen=True)
class RoundsPolicy:
    """How many rounds a speedup gets: at least `min_rounds`, then more in steps of `step` until the
    interval's relative half-width is under `target_half_width` or a limit is hit."""

    min_rounds: int
    max_rounds: int
    target_half_width: float
    budget_seconds: float  # wall-clock limit for one set of rounds
    confidence: float = 0.99
    step: int = 4

    def __post_init__(self) -> None:
        need = min_rounds(self.confidence)
        if self.min_rounds < need:
            raise ValueError(f"min_rounds={self.min_rounds} cannot give a {coverage_percent(self.confidence)} "
                             f"interval; need {need}")
        if self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds={self.max_rounds} < min_rounds={self.min_rounds}")


def add_rounds_while(
    timer: PairedTimer,
    policy: RoundsPolicy,
    limit: int,
    keep_going: Callable[[SpeedupEstimate], bool],
    budget_seconds: float = math.inf,
) -> SpeedupEstimate:
    """Add rounds in steps of `policy.step` while `keep_going(estimate)`, up to `limit` rounds and
    `budget_seconds`; return the estimate over all of the timer's rounds."""
    t0 = time.perf_counter()
    est = timer.estimate(policy.confidence)
    while keep_going(est) and len(timer.mode_times) < limit and time.perf_counter() - t0 < budget_seconds:
        timer.rounds(min(policy.step, limit - len(timer.mode_times)))
        est = timer.estimate(policy.confidence)
    return est


def extend_until_tight(timer: PairedTimer, policy: RoundsPolicy) -> SpeedupEstimate:
    """At least the policy's first rounds, then more until the interval is tight enough or a limit
    is hit; the estimate over all of the timer's rounds."""
    t0 = time.perf_counter()
    if len(timer.mode_times) < policy.min_rounds:
        timer.rounds(policy.min_rounds - len(timer.mode_times))
    return add_rounds_while(
        timer, policy, policy.max_rounds, lambda est: est.half_width > policy.target_half_width,
        budget_seconds=policy.budget_seconds - (time.perf_counter() - t0),
    )


def peak_memory_bytes(trainer: Trainer, baseline_allocated: int, steps: int = 1) -> int | None:
    """Peak bytes of `steps` training steps attributable to `trainer`: the allocator's peak during them
    minus what was allocated before the trainer existed. None where the device keeps no statistics."""
    if trainer.device.type != "cuda":
        return None
    sync(trainer.device)
    torch.cuda.reset_peak_memory_stats(trainer.device)
    trainer.run(steps)
    sync(trainer.device)
    return torch.cuda.max_memory_allocated(trainer.device) - baseline_allocated
