"""The two sides of a speed cell, fp32's and the mode's: each trainer built, warmed up, captured as a
CUDA graph and profiled once (`prepare_side`), and the policy of their rounds (`policy_for`). The clocks
that time one against the other are ``ampbench.speed.clocks``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ampbench import settings as options
from ampbench.device import prime_libraries
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.speed.ahead import CacheReads
from ampbench.speed.devicetime import (
    BlockIdle,
    CapturedStep,
    CaptureError,
    KernelProfile,
    block_idle,
    capture,
    profile_steps,
)
from ampbench.speed.held import PROFILED_HOLD_S, BlockQueue
from ampbench.speed.timing import RoundsPolicy, peak_memory_bytes, steps_per_block, sync, warm_up
from ampbench.train import Trainer

# A figure reported beside the gate (the wall-clock speedup under --perf-gate device) is read, not judged:
# without a baseline it gets the fewest rounds of a 95% interval (six; a 99% one needs eight), in blocks
# half as long (SpeedPolicy.for_look). A recording keeps 99% and whole blocks: its interval becomes the
# stored noise.
LOOK_CONFIDENCE = 0.95


@dataclass(frozen=True)
class SpeedPolicy:
    warmup_steps: int  # training steps before anything is timed (cuDNN autotuning, scaler settling)
    warmup_seconds: float  # and at least this long, so the SM clock has left idle
    block_seconds: float  # target length of the faster side's timed block
    rounds: RoundsPolicy  # the first rounds (and the confirming ones)
    record_rounds: RoundsPolicy  # the second rounds that measure noise when recording a baseline
    extend_to: int  # rounds a straddling interval may grow to before it is called inconclusive
    first_look: int = 5  # rounds of a judged figure's first look (``sequential.schedule``)
    decide_seconds: float = 20.0  # and seconds of looks, per set of rounds, after which it is inconclusive
    # coverage of the interval of a figure that is reported but does not gate the cell (``first_look``)
    look_confidence: float = LOOK_CONFIDENCE
    # rounds added to a judged figure until its interval is tight (`rounds`' target), where off only a
    # straddling interval gets more: on where the interval is kept (a recording's noise is its half-width)
    tighten_judged: bool = False
    # share of `block_seconds` in the blocks of a reported figure's first look (``Ratio.time``): it is
    # read, not judged, and a half-length block still holds a fast step many times over
    look_block_share: float = 0.5
    # the card's clocks, throttle reasons and energy read from NVML around each device-time block
    # (``ampbench.nvml``, --perf-nvml)
    read_conditions: bool = False
    # when --perf-time-budget runs out (``time.monotonic``): a judged ratio's looks stop there, undecided
    # (``sequential.decide``); None: no budget
    deadline: float | None = None

    def for_look(self) -> "SpeedPolicy":
        """The policy of a reported figure's timer: shorter blocks; a recording keeps its own, since its
        look becomes the stored figure."""
        return self if self.tighten_judged else replace(self, block_seconds=self.block_seconds * self.look_block_share)


# --perf-rounds' and --perf-block-seconds' defaults (ampbench.settings says why), read here as speed.DEFAULT_*
DEFAULT_MIN_ROUNDS = options.DEFAULT_MIN_ROUNDS
DEFAULT_BLOCK_SECONDS = options.DEFAULT_BLOCK_SECONDS
# A recording's first rounds are at least this many: its interval sets the recorded noise, and
# with 8 rounds that interval is [min, max], which one stray round would set
RECORDING_MIN_ROUNDS = 12
# the fewest rounds of a fixed-size 99% interval: a figure without a baseline takes this many at least
FIXED_MIN_ROUNDS = 8
# Eager steps profiled once per side for its kernel list and device-busy time: at most this many, and no
# more than fit in one timed block (one step of a 0.1-0.2 s fp32 step holds every kernel of the step).
PROFILE_STEPS = 3

def policy_for(device: torch.device, min_rounds: int, tolerance: float,
               block_seconds: float = DEFAULT_BLOCK_SECONDS, recording: bool = False,
               deadline: float | None = None) -> SpeedPolicy:
    # a recording's first look at an unjudged figure becomes that figure's stored noise, read as 99%
    look = 0.99 if recording else LOOK_CONFIDENCE
    if device.type != "cuda":
        # the smoke pass checks the code path, not the CPU's speed: the fewest rounds that still give
        # a 99% interval, one set of them, no extension, and blocks of a few steps of the tiny smoke shapes
        # (the blocks' length was most of a small model's cell)
        smoke = RoundsPolicy(8, 8, 1.0, 5.0)
        return SpeedPolicy(2, 0.0, 0.002, smoke, smoke, 8, first_look=min(min_rounds, 8), look_confidence=look,
                           deadline=deadline)
    first_look = min_rounds
    # a figure without a baseline, and a recording, keep a fixed-size interval of at least 99%
    min_rounds = max(min_rounds, RECORDING_MIN_ROUNDS if recording else FIXED_MIN_ROUNDS)
    # each side's block is ~0.1 s by default, past an idle GPU's ramp (docs/design.md); fp32 steps are
    # longer than that, so their blocks are one step.
    return SpeedPolicy(
        # cuDNN tunes in the first step and the scaler's start-up overflows pass within a few; the
        # seconds keep a fast step warming up longer, and six to ten more eager steps (probe, peak,
        # capture, profile) come before the first timed block
        warmup_steps=3,
        warmup_seconds=0.15,
        block_seconds=block_seconds,
        rounds=RoundsPolicy(min_rounds, max_rounds=max(20, min_rounds),
                            target_half_width=tolerance / 2, budget_seconds=8.0),
        # the fewest rounds for a 99% interval: the noise it yields is, if anything, too high
        record_rounds=RoundsPolicy(8, 8, 1.0, 8.0),
        extend_to=max(48, min_rounds),
        first_look=first_look,
        look_confidence=look,
        tighten_judged=recording,
        deadline=deadline,
    )


@dataclass
class Side:
    """One trainer, warmed up, with what was learned about it on the way."""

    trainer: Trainer
    step_seconds: float  # per-step time at the end of warm-up, to size the timed blocks
    peak_bytes: int | None  # peak memory of one step attributable to this trainer (None off CUDA)
    prepare_seconds: float  # building and warming up, cuDNN's autotuning included
    graph: CapturedStep | None = None  # the step as a CUDA graph (CUDA only, where it could be captured)
    capture_failure: str | None = None  # why there is no graph, on CUDA
    profile: KernelProfile | None = None  # one profiled block of eager steps (CUDA only)
    idle: BlockIdle | None = None  # one profiled held block of graph replays: the GPU's idle time inside it
    # the first training step, synchronised: for a compiled mode, dynamo and Inductor compiling the step
    first_step_seconds: float | None = None
    # a compiled mode's first step read every graph from Inductor's cache (``speed.ahead``: compiled ahead)
    cache_read: bool = False
    compiled_ahead_s: float | None = None  # its cold compile, where a process compiled it ahead (``speed.ahead``)
    prepare_phases: dict[str, float] = field(default_factory=dict)  # prepare_seconds by phase, in order

    @property
    def compile_seconds(self) -> float | None:
        """Its cold compile: measured ahead where its first step read it from the cache, else that step;
        None where the step read the cache and nothing measured the compile (a cache read is no compile)."""
        if self.compiled_ahead_s is not None:
            return self.compiled_ahead_s
        return None if self.cache_read else self.first_step_seconds


def allocated_bytes(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def prepare_side(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool, policy: SpeedPolicy) -> Side:
    phases = Phases()
    prime_libraries(device)
    before = allocated_bytes(device)
    trainer = Trainer(spec, mode, device, smoke=smoke)
    reads = CacheReads() if mode.compile else None  # read before the first step's time starts
    phases.end("build")
    trainer.run(1)
    sync(device)
    first = phases.end("first_step")
    cached = reads is not None and reads.whole()
    step_seconds = warm_up(trainer, min_steps=policy.warmup_steps, min_seconds=policy.warmup_seconds)
    side = Side(trainer, step_seconds, peak_memory_bytes(trainer, before), 0.0, first_step_seconds=first,
                cache_read=cached)
    phases.end("warm_up")
    if device.type == "cuda":
        # the profiled eager steps before the capture: after it, their activations would be allocated beside
        # the graph's private pool, which holds as much again, and a side would need twice its step's peak
        # (an out-of-memory error on a card a cell's peaks fit)
        side.profile = profile_steps(trainer,
                                     steps_per_block(step_seconds, policy.block_seconds, max_steps=PROFILE_STEPS))
        phases.end("profile")
        # after the peak was taken: the graph's private memory pool is no part of the mode's step
        try:
            side.graph = capture(trainer)
        except CaptureError as exc:
            side.capture_failure = str(exc)
        phases.end("capture")
        if side.graph is not None:
            block = steps_per_block(step_seconds, policy.block_seconds)
            side.idle = block_idle(side.graph, block, BlockQueue(device, hold_s=PROFILED_HOLD_S))
            phases.end("idle")
    side.prepare_seconds, side.prepare_phases = phases.total, phases.seconds
    return side


class Phases:
    """Seconds between marks, by the name of the phase each mark ends: a side's preparation, a cell's
    phases (``speed.cell``'s ``phase_seconds``)."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def end(self, name: str) -> float:
        now = time.perf_counter()
        self.seconds[name], self.last = now - self.last, now
        return self.seconds[name]

    @property
    def total(self) -> float:
        return self.last - self.start


def parameters_fingerprint(trainer: Trainer) -> torch.Tensor:
    """A cheap device-side summary of the weights: changes whenever an optimizer step really lands."""
    return torch.stack([p.detach().float().sum() for p in trainer.model.parameters()])


def loss_scale(trainer: Trainer) -> float | None:
    """The scaler's current scale, or None for modes that do not scale the loss."""
    scaler: Any = trainer.scaler  # a GradScaler or the suite's own LossScaler, alike in these two calls
    return float(scaler.get_scale()) if scaler.is_enabled() else None
