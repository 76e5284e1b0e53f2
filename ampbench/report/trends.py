"""The report's trends: each speed cell's device-time speedup over the runs a history holds of its GPU
model, drawn as one small PNG per cell, with how far its tolerance has been learned.

`read_trends` reads the store once (the cells' series and the runs' software) and does the analysis
(``history.learn``, ``history.changes``); `trend_chart` draws one cell from what it read, and the
page and the summary take their parts from `html_context` and `markdown_lines`. matplotlib is imported
inside the drawing, as in ``report.charts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Sequence

from ampbench.history.changes import Change, find_changes
from ampbench.history.learn import CellBaseline, learn
from ampbench.history.report_changes import SOFTWARE_ORDER
from ampbench.history.series import Series
from ampbench.history.statuses import ACCEPTED, COUNTED, EXCLUDED, FAILED, SUSPECT
from ampbench.report.charts import Chart, _png, _pyplot
from ampbench.report.md_text import md_code, md_text
from ampbench.results import Run, SpeedRecord
from ampbench.results.ratios import DEVICE

if TYPE_CHECKING:  # the store needs SQLAlchemy; a report without --history never imports it
    from ampbench.history.rows import RunSummary
    from ampbench.history.store import History

FIGURE = DEVICE.history  # the gate's figure: the one whose trend the report draws
# cells drawn: each chart costs ~90 ms and ~25 kB of the page, and a page of more tells nothing a table does not
MAX_CELLS = 60
SIZE_IN, DPI = (6.0, 2.5), 80  # 480 x 200 px: small enough for a page of many cells
NOTE_CHARS = 28  # a software annotation past this is cut, its full text is in the caption
LINE_COLOR, BAND_COLOR, COUNTED_COLOR, CHANGE_COLOR, SOFTWARE_COLOR = (
    "#1f77b4", "#1f77b4", "#1f77b4", "#c62828", "#6a1b9a")
SUSPECT_COLOR, FAILED_COLOR = "#ef6c00", "#c62828"
# how each state of a run (``history.replay``) is drawn: its colour, whether filled, its legend label
POINT_STYLES = ((COUNTED, COUNTED_COLOR, True, "run"), (ACCEPTED, COUNTED_COLOR, True, None),
                (SUSPECT, SUSPECT_COLOR, False, "held back as suspect"), (FAILED, FAILED_COLOR, False, "failed"),
                (EXCLUDED, "#9e9e9e", False, "slowed on purpose"))


@dataclass(frozen=True)
class TrendCell:
    """One cell's trend: its series, what the history learned of it, its changes, and the runs whose
    software differs from the run before (point index, 'torch 2.11→2.12')."""

    series: Series
    learned: CellBaseline
    changes: tuple[Change, ...]
    software: tuple[tuple[int, str], ...]
    labels: tuple[str, ...] = ()  # each point's name on the axis (``point_labels``); its date where empty

    @property
    def test_id(self) -> str:
        return self.series.test_id


@dataclass(frozen=True)
class Trends:
    """The trends of a run's speed cells in one store, on one GPU model."""

    store: str  # the store as messages name it
    gpu: str
    cells: tuple[TrendCell, ...]  # the cells drawn, in the run's order
    total: int  # the run's cells with a series: more than len(cells) where MAX_CELLS cut them

    @property
    def note(self) -> str | None:
        """The sentence a page adds where cells were left out."""
        if self.total <= len(self.cells):
            return None
        return (f"The first {len(self.cells)} of the run's {self.total} cells with a history are drawn "
                f"(at most {MAX_CELLS}); `ampbench history changes` lists every cell's changes.")


def software_changes(before: "RunSummary", after: "RunSummary") -> list[str]:
    """'torch 2.11→2.12' for each software layer that `after` records differently. The label is left
    out: in CI it is the commit, new on every run, and would mark every point (`ampbench history
    changes` names it beside each change)."""
    old, new = before.software or {}, after.software or {}
    pairs = [(key, old.get(key), new.get(key)) for key in SOFTWARE_ORDER]
    return [f"{name} {a or '-'}→{b or '-'}" for name, a, b in pairs if (a or None) != (b or None)]


def _annotations(series: Series, runs: dict[str, "RunSummary"]) -> tuple[tuple[int, str], ...]:
    notes = []
    for i in range(1, len(series.points)):
        before, after = (runs.get(series.points[j].run_id) for j in (i - 1, i))
        if before is not None and after is not None:
            differ = software_changes(before, after)
            if differ:
                notes.append((i, ", ".join(differ)))
    return tuple(notes)


LABEL_CHARS = 10  # a --perf-label past this is cut (a commit's 40 hex digits: its first 10)


def point_labels(series: Series, runs: dict[str, "RunSummary"]) -> tuple[str, ...]:
    """Each point's name on the axis: its run's --perf-label where every run of the series has its own
    (a commit), else its time: of day where the runs share a day, with the date where they span more."""
    labels = [(runs[p.run_id].label or "") if p.run_id in runs else "" for p in series.points]
    if all(labels) and len(set(labels)) == len(labels):
        return tuple(label[:LABEL_CHARS] for label in labels)
    one_day = len({p.when[:10] for p in series.points}) == 1
    return tuple(p.when[11:16] if one_day else f"{_short_date(p.when)} {p.when[11:16]}".strip() for p in series.points)


def run_cells(run: Run) -> list[str]:
    """The test ids of the run's speed cells with a device-time speedup, in the run's order."""
    return [c.test_id for c in run.of_kind(SpeedRecord) if c.ratio(DEVICE).speedup is not None]


def read_trends(history: "History", run: Run, gpu: str | None = None) -> Trends:
    """The trends of `run`'s speed cells in `history` on `gpu` (the run's GPU model where None): every
    cell with a device-time series, the first MAX_CELLS of them analysed. HistoryError from the store."""
    gpu = gpu or ("cpu" if run.smoke else run.gpu)  # as the history files a smoke run
    wanted = run_cells(run)
    found = history.series_of(gpu, FIGURE, wanted)
    ids = [t for t in dict.fromkeys(wanted) if t in found and found[t].points]
    runs = {r.id: r for r in history.runs(gpu=gpu)} if ids else {}
    cells = []
    for test_id in ids[:MAX_CELLS]:
        series = found[test_id]
        learned = learn(series)
        cells.append(TrendCell(series, learned, tuple(find_changes(series, replay=learned.replay)),
                               _annotations(series, runs),
                               point_labels(series, runs)))
    return Trends(history.name, gpu, tuple(cells), len(ids))


# ---------------------------------------------------------------------------------------------------
# drawing


def chart_filename(index: int, test_id: str) -> str:
    """A plain file name for cell `index`'s chart: 'trend-03-resnet50-amp_fp16.png'."""
    inner = re.search(r"\[(.*)\]", test_id)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", inner.group(1) if inner else test_id).strip("._") or "cell"
    return f"trend-{index + 1:02d}-{slug[:60]}.png"


def _short_date(when: str) -> str:
    return when[5:10] if len(when) >= 10 else when  # ISO-8601: "2026-01-03T..." -> "01-03"


def segment_levels(series: Series) -> list[tuple[range, float]]:
    """Each segment between restarts with its level (``learn``'s, of its counted runs)."""
    levels = []
    for seg in series.segments():
        level = learn(Series(series.gpu, series.test_id, series.figure, series.points[seg.start:seg.stop])).level
        if level is not None:
            levels.append((seg, level))
    return levels


def states(cell: TrendCell) -> list[str]:
    """Each run's state in the history's replay: counted, accepted, suspect, failed or excluded."""
    replay = cell.learned.replay
    if replay is None:
        return [COUNTED if p.counts else FAILED for p in cell.series.points]
    return [s.state for s in replay.statuses]


def _points(ax, cell: TrendCell) -> None:
    """The values with their intervals: a counted run filled, a run held back as suspect or failed hollow."""
    series, of = cell.series, states(cell)
    for state, color, filled, label in POINT_STYLES:
        idx = [i for i, st in enumerate(of) if st == state]
        if not idx:
            continue
        values = [series.points[i].value for i in idx]
        below = [max(v - (series.points[i].low or v), 0.0) for i, v in zip(idx, values)]
        above = [max((series.points[i].high or v) - v, 0.0) for i, v in zip(idx, values)]
        ax.errorbar(idx, values, yerr=[below, above], fmt="o", ms=4, color=color, ecolor="#9e9e9e", elinewidth=1,
                    capsize=2, mfc=color if filled else "white", mec=color, zorder=3, label=label)


def _levels(ax, cell: TrendCell) -> None:
    """Each segment's level, and the tolerance band around the current one."""
    for seg, level in segment_levels(cell.series):
        ax.hlines(level, seg.start - 0.4, seg.stop - 0.6, colors=LINE_COLOR, linewidth=1.2, zorder=2)
    learned, last = cell.learned, cell.series.segments()[-1]
    if learned.level is not None:
        low, high = learned.level * (1 - learned.tolerance), learned.level * (1 + learned.tolerance)
        ax.fill_between([last.start - 0.4, last.stop - 0.6], low, high, color=BAND_COLOR, alpha=0.12, linewidth=0,
                        zorder=1, label=f"±{learned.tolerance:.2%} tolerance")


def _marks(ax, cell: TrendCell) -> None:
    """The change points (dashed, with the step) and the software changes (a marker and its text)."""
    for change in cell.changes:
        x = change.index - 0.5
        ax.axvline(x, color=CHANGE_COLOR, linestyle="--", linewidth=1, zorder=2)
        ax.annotate(f"{change.step:+.1%}", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -2),
                    textcoords="offset points", va="top", fontsize=7, color=CHANGE_COLOR)
    for i, text in cell.software:
        shown = text if len(text) <= NOTE_CHARS else text[:NOTE_CHARS - 1] + "…"
        ax.plot([i], [0.0], marker="^", ms=6, color=SOFTWARE_COLOR, transform=ax.get_xaxis_transform(), clip_on=False,
                zorder=4)
        ax.annotate(shown, (i, 0.0), xycoords=("data", "axes fraction"), xytext=(3, 3), textcoords="offset points",
                    fontsize=6, color=SOFTWARE_COLOR, rotation=90, va="bottom")


def _axes(ax, series: Series, labels: Sequence[str] = ()) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    n = len(series.points)
    dates = list(labels) if len(labels) == n else [_short_date(p.when) for p in series.points]
    ax.set_xlim(-0.7, n - 0.3)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: dates[int(x)] if 0 <= x < n and x == int(x) else ""))
    ax.tick_params(labelsize=7)
    ax.set_ylabel("device speedup", fontsize=7)
    ax.grid(axis="y", color="#eeeeee", linewidth=0.6)
    lows = [p.low or p.value for p in series.points]
    highs = [p.high or p.value for p in series.points]
    bottom, top = min(lows), max(highs)
    pad = max((top - bottom) * 0.15, top * 0.004)
    ax.set_ylim(bottom - pad, top + 2 * pad)  # room above for the change labels


def trend_figure(cell: TrendCell):
    """The matplotlib figure of `cell`'s trend (the caller closes it: ``trend_chart`` saves and closes)."""
    fig, ax = _pyplot().subplots(figsize=SIZE_IN, dpi=DPI)
    fig.subplots_adjust(left=0.11, right=0.98, top=0.88, bottom=0.14)
    _points(ax, cell)
    _levels(ax, cell)
    _marks(ax, cell)
    _axes(ax, cell.series, cell.labels)
    ax.set_title(cell.test_id, fontsize=8, loc="left")
    ax.legend(fontsize=6, loc="upper right", frameon=False, ncol=3)
    return fig


def trend_chart(cell: TrendCell, index: int) -> Chart:
    """Cell `index`'s trend as a small PNG."""
    return Chart(chart_filename(index, cell.test_id), f"Trend of {cell.test_id}", caption(cell),
                 _png(trend_figure(cell)))


def trend_charts(trends: Trends) -> list[Chart]:
    return [trend_chart(cell, i) for i, cell in enumerate(trends.cells)]


# ---------------------------------------------------------------------------------------------------
# text


def changes_text(cell: TrendCell) -> str:
    """'no change' or '2 changes: -1.6% at run 6 (01-06), +0.8% at run 9 (01-09)'."""
    if not cell.changes:
        return "no change"
    where = ", ".join(f"{c.step:+.1%} at run {c.index + 1} ({_short_date(c.run_after.when)})" for c in cell.changes)
    return f"{len(cell.changes)} change{'s' * (len(cell.changes) != 1)}: {where}"


def caption(cell: TrendCell) -> str:
    of = states(cell)
    counted = sum(st in (COUNTED, ACCEPTED) for st in of)
    held = sum(st == SUSPECT for st in of)
    suspect = f", {held} held back as suspect" if held else ""
    text = (f"{len(of)} runs ({counted} counted{suspect}): tolerance {cell.learned.sentence()}; {changes_text(cell)}.")
    if cell.software:
        text += " Software: " + "; ".join(f"run {i + 1} {what}" for i, what in cell.software) + "."
    return text


def html_context(trends: Trends, charts: Sequence[Chart], figure: Any) -> dict:
    """The template's `trends`: `figure` makes a chart into what the template's figure macro reads."""
    return {"store": trends.store, "gpu": trends.gpu, "note": trends.note,
            "cells": [{"test_id": cell.test_id, "sentence": cell.learned.sentence(), "state": cell.learned.state,
                       "changes": changes_text(cell), "figure": figure(chart)}
                      for cell, chart in zip(trends.cells, charts)]}


def store_label(store: str) -> str:
    """How summary.md (a pull request's comment) names a store: an SQLite file by its name alone, a server
    by its kind and database, never the runner's folders, a host or a user."""
    if "://" not in store:
        return PurePath(store).name or "the history"
    scheme, rest = store.split("://", 1)
    database = rest.rsplit("/", 1)[-1].split("?", 1)[0] if "/" in rest else ""
    return f"{scheme.split('+', 1)[0]} database {database}".strip() if database else f"a {scheme} server"


def markdown_lines(trends: Trends) -> list[str]:
    """summary.md's "Tolerance learned" table."""
    out = [f"### Tolerance learned ({md_text(trends.gpu)}, history {md_code(store_label(trends.store))})", ""]
    if not trends.cells:
        return out + ["No cell of this run has a device-time series in the history.", ""]
    out += ["| cell | runs | tolerance | changes |", "| --- | --- | --- | --- |"]
    out += [f"| {md_code(c.test_id, in_table=True)} | {len(c.series.points)} | {md_text(c.learned.sentence())} "
            f"| {md_text(changes_text(c))} |" for c in trends.cells]
    return out + ([""] + [trends.note] if trends.note else []) + [""]
