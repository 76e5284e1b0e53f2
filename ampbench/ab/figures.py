"""The figures an A/B run gates, one frozen row each (`PairedKind`): a speed cell's device-time speedup
over fp32, the mode's own device time per step (base against head on one card, it sees what a ratio cannot:
a change that slows fp32 and the mode alike), and a memory cell's peak, which is exact. A row names the
record kind it is read from, how one run's value and its own noise are read (`RunValue`), and the rule it is
judged by (``ab.paired.PairRule``). A new figure is one row in `PAIRED_FIGURES`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from ampbench.ab.paired import PEAK_MEMORY_RULE, SPEEDUP_RULE, STEP_TIME_RULE, PairRule, RunValue
from ampbench.results import MODE_SIDE, SPEED_RATIOS, MemoryRecord, Record, SpeedRecord
from ampbench.stats import log_sd

# The median of n rounds has a standard error about sqrt(pi / 2) times a mean's (a normal's efficiency)
MEDIAN_SE = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class PairedKind:
    """One figure an A/B run compares: its key in a paired record's ``figures``, what messages call it, its
    unit (which says how it is shown: ``report.figure_text.fmt_value``), the record kind it is read from and
    how, and its rule."""

    name: str
    label: str
    unit: str
    record: type[Record]
    read: Callable[[Record], RunValue | None]
    rule: PairRule


def _speedup(record: Record) -> RunValue | None:
    """The device-time speedup over fp32, with the sd its own interval implies."""
    est = record.estimate(SPEED_RATIOS["device"]) if isinstance(record, SpeedRecord) else None
    if est is None:
        return None
    return RunValue.of_interval(est.speedup, est.low, est.high, est.confidence)


def _step_time(record: Record) -> RunValue | None:
    """The mode's device time per step (ms), the median of its rounds, with the median's sd from them."""
    if not isinstance(record, SpeedRecord):
        return None
    side = record.ratio(SPEED_RATIOS["device"]).side(MODE_SIDE)
    rounds = [r for r in side.round_ms or () if isinstance(r, (int, float)) and r > 0 and math.isfinite(r)]
    if side.step_ms is None or side.step_ms <= 0 or len(rounds) < 2:
        return None
    return RunValue(side.step_ms, MEDIAN_SE * log_sd(rounds) / math.sqrt(len(rounds)))


def _peak_memory(record: Record) -> RunValue | None:
    """The mode's peak bytes of a training step: exact, no noise of its own."""
    if not isinstance(record, MemoryRecord):
        return None
    peak = record.side(MODE_SIDE).peak_mem_bytes
    return RunValue(float(peak), 0.0) if peak else None


# each rule's tolerance and between-process prior: ``ab.paired``'s constants say why each is what it is
PAIRED_SPEEDUP = PairedKind("speedup", "device-time speedup over fp32", "x", SpeedRecord, _speedup, SPEEDUP_RULE)
PAIRED_STEP_TIME = PairedKind("step_time", "device time per step", "ms", SpeedRecord, _step_time, STEP_TIME_RULE)
PAIRED_PEAK_MEMORY = PairedKind("peak_memory", "peak memory", "bytes", MemoryRecord, _peak_memory, PEAK_MEMORY_RULE)

# in the order every reader lists them (``results.paired.FIGURE_ORDER``)
PAIRED_FIGURES: dict[str, PairedKind] = {k.name: k for k in (PAIRED_SPEEDUP, PAIRED_STEP_TIME, PAIRED_PEAK_MEMORY)}


def sides_of(record: Record) -> Mapping[str, RunValue]:
    """Each figure `record` holds, by its row's name: none where the run measured none of it."""
    found = {}
    for kind in PAIRED_FIGURES.values():
        if isinstance(record, kind.record) and (side := kind.read(record)) is not None:
            found[kind.name] = side
    return found
