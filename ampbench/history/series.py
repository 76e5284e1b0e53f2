from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    run_id: str            # the history's id of the run
    when: str              # ISO-8601 UTC time of the run
    value: float           # the figure, e.g. the device-time speedup
    low: float | None      # its interval, where measured
    high: float | None
    counts: bool           # an accepted run: its verdict did not fail, or it was accepted; not a smoke or slowed (injected) run
    restart: bool          # an accepted change: the level restarts at this run


@dataclass(frozen=True)
class Series:
    gpu: str               # GPU model name, e.g. "NVIDIA H100 80GB HBM3"
    test_id: str           # e.g. "test_speed[resnet50-amp_bf16]"
    figure: str            # "device_speedup", "speedup", "versus_speedup", "memory_ratio", ...
    points: tuple[Point, ...]  # in run order (oldest first)
