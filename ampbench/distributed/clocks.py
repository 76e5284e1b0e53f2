"""Where a distributed cell reads each kind of ratio from its figures (``figures.DistFigures``): its
distributed clock, the one its row names (``RatioKind.clock``) in `DIST_CLOCKS`. The ranks time every
figure in one launch, so a clock here times nothing: it says which estimate of the merged figures is the
ratio, what the ratio's check calls it, and, where the launch kept them, its rounds and step times by
side. A new kind of ratio that reads an estimate already read here names that clock; one that reads
another is one entry more, as a speed ratio's new clock is (``speed.clocks.CLOCKS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ampbench.distributed.figures import DistFigures, per_round_min
from ampbench.results.ratio_figures import StepFigures
from ampbench.results.schema import FP32_SIDE, MODE_SIDE
from ampbench.stats import SpeedupEstimate

# a ratio's step and round times by side, from the cell's figures and its ranks' documents
Sides = Callable[[DistFigures, Sequence[dict]], dict[str, StepFigures]]


@dataclass(frozen=True)
class DistClock:
    """How a distributed cell reads one kind of ratio: its estimate (None where the run measured none),
    what its check's messages call it, its step and round times by side for the record, the mode's and
    fp32's time per step for a recording (None: the clock kept none), and whether a recording stores its
    rounds."""

    estimate: Callable[[DistFigures], SpeedupEstimate | None]
    figure: str = "speedup over fp32"
    sides: Sides | None = None
    steps: Callable[[DistFigures], tuple[float, float]] | None = None
    rounds: bool = True


def device_steps(figs: DistFigures) -> tuple[float, float]:
    """The mode's and fp32's device time per step, which come with a device-time speedup."""
    step_s, step_s_ref = figs.device_step_s, figs.device_step_s_ref
    assert step_s is not None and step_s_ref is not None, "a device-time speedup comes with its step times"
    return step_s, step_s_ref


def _round_ms(mode: list[float], fp32: list[float], mode_step: float | None = None,
              fp32_step: float | None = None) -> dict[str, StepFigures]:
    """A ratio's step and round times by side, in milliseconds: the mode's and fp32's."""
    return {MODE_SIDE: StepFigures(step_ms=mode_step, round_ms=mode),
            FP32_SIDE: StepFigures(step_ms=fp32_step, round_ms=fp32)}


def _wall_sides(figs: DistFigures, docs: Sequence[dict]) -> dict[str, StepFigures]:
    """Each round's wall-clock step time, rank 0's."""
    return _round_ms([t * 1e3 for t in docs[0]["mode_times"]], [t * 1e3 for t in docs[0]["ref_times"]])


def _device_sides(figs: DistFigures, docs: Sequence[dict]) -> dict[str, StepFigures]:
    """Each round's device time per step, the least busy rank's (``figures.per_round_min``), and the median
    step's."""
    mode_ms, ref_ms = ([t * 1e3 for t in per_round_min(docs, key)] for key in ("device_mode_times", "device_ref_times"))
    step_s, step_s_ref = device_steps(figs)
    return _round_ms(mode_ms, ref_ms, step_s * 1e3, step_s_ref * 1e3)


# a distributed ratio's clock by the name its kind gives it (``RatioKind.clock``)
DIST_CLOCKS: dict[str, DistClock] = {
    "device": DistClock(lambda figs: figs.device, sides=_device_sides, steps=device_steps),
    "wall": DistClock(lambda figs: figs.speedup, sides=_wall_sides),
    # the efficiency's rounds are the wall clock's (its 1-GPU side is paired with the same N-GPU rounds),
    # which an entry stores once, as the wall-clock speedup's
    "scaling": DistClock(lambda figs: figs.efficiency, rounds=False),
    "device_scaling": DistClock(lambda figs: figs.device_efficiency, figure="scaling efficiency"),
}
