"""A cell's figure over runs, as the history reads it: what the analysis (``learn``, ``changes``) takes.

A Series holds one figure of one cell on one GPU model, oldest run first. Each Point says whether it
may count towards the cell's level and noise (its verdict did not fail, or it was accepted), whether it
is no sample at all (a smoke run, a run slowed on purpose), whether an accepted change restarts the level
there, and on which card it ran; whether it does count is the history's replay of the series
(``replay``), which holds suspect runs back. Nothing here touches a store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    run_id: str            # the history's id of the run
    when: str              # ISO-8601 UTC time of the run
    value: float           # the figure, e.g. the device-time speedup
    low: float | None      # its interval, where measured
    high: float | None
    # may count: its verdict did not fail, or it was accepted; not a smoke or slowed (injected) run
    counts: bool
    restart: bool          # an accepted change: the level restarts at this run
    card: str | None = None     # the card's UUID, where the run recorded one
    verdict: str | None = None  # the figure's verdict in its run
    excluded: bool = False      # no sample of the cell at all: a smoke run, or slowed on purpose (injected)

    @property
    def half_width(self) -> float | None:
        """Half the width of the interval in ln units (``SpeedupEstimate.half_width``), where it has one."""
        if self.low is None or self.high is None or not (0 < self.low <= self.high):
            return None
        return 0.5 * math.log(self.high / self.low)


@dataclass(frozen=True)
class Series:
    gpu: str               # GPU model name
    test_id: str           # e.g. "test_speed[resnet50-amp_bf16]"
    figure: str            # "device_speedup", "speedup", "versus_speedup", "memory_ratio", ...
    points: tuple[Point, ...]  # in run order (oldest first)

    @property
    def name(self) -> str:
        """How messages name the series: 'test_speed[resnet50-amp_bf16] device_speedup on NVIDIA H100'."""
        return f"{self.test_id} {self.figure} on {self.gpu}"

    def log_values(self) -> list[float]:
        """ln(value) of every point: the scale the suite's statistics work on (ratios are judged by
        their relative change). A figure that is not finite and positive is refused, naming its run."""
        for p in self.points:
            if isinstance(p.value, bool) or not isinstance(p.value, (int, float)) or not (
                    math.isfinite(p.value) and p.value > 0):
                raise ValueError(f"{self.name}: run {p.run_id}: value {p.value!r} is not a finite positive figure")
        return [math.log(p.value) for p in self.points]

    def segments(self) -> list[range]:
        """The indices of the points between restarts: a restart at point i opens a segment at i."""
        starts = [0] + [i for i, p in enumerate(self.points) if p.restart and i > 0]
        ends = starts[1:] + [len(self.points)]
        return [range(a, b) for a, b in zip(starts, ends) if b > a]
