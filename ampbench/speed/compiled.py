"""What a compiled speed cell adds to an eager one: dynamo's state around its compilation and timing
(a graph break or a recompile fails the cell), its compile time against the baseline, and its second
ratio, the mode against its versus side (``modes.versus_of``): the compile gain of a mode compiled
where its row is eager, fp8's speedup over compiled amp_bf16 for a row that always compiles.

The second ratio is timed as the first is (``results.ratios.VERSUS``): interleaved rounds of the two sides in
device time, judged against the baseline entry's own figure of it. Nothing here imports pytest;
``cell.measure_speed`` calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ampbench.baselines.entries import SpeedEntry
from ampbench.modes import PrecisionMode, label, shared_versus
from ampbench.speed import sides
from ampbench.verdict import RatioCheck


@dataclass(frozen=True)
class DynamoState:
    """What torch.compile has done in this process so far: graphs compiled and graph breaks by reason."""

    graphs: int
    breaks: dict[str, int]

    @classmethod
    def now(cls) -> "DynamoState":
        from torch._dynamo.utils import counters

        return cls(int(counters["stats"]["unique_graphs"]), dict(counters["graph_break"]))

    def breaks_since(self, earlier: "DynamoState") -> list[str]:
        return [f"{reason} (x{n - earlier.breaks.get(reason, 0)})" for reason, n in self.breaks.items()
                if n > earlier.breaks.get(reason, 0)]


# Compile time is held loosely: it follows the host's CPU as much as the compiler (docs/design.md), so
# only three times the baseline (Inductor or dynamo gone badly wrong, a cache no longer used) fails a cell.
COMPILE_TIME_TOLERANCE = 2.0


def compile_time_check(model: str, mode: str, baseline: SpeedEntry | None, compile_s: float | None) -> str | None:
    """Why a compiled cell's first step (its compilation, caches cold) took too long against its
    baseline entry, or None."""
    expected = baseline.compile_s if baseline else None
    if compile_s is None or not isinstance(expected, (int, float)) or expected <= 0:
        return None
    return RatioCheck(model, mode, "compile time (s, caches cold)", float(expected), COMPILE_TIME_TOLERANCE,
                      "higher").failure(compile_s)


def compile_problems(mode: PrecisionMode, before: DynamoState | None, prepared: DynamoState | None,
                     timed: DynamoState | None) -> list[str]:
    """Why a compiled cell's figures do not measure one compiled graph of the step: a graph break while
    it compiled (the step then runs as several graphs with eager code between them), or a recompile
    while it was timed (the rounds then timed compilation). Nothing for an eager cell, whose states are
    not read (reading them imports dynamo)."""
    if not mode.compile:
        return []
    assert before is not None and prepared is not None and timed is not None, \
        f"{mode.name} compiled: dynamo's state is read before, after preparing and after timing a compiled cell"
    problems = []
    breaks = prepared.breaks_since(before)
    if breaks:
        shown = "; ".join(b[:200] for b in breaks[:3]) + (f"; and {len(breaks) - 3} more" if len(breaks) > 3 else "")
        problems.append(f"torch.compile broke the step's graph: {shown}")
    if timed.graphs > prepared.graphs:
        problems.append(f"torch.compile compiled {timed.graphs - prepared.graphs} new graph(s) while the cell was "
                        "timed (a recompile: a guard failed on the timed steps)")
    return problems


def served(precisions: Iterable[str]) -> set[str]:
    """Labels of the versus sides that more than one cell is timed against (``modes.shared_versus``)."""
    return {label(m) for m in shared_versus(precisions)}


class VersusSides:
    """The one versus side kept between a model's cells. A cold compile of a large model costs 20-60 s
    on an H100, so a side that several cells are timed against (`served`: compiled amp_bf16) is compiled
    once, and where its own compiled cell ran, that cell's side is the one kept; every other versus side
    (a mode eager, for one compiled cell's compile gain) serves one cell and goes. So at most the
    fp32 side, the mode and one versus side occupy the device."""

    def __init__(self, served: set[str]) -> None:
        self.served = served
        self.key: tuple[str, str] | None = None  # (model, the side's mode label)
        self.side: sides.Side | None = None

    def get(self, model: str, mode: PrecisionMode, make: Callable[[], sides.Side]) -> sides.Side:
        """The kept side of `mode`, else the one `make` builds (the kept one dropped first)."""
        key = (model, label(mode))
        if self.key != key or self.side is None:
            self.drop()
            self.side, self.key = make(), key
        return self.side

    def offer(self, model: str, mode: PrecisionMode, side: sides.Side) -> sides.Side:
        """`side`, a cell's own side of `mode`, kept where later cells are timed against it."""
        if label(mode) in self.served:
            self.side, self.key = side, (model, label(mode))
        return side

    def settle(self) -> bool:
        """Drop a kept side that no later cell is timed against; whether one was dropped."""
        if self.key is None or self.key[1] in self.served:
            return False
        self.drop()
        return True

    def drop(self) -> None:
        self.key = self.side = None
