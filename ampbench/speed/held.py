"""Device-time blocks queued whole before the GPU starts on them.

A timed block of graph replays is a start event, the replays and an end event. Launched as they come,
the GPU starts on the first replay while the host is still launching the rest, and a host thread that is
preempted mid-block (a busy CI host, a container at its CPU quota) leaves the GPU waiting inside the
block: the wait counts as device time. So every block is held: a spin kernel goes on the stream ahead of
the start event, and the whole block is launched behind it while the GPU spins. Once the end event is
launched the host asks whether the GPU has reached the start event yet; if it has not, every launch of
the block was queued before the GPU began it, and nothing the host does from then on can enter the
figure. That question is asked of every block, so the guarantee is checked, not assumed.

A block that missed (the host was away longer than the hold) is timed again behind a hold twice as long.
The stream's launch queue holds only so many launches: a block of some graphs (on an H100, mlp's and
wide_resnet28_10's in some 16-bit modes) fills it before the hold ends, and then the host itself waits on the
GPU, so no hold is long enough. Such a graph's depth is probed once (``launch_queue_depth``) and its
blocks are timed in held chunks that fit, their times summed: each chunk is back-to-back replays queued
whole, and only the few microseconds between chunks are left out. A block that still cannot be queued
ahead falls back to events around each replay, summed, which leave out any wait between replays; the
cell's record says so (``device_queue``). Events around each replay were the alternative for every
block; the hold keeps the figure the one the baselines hold (back-to-back replays, the GPU's ramp
between steps included) and adds one event pair per chunk, not one per step.

Where the queue has an NVML reader (``ampbench.nvml``), each held chunk is read twice: once the GPU has left
the hold and begun the chunk, and after the end event is synchronized. Both reads come after the whole
chunk was queued, so nothing the host does in them can enter the figure (the guarantee above), and NVML asks
the driver, never the stream: the reads add no work to the timed region. A block's reads are `last`.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from ampbench.gate.measurement import QueueStats
from ampbench.nvml import BlockConditions, Reader, Reading

# The shortest hold: a few graph launches of a short step take tens of microseconds, and a hold far
# longer than the launches costs only its own length in wall time per block.
HOLD_FLOOR_S = 0.001
# A hold covers this many times the host time the last block's launches took.
HOLD_MARGIN = 4.0
# Tries of one block behind ever longer holds before it is timed by events around each replay.
TRIES = 5
HOLD_CEILING_S = 0.25  # longer than any preemption a loaded host showed; a longer wait means a full queue
# The hold behind which the launch queue's depth is probed: longer than a block's launches take.
PROBE_HOLD_S = 0.05
# The first hold of a block profiled for its idle time: under the profiler every launch is slower, a
# floor-length hold missed, and each miss cost one more profiler session (up to TRIES of them per side).
PROFILED_HOLD_S = PROBE_HOLD_S
# A launch call that returns after the GPU left the hold and took this long waited for room in the queue.
BLOCKED_S = 0.005

_CYCLES_PER_S: dict[int, float] = {}


def spin_cycles_per_second(device: torch.device) -> float:
    """Clock cycles of ``torch.cuda._sleep`` per second on `device`, measured once per device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _CYCLES_PER_S:
        with torch.cuda.device(index):
            torch.cuda._sleep(10_000_000)  # wake the clock before counting its cycles
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(50_000_000)
            end.record()
            end.synchronize()
            _CYCLES_PER_S[index] = 50_000_000 / (start.elapsed_time(end) / 1e3)
    return _CYCLES_PER_S[index]


def spin(device: torch.device, seconds: float) -> None:
    """Queue a kernel that keeps the current stream busy for about `seconds`."""
    torch.cuda._sleep(max(1, int(seconds * spin_cycles_per_second(device))))


class BlockQueue:
    """Times blocks of one cell's device work behind a hold (both sides share one, so both are timed
    the same way); `stats` says how they were queued."""

    def __init__(self, device: torch.device, hold_s: float = HOLD_FLOOR_S):
        self.device = device
        self.stats = QueueStats(hold_s=hold_s)
        self.fallen_back = False
        self.reader: Reader | None = None  # NVML's, where the card's conditions are read (``ampbench.nvml``)
        self.last: BlockConditions | None = None  # the last block's conditions, where read
        self._reads: list[tuple[Reading, Reading]] = []  # (start, end) of each held chunk of the block so far

    def _began(self, start: torch.cuda.Event) -> Reading | None:
        """The card's state once it has left the hold and begun the block (the block is queued whole: this
        wait and the read are host time outside the figure); None where nothing is read."""
        if self.reader is None:
            return None
        while not start.query():
            time.sleep(0.0001)
        return self.reader.read()

    def time(self, launch: Callable[[], object]) -> tuple[float, bool]:
        """Seconds from the start to the end event of one held block of `launch`'s work, and whether
        the whole block was queued before the GPU began it (one try, no retry)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        spin(self.device, self.stats.hold_s)
        t0 = time.perf_counter()
        start.record()
        launch()
        end.record()
        queued = not start.query()  # the GPU was still spinning when the last launch was queued
        launched_s = time.perf_counter() - t0
        began = self._began(start) if queued else None
        end.synchronize()
        if began is not None and self.reader is not None:
            self._reads.append((began, self.reader.read()))  # after the end event: the block is done
        self.stats.launch_s = max(self.stats.launch_s, launched_s)
        # the next hold covers these launches with room to spare; after a miss, at least twice this one
        grown = HOLD_MARGIN * launched_s if queued else max(2 * self.stats.hold_s, HOLD_MARGIN * launched_s)
        self.stats.hold_s = min(HOLD_CEILING_S, max(self.stats.hold_s, grown))
        return start.elapsed_time(end) / 1e3, queued

    def replays(self, launch: Callable[[int], object], steps: int, per_replay: Callable[[int], float],
                chunk: int | None = None) -> float:
        """Seconds of one block of `steps` replays (`launch(n)` queues n of them): held and queued whole,
        in held chunks of at most `chunk` replays where a whole block does not fit the launch queue,
        each timed again behind longer holds where the host fell behind; else `per_replay(n)` (events
        around each replay, summed) for what is left, with the reason kept."""
        self.stats.blocks += 1
        self._reads = []
        size = steps if chunk is None else max(1, min(chunk, steps))
        total, done = 0.0, 0
        while not self.fallen_back and done < steps:
            n = min(size, steps - done)
            seconds = self._held(lambda: launch(n))
            if seconds is None:
                self.fallen_back = True
                self.stats.why = (f"a block could not be queued whole behind holds of up to "
                                  f"{self.stats.hold_s * 1e3:.0f} ms (the launch queue fills, or the host is away "
                                  "longer)")
                break
            total, done = total + seconds, done + n
        # a block partly timed by events around each replay has reads of part of it only: none is kept
        self.last = BlockConditions.of(self._reads) if done == steps else None
        if done == steps:
            self.stats.held += 1
            if size < steps:
                self.stats.chunk = size if self.stats.chunk is None else min(size, self.stats.chunk)
            return total
        self.stats.per_replay += 1
        return total + per_replay(steps - done)

    def _held(self, launch: Callable[[], object]) -> float | None:
        """Seconds of `launch`'s work queued whole behind a hold, tried again behind longer holds; None
        where no try queued it whole."""
        for _ in range(TRIES):
            seconds, queued = self.time(launch)
            if queued:
                return seconds
            self.stats.retried += 1
        return None

    def profiled(self, launch: Callable[[], object]) -> bool:
        """Launch `launch`'s work behind a hold, untimed (the profiler reads its kernels); whether it was
        queued whole. A profiled block is not retried: a kernel's own duration has no host in it."""
        self.stats.blocks += 1
        self._reads = []
        _, queued = self.time(launch)
        self.last = BlockConditions.of(self._reads)
        if queued:
            self.stats.held += 1
        return queued


def launch_queue_depth(device: torch.device, launch_one: Callable[[], object], most: int,
                       launch_all: bool = False) -> int | None:
    """How many launches of `launch_one` the stream's launch queue takes behind a hold before the host
    must wait for the GPU to make room; None where `most` went in while the GPU still held (or the
    launches outlasted the hold: a hold's length, not the queue, is what they need). `launch_all`: all
    `most` are launched whatever the answer, as the ranks of a distributed cell must launch alike."""
    spin(device, PROBE_HOLD_S)
    left_hold = torch.cuda.Event()
    left_hold.record()
    depth, seen = None, False
    try:
        for i in range(most):
            t0 = time.perf_counter()
            launch_one()
            if not seen and left_hold.query():
                seen = True
                depth = i if time.perf_counter() - t0 > BLOCKED_S else None
                if not launch_all:
                    break
        return depth
    finally:
        torch.cuda.synchronize(device)


def events_around(before: Callable[[], None], launch: Callable[[], None], steps: int) -> float:
    """Seconds of `steps` launches timed one by one between events and summed, each after its own
    untimed `before` (a replay's input copies): any wait between launches is left out. The fallback
    where a block cannot be queued whole."""
    pairs = []
    for _ in range(steps):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        pairs.append((start, end))
    pairs[-1][1].synchronize()
    return sum(s.elapsed_time(e) for s, e in pairs) / 1e3
