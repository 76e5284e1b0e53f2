"""A learned ratio that no measurement gives: not finite, not positive, beyond ``PLAUSIBLE``, or
``LEVEL_FACTOR`` away from its cell's level in the history. One such value moves a cell's level and
noise so far that no later run of it can fail, so none reaches a series: an imported run holding one is
refused whole (``ingest``); a pytest session leaves the figure out of its run with a warning
(``checked_run``), since it has measured everything else. Nothing here imports torch."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Iterable

from ampbench.history.rows import RunRow
from ampbench.results import Record, TimedRecord
from ampbench.results.ratios import history_figures
from ampbench.stats import finite_number

if TYPE_CHECKING:
    from ampbench.history.store import History


# what a learned ratio (a speedup, a ratio over the versus side, a scaling efficiency) may be: a
# mixed-precision step lies well within these of fp32's; beyond them the figure is a broken measurement
# or a broken file, never a change of the software under test
PLAUSIBLE = (1e-3, 1e3)
# how far a value may lie from its cell's level (the median of its earlier values on the same GPU model)
# before it is taken for a broken figure: no software change moves a ratio a hundredfold
LEVEL_FACTOR = 100.0


@dataclass(frozen=True)
class Implausible:
    """A learned ratio of a run that is no plausible measurement: kept out of the history."""

    run_id: str
    test_id: str
    figure: str
    value: Any
    expected: str  # completes "expected ..."

    def __str__(self) -> str:
        return (f"run {self.run_id}: cell {self.test_id}: {self.figure} {_shown(self.value)} is no plausible "
                f"ratio; expected {self.expected}")


def _shown(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) and math.isfinite(value) else repr(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def plausible(value: Any) -> bool:
    """Whether `value` may be a learned ratio's: a finite number within PLAUSIBLE (a level aside)."""
    number = finite_number(value)
    return number is not None and PLAUSIBLE[0] <= number <= PLAUSIBLE[1]


def out_of_bounds(records: Iterable[Record], run_id: str) -> list[Implausible]:
    """The learned ratios of `records` (those a history learns: ``RatioKind.learned``) that no measurement
    gives: not finite, zero or negative, or beyond PLAUSIBLE. What is not a number is no figure at all
    (``figures_of`` leaves it out)."""
    low, high = PLAUSIBLE
    expected = f"a finite number within [{low:g}, {high:g}]"
    return [Implausible(run_id, record.test_id, kind.history, value, expected)
            for record in records if isinstance(record, TimedRecord)
            for kind in record.RATIOS.values() if kind.learned
            if _is_number(value := record.ratio(kind).speedup) and not plausible(value)]


class Levels:
    """Each cell's earlier values in the history, read once per GPU model and figure (of `cells` only,
    where given) and kept up to date with the runs appended since (``add``): what a run's learned figures
    are held to (``check``), an import of many files reading each series once."""

    def __init__(self, history: History, cells: Iterable[str] | None = None):
        self.history, self.cells = history, None if cells is None else list(cells)
        self._figures = set(history_figures())
        self._read: dict[tuple[str, str], dict[str, list[tuple[str, float]]]] = {}

    def _learned(self, row: RunRow) -> Iterable[tuple[str, str, str, float]]:
        """(GPU, figure, cell, value) of each learned figure of `row`."""
        return [(c.gpu or row.gpu, f.name, c.test_id, f.value)
                for c in row.cells for f in c.figures if f.name in self._figures]

    def _earlier(self, gpu: str, figure: str) -> dict[str, list[tuple[str, float]]]:
        if (gpu, figure) not in self._read:
            self._read[gpu, figure] = {t: [(p.run_id, p.value) for p in s.points if plausible(p.value)]
                                       for t, s in self.history.series_of(gpu, figure, self.cells).items()}
        return self._read[gpu, figure]

    def check(self, row: RunRow) -> list[Implausible]:
        """The learned figures of `row` more than LEVEL_FACTOR above or below their cell's level: the median
        of its earlier values on the same GPU model (robust to one broken value already there). A smoke
        run's figures are left alone: they count for nothing, and CPUs differ widely."""
        found = []
        for gpu, figure, test_id, value in [] if row.smoke else self._learned(row):
            earlier = [v for run_id, v in self._earlier(gpu, figure).get(test_id, []) if run_id != row.id]
            if not earlier:
                continue  # the cell's first run on this GPU model sets its level
            level = statistics.median(earlier)
            low, high = level / LEVEL_FACTOR, level * LEVEL_FACTOR
            if not low <= value <= high:
                runs = f"{len(earlier)} earlier run{'s' * (len(earlier) != 1)}"
                found.append(Implausible(row.id, test_id, figure, value,
                                         f"within {LEVEL_FACTOR:g}x of its level {level:.4g} on {gpu} (the median "
                                         f"of its {runs}): [{low:.4g}, {high:.4g}]"))
        return found

    def add(self, row: RunRow) -> None:
        """Take `row`, just appended, among the earlier values of the series read."""
        for gpu, figure, test_id, value in self._learned(row):
            if (gpu, figure) in self._read:
                self._read[gpu, figure].setdefault(test_id, []).append((row.id, value))


def without(row: RunRow, left_out: Iterable[Implausible]) -> RunRow:
    """`row` less the figures of `left_out`; each cell's record stays as the run wrote it."""
    gone = {(i.test_id, i.figure) for i in left_out}
    if not gone:
        return row
    cells = tuple(replace(c, figures=tuple(f for f in c.figures if (c.test_id, f.name) not in gone))
                  for c in row.cells)
    return replace(row, cells=cells)


def checked_run(history: History, row: RunRow, records: Iterable[Record]) -> tuple[RunRow, list[Implausible]]:
    """`row`, the run of `records`, less each learned figure that is no plausible measurement (out of
    bounds, or off its cell's level in `history`), with those left out: a pytest session keeps the rest
    of its run. Reads `history`; its HistoryError passes."""
    bounds = out_of_bounds(records, row.id)
    kept = without(row, bounds)
    level = Levels(history, [c.test_id for c in kept.cells]).check(kept)
    return without(kept, level), bounds + level


def refused(problems: list[Implausible]) -> str:
    """One line: the first problem, how many more, and that nothing of the run was imported."""
    more = f" (and {len(problems) - 1} more such figure{'s' * (len(problems) > 2)})" if len(problems) > 1 else ""
    return f"{problems[0]}{more}; the run is refused, nothing of it imported"
