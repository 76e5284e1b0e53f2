"""summary.md's movement: each cell of the run that moved or fails, with a sparkline of its last runs in the
history (``report.trends``: the gate's figure, the device-time speedup) and then this run's own figure,
marked apart, so that a job summary or a pull request comment shows at a glance whether a cell stepped,
drifted or only wobbled, and where this run (a pull request's, which no history holds) lands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ampbench.report.md_text import md_code, md_text
from ampbench.results import Run, SpeedRecord
from ampbench.results.ratios import DEVICE
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


THIS_RUN = "┆"  # between the history's runs and this run's own figure, the last bar of a sparkline


def _moved(run: Run, trends: "Trends", comparison: "Comparison | None") -> list["TrendCell"]:
    """The cells of `trends` that fail or moved: a failing or improved verdict, an inconclusive one, a
    change point in their history, or a verdict other than pass against the compared run."""
    verdicts = {c.test_id: c.verdict for c in run.cells}
    compared = {r.test_id for r in comparison.rows if r.verdict != Verdict.PASS} if comparison is not None else set()

    def moved(cell: "TrendCell") -> bool:
        verdict = verdicts.get(cell.test_id)
        flagged = verdict is not None and (Verdict(verdict).needs_a_look or Verdict(verdict) is Verdict.IMPROVED)
        return flagged or bool(cell.changes) or cell.test_id in compared

    return [cell for cell in trends.cells if moved(cell)]


def own_figures(run: Run) -> dict[str, float]:
    """This run's own figure of each speed cell the trends draw (``trends.FIGURE``, the device-time speedup)."""
    return {c.test_id: v for c in run.of_kind(SpeedRecord) if (v := c.ratio(DEVICE).speedup) is not None}


def history_before(cell: "TrendCell", run_id: str | None) -> list[float]:
    """The cell's values in the history other than this run's (a pull request's run is in no history; a
    push's is its last point), the last LAST_RUNS - 1 of them, oldest first."""
    return [p.value for p in cell.series.points if run_id is None or p.run_id != run_id][-(LAST_RUNS - 1):]


def _change(last: float, this: float) -> str:
    return f" ({this / last - 1:+.1%})" if last > 0 else ""


def movement_lines(run: Run, trends: "Trends", comparison: "Comparison | None" = None) -> list[str]:
    """summary.md's "Movement" table: one row per cell that moved or fails, with a sparkline of the history's
    last runs and, after THIS_RUN, this run's own figure (on a pull request: the pull request's), one scale
    per cell; the history's first and last of them, this run's figure and its change on the last; its
    verdict in this run. Nothing where no cell moved."""
    own, run_id = own_figures(run), run.machine.get("run_id")
    rows = []
    for cell in _moved(run, trends, comparison):
        before, this = history_before(cell, str(run_id) if run_id is not None else None), own.get(cell.test_id)
        if before and this is not None:
            rows.append((cell, before, this))
    if not rows:
        return []
    verdicts = {c.test_id: c.verdict for c in run.cells}
    label = run.machine.get("label")
    this_run = "this run" + (f" ({md_code(str(label)[:10], in_table=True)})" if label else "")
    out = [f"### Movement over the last runs ({md_text(trends.gpu)}, device speedup)", "",
           f"Each sparkline: the history's last runs, then {THIS_RUN} and this run's own figure.", "",
           f"| cell | verdict | history {THIS_RUN} this run | history: first → last | {this_run} |",
           "| --- | --- | --- | --- | --- |"]
    for cell, before, this in rows:
        line = sparkline([*before, this])
        verdict = verdicts.get(cell.test_id)
        out.append(f"| {md_code(cell.test_id, in_table=True)} | {md_text(verdict) if verdict is not None else '-'} "
                   f"| `{line[:-1]}{THIS_RUN}{line[-1]}` ({len(before)} + 1 runs) "
                   f"| {before[0]:.3f}x → {before[-1]:.3f}x | {this:.3f}x{_change(before[-1], this)} |")
    return out + [""]
