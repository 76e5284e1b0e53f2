"""What a ratio's clock measured (`Measurement`): the first stage of a ratio, before it is judged
(``judging.judge``) and written (``writers``), each of which reads it and none of which adds to it.

A measurement is plain figures, frozen: each set of rounds as it was taken (`Rounds`, no timer and so no
trainer behind it), their estimates, how the device time was measured and how its blocks were queued, and
the seconds it took. `measure` takes it from a ratio's clock: its first rounds, then as many more as the
sequential looks ask for (``sequential``, the one place where what is measured depends on how it is
judged). A recording adds a second set of rounds where none was taken (`with_noise`): its noise.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from ampbench.speed import sequential
from ampbench.speed.clocks import Clock
from ampbench.speed.held import BlockQueue, QueueStats
from ampbench.speed.sequential import Look
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, extend_until_tight
from ampbench.stats import SpeedupEstimate, alternating, estimate_speedup, median
from ampbench.verdict import SpeedupCheck


@dataclass(frozen=True)
class Rounds:
    """One set of interleaved rounds of a ratio's two sides, as taken: each side's seconds per step, one per
    round, and its training steps per block."""

    ref_times: tuple[float, ...]  # the side the ratio is over (fp32's, or the versus side)
    mode_times: tuple[float, ...]
    ref_steps: int
    mode_steps: int

    @classmethod
    def of(cls, timer: PairedTimer) -> "Rounds":
        return cls(tuple(timer.ref_times), tuple(timer.mode_times), timer.ref_steps, timer.mode_steps)

    @property
    def ref_first(self) -> list[bool]:
        """Which of its rounds ran the side it is over first (``PairedTimer.ref_first``)."""
        return alternating(len(self.mode_times))

    def estimate(self, confidence: float) -> SpeedupEstimate:
        return estimate_speedup(self.ref_times, self.mode_times, confidence, self.ref_first)

    def step_seconds(self) -> tuple[float, float]:
        """The median per-step time of the mode and of the side it is over, across its rounds."""
        return median(self.mode_times), median(self.ref_times)


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
    queue: QueueStats | None = None  # how its device blocks were queued (``held``); None where none was
    seconds: float = 0.0  # spent measuring it: the cell's phase_seconds

    @property
    def second(self) -> Rounds | None:
        """Its second set of rounds, where one was taken: the confirming set, else a recording's noise."""
        return self.confirming or self.noise


def _queued(queue: BlockQueue | None) -> QueueStats | None:
    """How `queue`'s blocks were queued so far, kept apart from the blocks it will queue after."""
    return replace(queue.stats) if queue is not None else None


def measure(clock: Clock, policy: SpeedPolicy, check: SpeedupCheck | None, gated: bool) -> Measurement:
    """A ratio measured by `clock` in interleaved rounds: looked at until its rounds decide against
    `check`, and confirmed, where it gates its cell (`gated`: ``sequential.judged_rounds``); else its first
    look (``sequential.first_look``), in the shorter blocks of `policy.for_look`."""
    t0 = time.perf_counter()
    first = clock.timer(policy if gated else policy.for_look())
    if gated:
        looked = sequential.judged_rounds(first, clock.timer, check, policy)
    else:
        looked = sequential.first_look(first, check, policy)
    return Measurement(gated, Rounds.of(first), looked.estimate, looked.look,
                       Rounds.of(looked.confirming) if looked.confirming is not None else None,
                       looked.confirmation, looked.confirmation_look, method=clock.method, fallback=clock.fallback,
                       queue=_queued(clock.queue), seconds=time.perf_counter() - t0)


def with_noise(measured: Measurement, clock: Clock, policy: SpeedPolicy) -> Measurement:
    """`measured` with the second set of rounds a recording pools with its first and takes its noise from:
    a confirming set where one was taken, else one more from `clock`, of `policy.record_rounds`."""
    if measured.second is not None:
        return measured
    timer = clock.timer(policy)
    extend_until_tight(timer, policy.record_rounds)
    return replace(measured, noise=Rounds.of(timer), queue=_queued(clock.queue))
