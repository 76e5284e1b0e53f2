"""Whether a cell's batch fits the memory it is given (``--perf-memory-limit``, else the card), decided
before the cell builds anything: from the peaks this GPU model's baseline file recorded, else from a short
probe (``peak.probe_peak``). A cell that does not fit is skipped with its need and the limit, "resnet50
fp32 at batch 128 needs 19.30 GiB; the limit is 15.00 GiB", instead of failing with an out-of-memory error.

A speed cell keeps its sides alive together (fp32's, the mode's, and a compiled cell's versus side), so
its need is their peaks summed; a memory cell runs one trainer at a time, so its need is its own peak.
Nothing here runs on the device: the figures come from baseline entries and the caller's probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ampbench.baselines.entries import MemoryEntry, SpeedEntry
from ampbench.memory.search import GIB

# A peak is held against the limit with this much room on top: the allocator rounds blocks up and
# fragments, so a step whose peak of live tensors equals the limit does not fit it.
HEADROOM = 1.05


def gib_text(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


@dataclass(frozen=True)
class KeptSide:
    """One trainer a cell keeps alive: what it is called in a message, and the test id of the memory
    cell that recorded its peak (eager sides only; None for a compiled side)."""

    label: str
    memory_test_id: str | None


@dataclass(frozen=True)
class Need:
    """What a cell needs: each side's peak in bytes, where it came from ("recorded", "probed"); a side
    whose probe ran out of memory needs more than `at_least` (its peak when it did)."""

    peaks: tuple[int, ...]
    source: str
    at_least: bool = False

    @property
    def bytes(self) -> int:
        return int(sum(self.peaks) * HEADROOM)

    def fits(self, limit_bytes: int) -> bool:
        return not self.at_least and self.bytes <= limit_bytes


def message(what: str, batch: int, need: Need, limit_bytes: int, limit_name: str = "the limit") -> str:
    """The skip's reason: "resnet50 fp32 at batch 128 needs 19.30 GiB; the limit is 15.00 GiB"."""
    amount = f"more than {gib_text(need.bytes)}" if need.at_least else gib_text(need.bytes)
    return f"{what} at batch {batch} needs {amount} ({need.source}); {limit_name} is {gib_text(limit_bytes)}"


def _batch_matches(entry: MemoryEntry | SpeedEntry, batch: int) -> bool:
    return entry.batch_size is None or entry.batch_size == batch


def recorded_speed_peaks(entry: object, batch: int) -> tuple[int, int] | None:
    """(fp32 side's, mode side's) peak from a speed cell's baseline entry, at `batch`: the entry keeps the
    mode's peak and its ratio to fp32's."""
    if not isinstance(entry, SpeedEntry) or not _batch_matches(entry, batch):
        return None
    peak, ratio = entry.peak_mem_bytes, entry.memory_ratio
    if not peak or not ratio:
        return None
    return int(peak / ratio), int(peak)


def recorded_memory_peak(entry: object, batch: int) -> int | None:
    """A memory cell's recorded peak at its default batch, where that is `batch`."""
    if not isinstance(entry, MemoryEntry) or not _batch_matches(entry, batch) or not entry.peak_mem_bytes:
        return None
    return int(entry.peak_mem_bytes)


def recorded_need(entry_of: Callable[[str], object], speed_test_id: str | None, sides: Sequence[KeptSide],
                  batch: int) -> Need | None:
    """The cell's need from recorded peaks: the speed cell's own entry (both its sides at once) where it
    names one, else each side's memory cell; None where any side has none."""
    if speed_test_id is not None:
        both = recorded_speed_peaks(entry_of(speed_test_id), batch)
        if both is not None and len(sides) == 2:
            return Need(both, "recorded")
    peaks = []
    for side in sides:
        peak = recorded_memory_peak(entry_of(side.memory_test_id), batch) if side.memory_test_id else None
        if peak is None:
            return None
        peaks.append(peak)
    return Need(tuple(peaks), "recorded")
