"""A distributed cell's device time from CUDA graphs: each rank's training step, its collectives
included, captured once and replayed in blocks queued whole behind a hold, every rank's block started
together.

An eager DDP or FSDP2 step launches hundreds of kernels from the host, and a rank whose host falls behind
keeps its peers spinning in their collectives: that wait is busy time on their GPUs, so the profiler's
busy time of eager steps carries every host's hiccups (rounds 1-6 ms above a 30 ms floor in GPT's
mixed-precision DDP step on two H100s). A replayed graph launches the whole step with one call, so no
rank's host is inside a block once it is queued; the ranks' blocks start behind holds of the same
length after a barrier, and what is left of one rank waiting for another is the barrier's skew, once per
block. ``figures.per_round_min`` takes, per round, the rank that waited least.

NCCL captures collectives into a graph (2.9.6 on). What a rank's capture needs:
- a stream of its own for everything the rank runs (``own_stream``), on which it captures too. DDP's
  reducer keeps every parameter's gradient accumulator, and the autograd engine runs an accumulator on
  the stream it was made on: DDP built on the legacy default stream puts work there during backward,
  which no capture may do ("operation failed due to a previous error during capture");
- CUDA's "thread_local" capture mode, since the process group's watchdog thread queries events while
  the capture runs;
- DDP's first iterations eager: it collects runtime statistics there, with host syncs
  (``EAGER_BEFORE_CAPTURE``).
A rank whose capture fails says why, every rank learns it, and all of them measure the profiler's busy
time of eager steps instead: both sides of a cell and every rank are measured alike.

Every decision that sets what the ranks launch (whether a block counts, the hold's length, falling back
to events around each replay) is agreed by all ranks (``ranks.agree_max``): a rank that timed a block
again alone would leave the others waiting in a collective.
"""

from __future__ import annotations

from typing import Callable

import torch

from ampbench.distributed.ranks import agree_max, gather_text, together
from ampbench.speed.devicetime import SIDE_STREAM_WARMUP, CapturedStep, CaptureError
from ampbench.speed.held import TRIES, BlockQueue, launch_queue_depth
from ampbench.train import Trainer

# torch.cuda.graph's capture_error_mode for a rank (see the module's docstring)
CAPTURE_ERROR_MODE = "thread_local"
# DDP times its first ten iterations for its runtime statistics with host syncs, which a capture forbids
# (PyTorch's CUDA-graphs notes ask for 11 eager DDP iterations before capture), and every hundredth after
EAGER_BEFORE_CAPTURE = 11
DDP_STATS_EVERY = 100


def own_stream(device: torch.device) -> None:
    """Make a new stream this process's current one on `device` (see the module's docstring)."""
    torch.cuda.set_stream(torch.cuda.Stream(device))


def eager_before_capture(steps_taken: int) -> int:
    """Eager steps a side takes before its capture, so that DDP times none of its iterations there: the
    captured step is the one after ``devicetime.SIDE_STREAM_WARMUP`` more."""
    extra = max(0, EAGER_BEFORE_CAPTURE - steps_taken)
    captured = steps_taken + extra + SIDE_STREAM_WARMUP + 1  # DDP counts its iterations from 1
    return extra + (1 if captured % DDP_STATS_EVERY == 0 else 0)


def capture_sides(sides: tuple[Trainer, ...]) -> tuple[tuple[CapturedStep, ...] | None, str | None]:
    """Each side's step captured as a CUDA graph on every rank, or (None, why) where any rank's capture
    of any side failed: the failing ranks' reasons, named by rank."""
    graphs: list[CapturedStep] = []
    whys: list[str] = []
    # every side is tried on every rank, after one failed too: the eager steps before each capture run
    # collectives, which every rank must launch alike
    for side in sides:
        eager = eager_before_capture(side.steps_taken)  # every rank has taken as many steps
        if eager:
            side.run(eager)
        together(side.device)
        try:
            graphs.append(CapturedStep(side, CAPTURE_ERROR_MODE, torch.cuda.current_stream(side.device)))
        except CaptureError as exc:
            whys.append(str(exc))
    reasons = gather_text("; ".join(whys) or None)
    failed = [f"rank {r}: {text}" for r, text in enumerate(reasons) if text]
    if failed:
        return None, "; ".join(failed)
    return tuple(graphs), None


class RankedReplays:
    """Held blocks of graph replays (``ampbench.speed.held``) that every rank times together; one
    queue for both sides of a cell, so both are timed the same way. Where a block does not fit the
    stream's launch queue (a DDP step's graph of GPT filled it at 5 replays on an H100), it is timed in
    held chunks that do, the chunk's size the least any rank's queue took."""

    def __init__(self, device: torch.device):
        self.device = device
        self.queue = BlockQueue(device)
        self.fallen_back = False
        self.chunks: dict[tuple[int, int], int] = {}  # (graph, block steps): replays one hold covers

    def chunk_for(self, graph: CapturedStep, steps: int) -> int:
        """The most replays one hold covers: all `steps` unless some rank's launch queue fills first
        (probed once per graph and block size; every rank launches all the probe's replays)."""
        key = (id(graph), steps)
        if key not in self.chunks:
            together(self.device)
            depth = launch_queue_depth(self.device, lambda: graph.replay(1), steps, launch_all=True)
            fits = steps if depth is None else max(1, depth // 2)
            self.chunks[key] = int(-agree_max(-fits, self.device))
        return self.chunks[key]

    def block(self, graph: CapturedStep, steps: int) -> float:
        """Seconds per step of one block of `steps` replays of `graph`."""
        stats = self.queue.stats
        stats.blocks += 1
        if not self.fallen_back:
            chunk = self.chunk_for(graph, steps)
            for _ in range(TRIES):
                seconds = self._try(graph, steps, chunk)
                if seconds is not None:
                    stats.held += 1
                    if chunk < steps:
                        stats.chunk = chunk if stats.chunk is None else min(chunk, stats.chunk)
                    return seconds / steps
                stats.retried += 1
            self.fallen_back = True
            stats.why = (f"a block could not be queued whole on every rank behind holds of up to "
                         f"{stats.hold_s * 1e3:.0f} ms (the launch queue fills, or a host is away longer)")
        stats.per_replay += 1
        together(self.device)
        return graph.replay_each_timed(steps) / steps

    def _try(self, graph: CapturedStep, steps: int, chunk: int) -> float | None:
        """One block in held chunks, every rank's behind the same hold; its seconds where every rank
        queued every chunk whole, else None on all."""
        stats = self.queue.stats
        hold = agree_max(stats.hold_s, self.device)
        together(self.device)
        total, queued, done, grown = 0.0, True, 0, hold
        while done < steps:
            n = min(chunk, steps - done)
            stats.hold_s = hold  # each chunk behind the agreed hold, not the one its predecessor grew
            seconds, ok = self.queue.time(lambda: graph.replay(n))
            total, queued, done, grown = total + seconds, queued and ok, done + n, max(grown, stats.hold_s)
        stats.hold_s = grown  # the next try's hold, once the ranks agree on it
        return total if agree_max(0.0 if queued else 1.0, self.device) == 0.0 else None

    def timed(self, graph: CapturedStep, steps: int) -> Callable[[], float]:
        """A block function for ``timing.PairedTimer``."""
        return lambda: self.block(graph, steps)

    def describe(self) -> str:
        return self.queue.stats.describe()
