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
A block that cannot be queued ahead at all (the launch queue fills before the hold ends, so the host
itself waits on the GPU) falls back to events around each replay, summed, which leave out any wait
between replays; the cell's record says so (``device_queue``). Events around each replay were the
alternative for every block; the hold keeps the figure the one the baselines hold (back-to-back
replays, the GPU's ramp between steps included) and adds one event pair per block, not one per step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

# The shortest hold: a few graph launches of a short step take tens of microseconds, and a hold far
# longer than the launches costs only its own length in wall time per block.
HOLD_FLOOR_S = 0.001
# A hold covers this many times the host time the last block's launches took.
HOLD_MARGIN = 4.0
# Tries of one block behind ever longer holds before it is timed by events around each replay.
TRIES = 5
HOLD_CEILING_S = 0.25  # longer than any preemption a loaded host showed; a longer wait means a full queue

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


@dataclass
class QueueStats:
    """How a cell's device blocks were queued: what its record says of them."""

    blocks: int = 0  # blocks timed
    held: int = 0  # of which queued whole behind a hold
    retried: int = 0  # tries that missed and were timed again
    per_replay: int = 0  # blocks timed by events around each replay
    hold_s: float = HOLD_FLOOR_S  # the hold's length now
    launch_s: float = 0.0  # the longest host time one block's launches took
    why: str | None = None  # why blocks fell back to events around each replay

    def describe(self) -> str:
        if self.blocks == 0:
            return "no block timed"
        text = f"{self.held} of {self.blocks} blocks queued whole behind a hold (up to {self.hold_s * 1e3:.1f} ms)"
        if self.retried:
            text += f", {self.retried} timed again after the host fell behind"
        text += f"; launches took up to {self.launch_s * 1e3:.1f} ms"
        if self.per_replay:
            text += f"; {self.per_replay} by events around each replay: {self.why}"
        return text


class BlockQueue:
    """Times blocks of one cell's device work behind a hold (both sides share one, so both are timed
    the same way); `stats` says how they were queued."""

    def __init__(self, device: torch.device):
        self.device = device
        self.stats = QueueStats()
        self.fallen_back = False

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
        end.synchronize()
        self.stats.launch_s = max(self.stats.launch_s, launched_s)
        # the next hold covers these launches with room to spare; after a miss, at least twice this one
        grown = HOLD_MARGIN * launched_s if queued else max(2 * self.stats.hold_s, HOLD_MARGIN * launched_s)
        self.stats.hold_s = min(HOLD_CEILING_S, max(self.stats.hold_s, grown))
        return start.elapsed_time(end) / 1e3, queued

    def replays(self, launch: Callable[[], object], per_replay: Callable[[], float]) -> float:
        """Seconds of one block: held and queued whole, timed again behind longer holds where the host
        fell behind, else `per_replay` (events around each replay, summed) with the reason kept."""
        self.stats.blocks += 1
        if not self.fallen_back:
            for _ in range(TRIES):
                seconds, queued = self.time(launch)
                if queued:
                    self.stats.held += 1
                    return seconds
                self.stats.retried += 1
            self.fallen_back = True
            self.stats.why = (f"a block could not be queued whole behind holds of up to "
                              f"{self.stats.hold_s * 1e3:.0f} ms (the launch queue fills, or the host is away longer)")
        self.stats.per_replay += 1
        return per_replay()

    def profiled(self, launch: Callable[[], object]) -> bool:
        """Launch `launch`'s work behind a hold, untimed (the profiler reads its kernels); whether it was
        queued whole. A profiled block is not retried: a kernel's own duration has no host in it."""
        self.stats.blocks += 1
        _, queued = self.time(launch)
        if queued:
            self.stats.held += 1
        return queued


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
