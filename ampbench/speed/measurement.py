"""A ratio measured by its clock: the first stage of a speed ratio, which makes the frozen figures
(``gate.measurement.Measurement``) that the judge (``gate.judge.judge``) and the writers (``gate.writers``)
read, and none of which adds to.

`measure` takes its first rounds from a ratio's clock, then as many more as the sequential looks ask for
(``sequential``, the one place where what is measured depends on how it is judged). A recording adds a
second set of rounds where none was taken (`with_noise`): its noise.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ampbench.gate.measurement import Measurement, QueueStats, Rounds
from ampbench.speed import sequential
from ampbench.speed.clocks import Clock
from ampbench.speed.held import BlockQueue
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import extend_until_tight
from ampbench.verdict import SpeedupCheck


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
                       queue=_queued(clock.queue), seconds=time.perf_counter() - t0, cut_short=looked.cut_short)


def with_noise(measured: Measurement, clock: Clock, policy: SpeedPolicy) -> Measurement:
    """`measured` with the second set of rounds a recording pools with its first and takes its noise from:
    a confirming set where one was taken, else one more from `clock`, of `policy.record_rounds`."""
    if measured.second is not None:
        return measured
    timer = clock.timer(policy)
    extend_until_tight(timer, policy.record_rounds)
    return replace(measured, noise=Rounds.of(timer), queue=_queued(clock.queue))
