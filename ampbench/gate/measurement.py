"""What a ratio's clock measured (`Measurement`): the first stage of a timed figure, before it is judged
(``gate.judge.judge``) and written (``gate.writers``), each of which reads it and none of which adds to it.

A measurement is plain figures, frozen: each set of rounds as it was taken (`Rounds`, no timer and so no
trainer behind it), their estimates, how the device time was measured and how its blocks were queued
(`QueueStats`), and the seconds it took. A clock makes it (``speed.measurement.measure``); this module
holds no clock, so that whatever judges or writes a measurement (a report, a comparison of two runs)
runs without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from ampbench.nvml import BlockConditions
from ampbench.stats import SpeedupEstimate, alternating, estimate_speedup, median

if TYPE_CHECKING:
    from ampbench.gate.looks import Look


class Timed(Protocol):
    """Interleaved rounds of a ratio's two sides as a clock's timer holds them, with its steps per block."""

    @property
    def ref_times(self) -> Sequence[float]: ...

    @property
    def mode_times(self) -> Sequence[float]: ...

    @property
    def ref_steps(self) -> int: ...

    @property
    def mode_steps(self) -> int: ...


@dataclass(frozen=True)
class Rounds:
    """One set of interleaved rounds of a ratio's two sides, as taken: each side's seconds per step, one per
    round, and its training steps per block."""

    ref_times: tuple[float, ...]  # the side the ratio is over (fp32's, or the versus side)
    mode_times: tuple[float, ...]
    ref_steps: int
    mode_steps: int
    # the card's conditions over each side's block, one per round, where NVML was read (``ampbench.nvml``)
    ref_conditions: tuple[BlockConditions | None, ...] = ()
    mode_conditions: tuple[BlockConditions | None, ...] = ()

    @classmethod
    def of(cls, timer: Timed) -> "Rounds":
        # a timer that reads no conditions (a wall clock's, a distributed rank's) holds none
        return cls(tuple(timer.ref_times), tuple(timer.mode_times), timer.ref_steps, timer.mode_steps,
                   tuple(getattr(timer, "ref_conditions", ())), tuple(getattr(timer, "mode_conditions", ())))

    @property
    def ref_first(self) -> list[bool]:
        """Which of its rounds ran the side it is over first (``speed.timing.PairedTimer.ref_first``)."""
        return alternating(len(self.mode_times))

    def estimate(self, confidence: float) -> SpeedupEstimate:
        return estimate_speedup(self.ref_times, self.mode_times, confidence, self.ref_first)

    def step_seconds(self) -> tuple[float, float]:
        """The median per-step time of the mode and of the side it is over, across its rounds."""
        return median(self.mode_times), median(self.ref_times)


def pooled_estimate(a: Rounds, b: Rounds, confidence: float) -> SpeedupEstimate:
    """Two sets of rounds as one, each in its own order (a set that starts over starts with the side it is over)."""
    return estimate_speedup([*a.ref_times, *b.ref_times], [*a.mode_times, *b.mode_times], confidence,
                            ref_first=a.ref_first + b.ref_first)


@dataclass
class QueueStats:
    """How a cell's device blocks were queued: what its record says of them (``speed.held.BlockQueue``
    keeps them as it queues)."""

    blocks: int = 0  # blocks timed
    held: int = 0  # of which queued whole behind a hold
    retried: int = 0  # tries that missed and were timed again
    per_replay: int = 0  # blocks timed by events around each replay
    hold_s: float = 0.0  # the hold's length now (its queue starts it at its floor)
    launch_s: float = 0.0  # the longest host time one block's launches took
    chunk: int | None = None  # the fewest replays one hold covered, where blocks were split to fit the queue
    why: str | None = None  # why blocks fell back to events around each replay

    def describe(self) -> str:
        if self.blocks == 0:
            return "no block timed"
        text = f"{self.held} of {self.blocks} blocks queued whole behind a hold (up to {self.hold_s * 1e3:.1f} ms)"
        if self.chunk is not None:
            text += f" in held chunks of {self.chunk}+ replays (a whole block does not fit the launch queue)"
        if self.retried:
            text += f", {self.retried} timed again after the host fell behind"
        text += f"; launches took up to {self.launch_s * 1e3:.1f} ms"
        if self.per_replay:
            text += f"; {self.per_replay} by events around each replay: {self.why}"
        return text


@dataclass(frozen=True)
class Measurement:
    """What a ratio's clock measured: its first rounds and their estimate, the confirming rounds where the
    looks found a regression, a recording's noise rounds, how its device time was measured and its blocks
    queued, and the seconds it took."""

    gated: bool  # measured as a figure that gates its cell (looked at, confirmed), else given its first look
    first: Rounds
    # the first rounds': at the look that stopped them (`look`), or over all of them where no look did
    estimate: SpeedupEstimate
    look: Look | None = None
    confirming: Rounds | None = None  # a second, independent set, where the looks found a regression
    confirmation: SpeedupEstimate | None = None
    confirmation_look: Look | None = None
    noise: Rounds | None = None  # a recording's second set, where no confirming set was taken
    method: str | None = None  # how its device time was measured; None in wall-clock time
    fallback: str | None = None  # why not by graph replay, where that was wanted
    queue: QueueStats | None = None  # how its device blocks were queued; None where none was
    seconds: float = 0.0  # spent measuring it: the cell's phase_seconds
    cut_short: bool = False  # the run's time budget (--perf-time-budget) stopped its looks undecided

    @property
    def second(self) -> Rounds | None:
        """Its second set of rounds, where one was taken: the confirming set, else a recording's noise."""
        return self.confirming or self.noise
