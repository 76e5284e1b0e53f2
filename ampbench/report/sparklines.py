"""summary.md's movement: each cell of the run that moved or fails, with a sparkline of its last runs in the
history (``report.trends``: the gate's figure, the device-time speedup), so that a job summary or a pull
request comment shows at a glance whether a cell stepped, drifted or only wobbled."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ampbench.report.junit import Run
from ampbench.verdict import Verdict

if TYPE_CHECKING:  # the trends need the history's store; a summary without --history never imports it
    from ampbench.report.compare import Comparison
    from ampbench.report.trends import TrendCell, Trends

BARS = "▁▂▃▄▅▆▇█"
LAST_RUNS = 20  # as many runs as a line of a pull request comment shows without wrapping


def sparkline(values: Sequence[float]) -> str:
    """One bar per value, scaled from the least (▁) to the greatest (█) of them; a series that does not
    move is drawn level, in the middle, rather than as all lows or all highs."""
    if not values:
        return ""
    low, high = min(values), max(values)
    if high - low <= 1e-12 * max(abs(high), 1.0):
        return BARS[len(BARS) // 2 - 1] * len(values)
    top = len(BARS) - 1
    return "".join(BARS[round((v - low) / (high - low) * top)] for v in values)


def _moved(run: Run, trends: "Trends", comparison: "Comparison | None") -> list["TrendCell"]:
    """The cells of `trends` that fail or moved: a failing or improved verdict, an inconclusive one, a
    change point in their history, or a verdict other than pass against the compared run."""
    verdicts = {c.test_id: c.verdict for c in run.cells}
    compared = {r.test_id for r in comparison.rows if r.verdict != Verdict.PASS} if comparison is not None else set()

    def moved(cell: "TrendCell") -> bool:
        verdict = verdicts.get(cell.test_id)
        flagged = verdict is not None and (Verdict(verdict).needs_a_look or Verdict(verdict) is Verdict.IMPROVED)
        return flagged or bool(cell.changes) or cell.test_id in compared

    return [cell for cell in trends.cells if len(cell.series.points) > 1 and moved(cell)]


def movement_lines(run: Run, trends: "Trends", comparison: "Comparison | None" = None) -> list[str]:
    """summary.md's "Movement" table: one row per cell that moved or fails, with its last runs as a sparkline
    (oldest first, this scale per cell), the first and last of them, and its verdict in this run; nothing
    where no cell moved."""
    cells = _moved(run, trends, comparison)
    if not cells:
        return []
    verdicts = {c.test_id: c.verdict for c in run.cells}
    out = [f"### Movement over the last runs ({trends.gpu}, device speedup)", "",
           "| cell | verdict | last runs | first → last |", "| --- | --- | --- | --- |"]
    for cell in cells:
        points = cell.series.points[-LAST_RUNS:]
        values = [p.value for p in points]
        verdict = verdicts.get(cell.test_id)
        out.append(f"| `{cell.test_id}` | {verdict if verdict is not None else '-'} | `{sparkline(values)}` "
                   f"({len(values)} runs) | {values[0]:.3f}x → {values[-1]:.3f}x |")
    return out + [""]
