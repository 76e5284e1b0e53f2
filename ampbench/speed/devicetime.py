"""Device time of a training step: what the GPU spends on it, with the launching host left out.

Two measurements, each of which held to 0.1-0.6% per round on an H100 where wall-clock blocks of the
same eager steps wandered 10-23% (the host could not launch kernels as fast as the GPU ran them):

- ``graph``: the whole training step captured once as a CUDA graph and replayed. A replay launches
  every kernel with one call, so its time is the GPU's critical path with no host in it. It needs
  capturable optimizers, the loss scaler's state on the device and autocast's weight-cast cache off
  during capture (``Trainer.capturing``). This is the primary figure.
- ``kernels``: the profiler's CUDA kernel (and memcpy/memset) durations summed over a block of eager
  steps: total GPU work, for any step that runs at all. Where kernels overlap (several streams, as
  in cuDNN's RNNs and the DPNs' concatenations) it exceeds the critical path. It is the fallback
  where a step cannot be captured, and one profiled block per side gives each cell its kernel list.

On the CPU there is no device apart from the host: device time is the wall time of the same blocks.
The clock that times a side's blocks by either is ``clocks.DeviceClock``; here are the captured step (with
a shared side's step captured again where its graph may point at freed memory, `recapture_shared`), the
profiled kernels and the idle time inside a held block.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from dataclasses import dataclass
from typing import Protocol

import torch

from ampbench.speed.held import TRIES, BlockQueue, events_around, launch_queue_depth
from ampbench.speed.timing import end_rng_capture, sync, sync_quietly
from ampbench.train import Trainer

# Kineto leaves CUPTI attached after a profiling session unless told to tear it down, and an attached
# CUPTI slows every later kernel launch: wall-clock blocks timed after a cell's profiled block would
# then time the profiler's leftovers (docs/design.md).
# Kineto reads this when it starts; a value the user set is kept.
os.environ.setdefault("TEARDOWN_CUPTI", "1")

# Eager steps on a side stream before capture: lazily created handles and workspaces must exist
# before capture, on the stream that captures (PyTorch's whole-network capture recipe).
SIDE_STREAM_WARMUP = 2
# Kernels a baseline keeps by name: the largest TOP_KERNELS, and past them every kernel of at least
# KEPT_SHARE of the step's kernel time (half the 0.5% tolerance floor: a new kernel big enough to fail a
# cell on its own is named in the kernel diff, not summed away), at most MAX_KERNELS in all; the rest
# are summed into one line.
TOP_KERNELS = 20
KEPT_SHARE = 0.0025
MAX_KERNELS = 60
REST = "(other kernels)"


def _balanced_strip(text: str, opening: str, closing: str) -> str:
    """`text` without every bracketed part, nested brackets included."""
    out, depth = [], 0
    for ch in text:
        if ch == opening:
            depth += 1
        elif ch == closing and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


@functools.lru_cache(maxsize=8192)  # a step launches the same few hundred names thousands of times
def normalise_kernel_name(name: str) -> str:
    """A kernel's name as it stays from run to run: C++ template arguments, parameter lists and the
    return type dropped, so ``void at::native::vectorized_elementwise_kernel<4, AUnaryFunctor<...>>
    (int, ...)`` becomes ``at::native::vectorized_elementwise_kernel``. Library kernel names
    (``sm90_xmma_gemm_..._tilesize128x128x64``) are kept whole: their tile shape is the choice of
    algorithm a regression may change, and so is the algorithm that CUTLASS kernels name in their
    wrapper's template argument (``cutlass::Kernel2<cutlass_80_..._128x2_tn_align8>``)."""
    # an anonymous namespace is no part of the name; stripped as a bracketed part it would leave
    # "at::native::::cunn_SoftMaxForward"
    name_ = name.replace("(anonymous namespace)::", "")
    wrapped = re.match(r"^(?:void\s+)?(cutlass::Kernel2?<\w+>)", name_)
    if wrapped:
        return wrapped.group(1)
    short = _balanced_strip(_balanced_strip(name_, "<", ">"), "(", ")").strip()
    short = re.sub(r"^(void|static|__global__)\s+", "", short)
    return re.sub(r"\s+", " ", short) or name


@dataclass(frozen=True)
class KernelProfile:
    """One profiled block of eager steps of one side, per step."""

    steps: int
    kernel_ms: float  # sum of every device activity's duration, per step: total GPU work
    busy_ms: float  # union of their intervals, per step: time the device was doing anything
    kernels: tuple[tuple[str, float], ...]  # (normalised name, ms per step), largest first

    def top(self, n: int = TOP_KERNELS) -> list[dict]:
        """The `n` largest kernels, then those of at least KEPT_SHARE of the kernel time (MAX_KERNELS
        in all), and the rest as one line: what a baseline entry and the history keep."""
        kept = n + sum(1 for _, ms in self.kernels[n:MAX_KERNELS] if ms >= KEPT_SHARE * self.kernel_ms)
        head = [{"name": k, "ms": round(ms, 5)} for k, ms in self.kernels[:kept]]
        rest = sum(ms for _, ms in self.kernels[kept:])
        if rest > 0:
            head.append({"name": REST, "ms": round(rest, 5)})
        return head


def _is_annotation(ev) -> bool:
    """Whether a profiler event on the GPU's timeline is a range (``record_function`` mirrored onto
    the device, as the optimizers' ``Optimizer.step#...``), not work the device did."""
    for probe in ("is_user_annotation", "activity_type"):
        method = getattr(ev, probe, None)
        if method is None:
            continue
        value = method()
        return bool(value) if probe == "is_user_annotation" else "annotation" in str(value)
    return ev.name().startswith(("Optimizer.", "ProfilerStep#"))


def _device_activities(prof) -> list[tuple[str, int, int]]:
    """(name, start ns, end ns) of every kernel, memcpy and memset the profiler saw on the GPU."""
    from torch.autograd import DeviceType

    out = []
    for ev in prof.profiler.kineto_results.events():
        if ev.device_type() != DeviceType.CUDA or _is_annotation(ev):
            continue
        out.append((ev.name(), ev.start_ns(), ev.start_ns() + ev.duration_ns()))
    return out


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def profile_steps(trainer: Trainer, steps: int, queue: BlockQueue | None = None) -> KernelProfile:
    """Profile `steps` eager training steps of `trainer` (CUDA only), behind `queue`'s hold where one
    is given. Not for a wall-clock block: the profiler slows the host; the durations it reports are the
    device's own."""
    from torch.profiler import ProfilerActivity, profile

    sync(trainer.device)
    # the device activities are read from Kineto's results directly; the profiler's own FunctionEvent
    # tree, which acc_events=True builds at exit, took most of a second per side for a ResNet-101 step
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        if queue is None:
            trainer.run(steps)
        else:
            queue.profiled(lambda: trainer.run(steps))
        sync(trainer.device)
    acts = _after_the_hold(_device_activities(prof))
    if not acts:
        raise RuntimeError("the profiler recorded no CUDA activity (is CUPTI available?)")
    per_name: dict[str, float] = {}
    for name, start, end in acts:
        key = normalise_kernel_name(name)
        per_name[key] = per_name.get(key, 0.0) + (end - start) / 1e6 / steps
    total = sum(per_name.values())
    busy = _union_ns([(a, b) for _, a, b in acts]) / 1e6 / steps
    ranked = tuple(sorted(per_name.items(), key=lambda kv: -kv[1]))
    return KernelProfile(steps, total, busy, ranked)


def _is_spin(name: str) -> bool:
    """The hold's spin kernel (``torch.cuda._sleep``): no part of the work it holds."""
    return "spin_kernel" in name


# A wait for the host is at least one launch long; the gaps a queued graph leaves between its own
# kernels and between replays are a few microseconds.
IDLE_GAP_NS = 50_000
# A block whose device idled longer than this share of it waited on something outside the block.
IDLE_WARN_SHARE = 0.001


@dataclass(frozen=True)
class BlockIdle:
    """What the profiler saw of one held block of graph replays: how long the GPU sat idle inside it."""

    span_ms: float  # first kernel's start to the last kernel's end
    idle_ms: float  # the sum of the gaps longer than IDLE_GAP_NS
    longest_gap_us: float  # the longest gap of all, counted or not
    queued: bool  # the block was queued whole behind the hold

    @property
    def share(self) -> float:
        return self.idle_ms / self.span_ms if self.span_ms > 0 else 0.0


def block_idle(graph: CapturedStep, steps: int, queue: BlockQueue) -> BlockIdle | None:
    """Profile one held block of `steps` replays of `graph` and measure the GPU's idle time inside it:
    the check that a held block leaves the host out. A block the host fell behind on is profiled again
    behind a longer hold, as a timed one is; None where the profiler saw no kernel of the block."""
    from torch.profiler import ProfilerActivity, profile

    device = graph.trainer.device
    steps = min(steps, graph.chunk_for(steps) or steps)  # one held chunk, where blocks are timed in chunks
    for _ in range(TRIES):
        sync(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            queued = queue.profiled(lambda: graph.replay(steps))
            sync(device)
        spans = [(a, b) for _, a, b in _after_the_hold(_device_activities(prof))]
        if queued and spans:
            break
    return idle_inside(spans, queued) if spans else None


def _after_the_hold(activities: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """A held block's activities, the hold's spin kernel ahead of them left out (a spin inside the
    block, as ``ampbench.slowdown`` injects, is work of the block and stays)."""
    ordered = sorted(activities, key=lambda act: act[1])
    while ordered and _is_spin(ordered[0][0]):
        ordered.pop(0)
    return ordered


def idle_inside(spans: list[tuple[int, int]], queued: bool) -> BlockIdle:
    """The idle time inside a block whose device activities ran over `spans` (start, end ns)."""
    spans = sorted(spans)
    idle, longest, end = 0, 0, spans[0][1]
    for a, b in spans[1:]:
        gap = a - end
        longest = max(longest, gap)
        if gap > IDLE_GAP_NS:
            idle += gap
        end = max(end, b)
    return BlockIdle((end - spans[0][0]) / 1e6, idle / 1e6, longest / 1e3, queued)


class CaptureError(RuntimeError):
    """A training step that cannot be captured as a CUDA graph; the message says why."""


class CapturedStep:
    """One training step of a warmed-up trainer captured as a CUDA graph, reading its batch from
    static buffers. Each replay first copies the next batch of the trainer's synthetic pools into
    them (two device copies, microseconds against a step), so replays cycle through the data as
    eager steps do: a graph replayed on one fixed batch would be memorised until fp16 overflows.
    Replays really train: they update the trainer's weights, optimizer state and loss scale in place.
    `error_mode` is ``torch.cuda.graph``'s ``capture_error_mode``: a distributed rank captures in
    "thread_local", since NCCL's watchdog thread queries events while the capture runs, which CUDA's
    default global mode counts against the capture."""

    def __init__(self, trainer: Trainer, error_mode: str = "global", stream: torch.cuda.Stream | None = None):
        self.trainer = trainer
        device = trainer.device
        self.inputs = trainer.input_pool[0].clone()
        self.targets = trainer.target_pool[0].clone()
        self.replays = 0
        self._chunks: dict[int, int | None] = {}  # block steps: the most replays one hold may cover
        side = stream if stream is not None else torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            trainer.run(SIDE_STREAM_WARMUP)
        torch.cuda.current_stream(device).wait_stream(side)
        sync(device)
        self.graph = torch.cuda.CUDAGraph()
        try:
            with trainer.capturing(), trainer.mode.math_flags(), warnings.catch_warnings():
                # replays run captured, which is what capturable optimizers are for
                warnings.filterwarnings("ignore", message=".*capturable=True.*")
                with torch.cuda.graph(self.graph, stream=stream, capture_error_mode=error_mode):
                    trainer.step(self.inputs, self.targets)
        except Exception as exc:  # any failure of capture means: measure this cell another way
            sync_quietly(device)
            end_rng_capture(device)
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise CaptureError(f"CUDA graph capture failed: {type(exc).__name__}: {first[:300]}") from exc
        self.replay(1)  # the first replay uploads the graph; keep it out of every timed block
        sync(device)

    def replay(self, steps: int) -> None:
        """Launch `steps` training steps; no host sync."""
        for _ in range(steps):
            self.next_batch()
            self.graph.replay()

    def next_batch(self) -> None:
        """Queue the copies of the next batch of the trainer's pools into the graph's inputs."""
        inputs, targets, k = self.trainer.input_pool, self.trainer.target_pool, self.replays
        self.inputs.copy_(inputs[k % len(inputs)], non_blocking=True)
        self.targets.copy_(targets[k % len(targets)], non_blocking=True)
        self.replays += 1

    def chunk_for(self, steps: int) -> int | None:
        """The most replays one held block of `steps` may queue: None where all of them fit the launch
        queue, else half of what the queue took (probed once per block size; the probe's replays train)."""
        if steps not in self._chunks:
            depth = launch_queue_depth(self.trainer.device, lambda: self.replay(1), steps)
            self._chunks[steps] = None if depth is None else max(1, depth // 2)
        return self._chunks[steps]

    def replay_each_timed(self, steps: int) -> float:
        """Seconds of `steps` replays, each between its own events (its input copies outside them), summed."""
        return events_around(self.next_batch, self.graph.replay, steps)


def capture(trainer: Trainer) -> CapturedStep:
    """`trainer`'s training step as a CUDA graph; CaptureError says why where it cannot be captured."""
    return CapturedStep(trainer)


def uses_rnn_dropout_state(model: torch.nn.Module) -> bool:
    """Whether a step of `model` runs a cuDNN RNN with dropout, whose state buffer is one per device."""
    return any(isinstance(m, torch.nn.RNNBase) and m.dropout > 0 for m in model.modules())


class Recapturable(Protocol):
    """What `recapture_shared` reads and sets of a side (``sides.Side``, which imports this module)."""

    trainer: Trainer
    graph: CapturedStep | None
    capture_failure: str | None


def recapture_shared(side: Recapturable) -> None:
    """Capture a shared side's step again (the fp32 side, a versus side) where its graph may point at
    freed memory.

    cuDNN's RNN dropout keeps one state buffer per device, and the first RNN step after any CUDA
    reseed (every Trainer seeds, so that all modes start from the same weights) frees it and allocates
    a new one. A graph captured before then still writes into the old buffer, memory the allocator has
    since handed to the next trainer, corrupting its weights (docs/design.md). So once the mode's trainer
    has stepped, the shared side is captured anew."""
    if side.graph is None or not uses_rnn_dropout_state(side.trainer.model):
        return
    side.graph = None
    try:
        side.graph = capture(side.trainer)
    except CaptureError as exc:
        side.capture_failure = str(exc)
