"""A speed cell from start to verdict: prepare both sides, time interleaved rounds, judge against
the baseline, and decide what to record. Pure harness: the pytest test only wires it up."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

import torch

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.store import measurement_mismatch
from ampbench.device import prime_libraries
from ampbench.speed.devicetime import (BlockIdle, CaptureError, CapturedStep, KernelProfile, block_idle, capture, clock_for,
                                 paired_blocks, profile_steps)
from ampbench.speed.held import BlockQueue
from ampbench import settings as options
from ampbench.modes import PrecisionMode
from ampbench.baselines.spread import software_difference
from ampbench.stats import SpeedupEstimate, across_runs, estimate_speedup, finite_number, relative_spread
from ampbench.stats import min_rounds as fewest_rounds
from ampbench.speed.timing import (
    PairedTimer,
    RoundsPolicy,
    add_rounds_while,
    extend_until_tight,
    peak_memory_bytes,
    steps_per_block,
    sync,
    wall_block,
    warm_up,
)
from ampbench.train import Trainer
from ampbench.verdict import SpeedupCheck, Verdict
from models.spec import ModelSpec


# A figure reported beside the gate (the wall-clock speedup under --perf-gate device) is read, not judged:
# it gets the fewest rounds of a 95% interval (six; a 99% one needs eight), a quarter off its blocks,
# which are a third of a full tier's time. A recording keeps 99%: its interval becomes the stored noise.
LOOK_CONFIDENCE = 0.95


@dataclass(frozen=True)
class SpeedPolicy:
    warmup_steps: int  # training steps before anything is timed (cuDNN autotuning, scaler settling)
    warmup_seconds: float  # and at least this long, so the SM clock has left idle
    block_seconds: float  # target length of the faster side's timed block
    rounds: RoundsPolicy  # rounds of the first (and of a confirming) batch
    record_rounds: RoundsPolicy  # rounds of the extra batch that measures noise when recording a baseline
    extend_to: int  # rounds a straddling interval may grow to before it is called inconclusive
    # coverage of the interval of a figure that is reported but does not gate the cell (``first_look``)
    look_confidence: float = LOOK_CONFIDENCE
    # rounds added to a judged figure until its interval is tight (`rounds`' target), where off only a
    # straddling interval gets more: on where the interval is kept (a recording's noise is its half-width)
    tighten_judged: bool = False


# --perf-rounds' and --perf-block-seconds' defaults (ampbench.settings says why), read here as speed.DEFAULT_*
DEFAULT_MIN_ROUNDS = options.DEFAULT_MIN_ROUNDS
DEFAULT_BLOCK_SECONDS = options.DEFAULT_BLOCK_SECONDS
# A recording's first batch has at least this many rounds: its interval sets the recorded noise, and
# with 8 rounds that interval is [min, max], which one stray round would set
RECORDING_MIN_ROUNDS = 12
# Eager steps profiled once per side for its kernel list and device-busy time: at most this many, and no
# more than fit in one timed block (one step of a 0.1-0.2 s fp32 step holds every kernel of the step).
PROFILE_STEPS = 3

def policy_for(device: torch.device, min_rounds: int, tolerance: float,
               block_seconds: float = DEFAULT_BLOCK_SECONDS, recording: bool = False) -> SpeedPolicy:
    # a recording's first look at an unjudged figure becomes that figure's stored noise, read as 99%
    look = 0.99 if recording else LOOK_CONFIDENCE
    if device.type != "cuda":
        # the smoke pass checks the code path, not the CPU's speed: the fewest rounds that still give
        # a 99% interval, one batch, no extension, and blocks of a few steps of the tiny smoke shapes
        # (the blocks' length was most of a small model's cell)
        smoke = RoundsPolicy(8, 8, 1.0, 5.0)
        return SpeedPolicy(2, 0.0, 0.002, smoke, smoke, 8, look_confidence=look)
    if recording:
        min_rounds = max(min_rounds, RECORDING_MIN_ROUNDS)
    # each side's block is ~0.1 s by default, past an idle GPU's ramp (docs/design.md); fp32 steps are
    # longer than that, so their blocks are one step.
    return SpeedPolicy(
        # cuDNN tunes in the first step and the scaler's start-up overflows pass within a few; the
        # seconds keep a fast step warming up longer, and six to ten more eager steps (probe, peak,
        # capture, profile) come before the first timed block
        warmup_steps=3,
        warmup_seconds=0.3,
        block_seconds=block_seconds,
        rounds=RoundsPolicy(min_rounds, max_rounds=max(20, min_rounds), target_half_width=tolerance / 2, budget_seconds=8.0),
        # the fewest rounds for a 99% interval: the noise it yields is, if anything, too high
        record_rounds=RoundsPolicy(8, 8, 1.0, 8.0),
        extend_to=max(48, min_rounds),
        look_confidence=look,
        tighten_judged=recording,
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


def allocated_bytes(device: torch.device) -> int:
    return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def prepare_side(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool, policy: SpeedPolicy) -> Side:
    t0 = time.perf_counter()
    prime_libraries(device)
    before = allocated_bytes(device)
    trainer = Trainer(spec, mode, device, smoke=smoke)
    t1 = time.perf_counter()
    trainer.run(1)
    sync(device)
    first = time.perf_counter() - t1
    step_seconds = warm_up(trainer, min_steps=policy.warmup_steps, min_seconds=policy.warmup_seconds)
    side = Side(trainer, step_seconds, peak_memory_bytes(trainer, before), 0.0, first_step_seconds=first)
    if device.type == "cuda":
        # after the peak was taken: the graph's private memory pool is no part of the mode's step
        try:
            side.graph = capture(trainer)
        except CaptureError as exc:
            side.capture_failure = str(exc)
        side.profile = profile_steps(trainer, steps_per_block(step_seconds, policy.block_seconds, max_steps=PROFILE_STEPS))
        if side.graph is not None:
            block = steps_per_block(step_seconds, policy.block_seconds)
            side.idle = block_idle(side.graph, block, BlockQueue(device))
    side.prepare_seconds = time.perf_counter() - t0
    return side


def uses_rnn_dropout_state(model: torch.nn.Module) -> bool:
    """Whether a step of `model` runs a cuDNN RNN with dropout, whose state buffer is one per device."""
    return any(isinstance(m, torch.nn.RNNBase) and m.dropout > 0 for m in model.modules())


def recapture_reference(reference: Side) -> None:
    """Capture the shared reference's step again where its graph may point at freed memory.

    cuDNN's RNN dropout keeps one state buffer per device, and the first RNN step after any CUDA
    reseed (every Trainer seeds, so that all modes start from the same weights) frees it and allocates
    a new one. A graph captured before then still writes into the old buffer, memory the allocator has
    since handed to the next trainer, corrupting its weights (docs/design.md). So once the mode's trainer
    has stepped, the reference is captured anew."""
    if reference.graph is None or not uses_rnn_dropout_state(reference.trainer.model):
        return
    reference.graph = None
    try:
        reference.graph = capture(reference.trainer)
    except CaptureError as exc:
        reference.capture_failure = str(exc)


def parameters_fingerprint(trainer: Trainer) -> torch.Tensor:
    """A cheap device-side summary of the weights: changes whenever an optimizer step really lands."""
    return torch.stack([p.detach().float().sum() for p in trainer.model.parameters()])


def loss_scale(trainer: Trainer) -> float | None:
    """The scaler's current scale, or None for modes that do not scale the loss."""
    scaler = trainer.scaler
    return float(scaler.get_scale()) if scaler.is_enabled() else None


def _block_steps(reference: Side, mode: Side, policy: SpeedPolicy) -> tuple[int, int]:
    """Training steps per timed block of each side: each block long enough on its own."""
    return (steps_per_block(reference.step_seconds, policy.block_seconds),
            steps_per_block(mode.step_seconds, policy.block_seconds))


def fresh_timer(reference: Side, mode: Side, policy: SpeedPolicy) -> PairedTimer:
    """Interleaved wall-clock blocks of eager steps: what eager training gets on this host."""
    ref_steps, mode_steps = _block_steps(reference, mode, policy)
    return PairedTimer(wall_block(reference.trainer, ref_steps), wall_block(mode.trainer, mode_steps),
                       ref_steps, mode_steps)


def _paired_clocks(reference: Side, mode: Side, ref_steps: int, mode_steps: int, queue: BlockQueue | None = None):
    return paired_blocks(clock_for(reference.trainer, ref_steps, reference.graph, reference.capture_failure, queue),
                         clock_for(mode.trainer, mode_steps, mode.graph, mode.capture_failure, queue))


@dataclass(frozen=True)
class DeviceTiming:
    """How a cell's device time is measured: both sides the same way, behind one hold (CUDA)."""

    method: str  # "graph", "kernels" or "wall" (ampbench.speed.devicetime.METHODS)
    fallback: str | None  # why not by graph replay, where graph replay was wanted
    queue: BlockQueue | None = None  # how the cell's blocks were queued (``ampbench.speed.held``); None off CUDA

    def timer(self, reference: Side, mode: Side, policy: SpeedPolicy) -> PairedTimer:
        ref_steps, mode_steps = _block_steps(reference, mode, policy)
        ref_block, mode_block, _, _ = _paired_clocks(reference, mode, ref_steps, mode_steps, self.queue)
        return PairedTimer(ref_block, mode_block, ref_steps, mode_steps)


def device_timing(reference: Side, mode: Side) -> DeviceTiming:
    device = reference.trainer.device
    queue = BlockQueue(device) if device.type == "cuda" else None
    _, _, method, fallback = _paired_clocks(reference, mode, 1, 1, queue)
    return DeviceTiming(method, fallback, queue)


# A projection of the rounds needed is rough (from a few rounds' spread; from an interval of few rounds,
# which is wider than one over the square root of the rounds predicts, where no spread is known: up to
# ~1.6x at 8 rounds), so a cell is extended while it projects no more than twice the limit.
PROJECTION_SLACK = 2.0


def extend_while_straddling(timer: PairedTimer, check: SpeedupCheck, policy: SpeedPolicy) -> SpeedupEstimate:
    """Add rounds while the interval straddles the line and more rounds could still take it off: an
    estimate that sits on the line (a card a hair slower than the baseline's) stays inconclusive at any
    count, and was extended to the limit for nothing, 10 s and more per cell."""
    def worth_more(est: SpeedupEstimate) -> bool:
        return (check.classify(est) is Verdict.INCONCLUSIVE
                and check.rounds_to_resolve(est) <= PROJECTION_SLACK * policy.extend_to)
    return add_rounds_while(timer, policy.rounds, policy.extend_to, worth_more)


@dataclass
class SpeedOutcome:
    estimate: SpeedupEstimate  # the first batch's estimate (after any extension)
    verdict: Verdict
    confirmation: SpeedupEstimate | None  # the second, independent batch, when one ran
    message: str

    def fields(self, prefix: str, check: SpeedupCheck | None, verdict_key: str | None = None) -> dict:
        """The ratio's estimate and verdict under a speed record's names with `prefix` ("device_",
        "versus_"; the wall-clock speedup's have none, and its verdict is `verdict_key` wall_verdict)."""
        est = self.estimate
        return {f"{prefix}speedup": est.speedup, f"{prefix}speedup_low": est.low, f"{prefix}speedup_high": est.high,
                f"{prefix}rounds": est.rounds, f"{prefix}confidence": est.confidence,
                f"{prefix}baseline_speedup": check.expected if check else None,
                f"{prefix}tolerance": check.tolerance if check else None,
                f"{prefix}line": check.line if check else None, f"{prefix}drop": check.drop(est) if check else None,
                f"{prefix}confirm_speedup": self.confirmation.speedup if self.confirmation else None,
                verdict_key or f"{prefix}verdict": self.verdict}


def judge(
    check: SpeedupCheck | None,
    first: PairedTimer,
    policy: SpeedPolicy,
    second_batch: Callable[[], SpeedupEstimate],
) -> SpeedOutcome:
    """A regression only when the whole interval lies below the line and a second independent batch
    of rounds agrees; a straddling interval is extended, then inconclusive.

    An interval wholly on one side of the line is a verdict at any width, so a judged figure takes its
    first batch's rounds and no more (tightening it costs time on cells that pass: docs/design.md).
    Without a baseline, and in a recording
    (`policy.tighten_judged`), whose interval becomes the stored noise, rounds are added until the
    interval is half as wide as the cell's own tolerance: a cell whose runs spread further needs no
    tighter interval than its line allows."""
    rounds = policy.rounds
    if check is not None:
        rounds = replace(rounds, target_half_width=max(rounds.target_half_width, check.tolerance / 2))
        if not policy.tighten_judged:
            rounds = replace(rounds, max_rounds=rounds.min_rounds)
    est = extend_until_tight(first, rounds)
    if check is None:
        return SpeedOutcome(est, Verdict.NO_BASELINE, None, f"speedup {est}; no baseline for this GPU")
    verdict = check.classify(est)
    if verdict is Verdict.INCONCLUSIVE:
        est = extend_while_straddling(first, check, policy)
        verdict = check.classify(est)
    confirmation = None
    if verdict is Verdict.REGRESSION:
        confirmation = second_batch()
        again = check.classify(confirmation)
        if again is not Verdict.REGRESSION:  # two batches disagree: not a confirmed regression
            verdict = Verdict.INCONCLUSIVE
    message = check.describe(est)
    if confirmation is not None:
        message += f"; confirming batch {confirmation}"
    return SpeedOutcome(est, verdict, confirmation, message)


def first_look(check: SpeedupCheck | None, timer: PairedTimer, policy: SpeedPolicy) -> SpeedOutcome:
    """The first batch's estimate and how it compares, for a figure that is reported but does not
    gate the cell: the fewest rounds of an interval of `policy.look_confidence`, no extension, no
    confirming batch."""
    rounds = fewest_rounds(policy.look_confidence)
    if len(timer.mode_times) < rounds:
        timer.rounds(rounds - len(timer.mode_times))
    est = timer.estimate(policy.look_confidence)
    if check is None:
        return SpeedOutcome(est, Verdict.NO_BASELINE, None, f"speedup {est}; no baseline for this GPU")
    return SpeedOutcome(est, check.classify(est), None, check.describe(est))


@dataclass
class TimedFigure:
    """One ratio of a cell, timed: its first timer, any further batches (a confirming one, a recording's
    noise batch), and how it compares with its baseline."""

    first: PairedTimer
    make_timer: Callable[[], PairedTimer]  # a fresh timer of the same two sides, for another batch
    extra: list[PairedTimer]
    outcome: SpeedOutcome | None = None

    def again(self, rounds: RoundsPolicy) -> SpeedupEstimate:
        """Another independent batch of rounds, kept in `extra`."""
        self.extra.append(self.make_timer())
        return extend_until_tight(self.extra[-1], rounds)

    def recording(self, policy: SpeedPolicy, previous: float | None,
                  comparable: bool) -> tuple[SpeedupEstimate, float]:
        """What a baseline recording stores of the ratio: its batches pooled (a second one timed first
        where none ran), and its noise (``recorded_noise``, against `previous`, the entry's figure, where
        `comparable`)."""
        if not self.extra:
            self.again(policy.record_rounds)
        conf = policy.rounds.confidence
        second = self.extra[0]
        return (pooled_estimate(self.first, second, conf),
                recorded_noise(self.outcome.estimate, second.estimate(conf), previous, comparable))

    def release(self) -> None:
        """Drop the timers, and with them the closures that hold both sides' trainers."""
        self.first = self.make_timer = None
        self.extra.clear()


def time_figure(check: SpeedupCheck | None, make_timer: Callable[[], PairedTimer], policy: SpeedPolicy,
                gated: bool) -> TimedFigure:
    """Time one ratio: judged (extended, confirmed) where it gates the cell, else its first look."""
    figure = TimedFigure(make_timer(), make_timer, [])
    figure.outcome = (judge(check, figure.first, policy, lambda: figure.again(policy.rounds)) if gated
                      else first_look(check, figure.first, policy))
    return figure


def across_runs_of(est: SpeedupEstimate, between_run_sd: float | None) -> SpeedupEstimate | None:
    """`est` with its interval widened by the between-run spread its baseline entry learned from
    saved runs (``ampbench spread``), or None where the entry has none. The verdict does not use it:
    its tolerance already allows for the baseline's run being another; this is the interval to hold
    another run's speedup against."""
    between = finite_number(between_run_sd)
    return None if between is None else across_runs(est, between)


def describe_across(across: SpeedupEstimate, count: int | None) -> str:
    return (f"[{across.low:.3f}, {across.high:.3f}] (between-run sd {across.between_run_sd:.1%} from "
            f"{'?' if count is None else count} runs)")


def comparable_recording(previous: SpeedEntry | None, previous_software: dict | None, software: dict,
                         measured_with: dict[str, object]) -> bool:
    """Whether a previous baseline entry measured what this recording measures: the same software in each
    layer the entry names (``software_difference``), and the same settings (``measurement_mismatch``)."""
    return (previous is not None and software_difference(previous_software or {}, software) is None
            and measurement_mismatch(previous, measured_with) is None)


def recorded_noise(first: SpeedupEstimate, second: SpeedupEstimate, previous: float | None,
                   comparable: bool) -> float:
    """The noise a baseline is stored with, from robust figures only: the first batch's interval
    (>= 12 rounds, so one stray round cannot set it), how far the medians of the two batches lie
    apart, and, when the entry is re-recorded `comparable`-ly (the same software, measured the same
    way), how far this recording lies from the previous one, so recording twice teaches the suite a
    cell's run-to-run spread. A previous entry measured otherwise (cuDNN autotuning against its
    heuristics) differs by a shift, not by noise, and is not counted (docs/design.md).

    The second batch's own interval is left out: with its 8 rounds it is [min, max], which one stray
    round sets. An old entry's noise is not carried over either, so a noisy recording does not loosen a
    cell for ever.
    """
    noise = max(first.half_width, relative_spread(first.speedup, second.speedup))
    if comparable and finite_number(previous):
        pooled = (first.speedup * second.speedup) ** 0.5
        noise = max(noise, relative_spread(pooled, previous))
    return noise


def pooled_estimate(a: PairedTimer, b: PairedTimer, confidence: float) -> SpeedupEstimate:
    return estimate_speedup(a.ref_times + b.ref_times, a.mode_times + b.mode_times, confidence,
                            ref_first=a.ref_first + b.ref_first)
