"""index.html: one self-contained page, made from templates/report.html.j2 (autoescape on)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ampbench.report.charts import Chart
from ampbench.report.figure_text import DASH, fmt_ms, fmt_number
from ampbench.report.format import (
    NEEDS_A_LOOK,
    ROW_HEADERS,
    SMOKE_NOTE,
    device_noun,
    foreign_note,
    model_rows,
    verdict_counts,
)
from ampbench.report.needs_look import Flagged, needs_a_look
from ampbench.report.paired_cells import PAIRED_HEADERS, PAIRED_TITLE, paired_rows, trees
from ampbench.report.speed_cells import (
    ENERGY_HEADERS,
    ENERGY_NOTE,
    ENERGY_TITLE,
    METHOD_LABELS,
    OUTLIER_HEADERS,
    OUTLIER_NOTE,
    OUTLIER_TITLE,
    MatrixEntry,
    energy_cells,
    energy_row,
    has_figure,
    host_bound_cells,
    kernel_change_cells,
    matrix,
    notable,
    outlier_cells,
    outlier_row,
    over_fp32,
    used_methods,
    versus_matrices,
)
from ampbench.results import MODE_SIDE, ConvergenceRecord, MemoryRecord, PairedRecord, RatioKind, Run, SpeedRecord
from ampbench.results.ratios import DEVICE, WALL
from ampbench.results.run import mode_of, model_of
from ampbench.verdict import Verdict

if TYPE_CHECKING:  # compare imports the run reader; rendering only needs its types
    from ampbench.report.compare import Comparison
    from ampbench.report.trends import Trends

# the same in HTML with symbols every sans-serif font has (browsers without an emoji font show boxes)
HTML_ICONS = {
    Verdict.PASS.value: "✓",
    Verdict.IMPROVED.value: "▲",
    **{v.value: "✗" for v in Verdict if v.failing},
    Verdict.INCONCLUSIVE.value: "⚠",
    Verdict.INPUT_BOUND.value: "⚠",
    Verdict.EXPECTED_LAG.value: "–",
    Verdict.NO_BASELINE.value: "–",
}


# ---------------------------------------------------------------------------------------------------
# html: the page is templates/report.html.j2 with autoescape on; here only plain data is made for it

# the CSS class of each verdict; any other verdict string (a future kind's, or a crafted one) gets
# "v-other", so nothing from the JSON ever becomes markup
VERDICT_CLASSES = {
    Verdict.PASS.value: "v-pass",
    Verdict.IMPROVED.value: "v-improved",
    **{v.value: "v-regression" for v in Verdict if v.failing},
    Verdict.INCONCLUSIVE.value: "v-inconclusive",
    Verdict.INPUT_BOUND.value: "v-inconclusive",
    Verdict.EXPECTED_LAG.value: "v-no-baseline",
    Verdict.NO_BASELINE.value: "v-no-baseline",
    "missing": "v-missing",
    "new": "v-new",
}
OTHER_VERDICT_CLASS = "v-other"


def verdict_class(verdict: str) -> str:
    return VERDICT_CLASSES.get(verdict, OTHER_VERDICT_CLASS)


@dataclass(frozen=True)
class HtmlCell:
    """One table cell: text, marked with a verdict's class (and its name as a tooltip) where `cls` is set."""

    text: str
    cls: str | None = None
    title: str | None = None


def _verdict_cell(verdict: str | None) -> HtmlCell:
    if not verdict:
        return HtmlCell(DASH)
    return HtmlCell(f"{HTML_ICONS.get(verdict, '')} {verdict}".strip(), verdict_class(verdict))


def _verdict_span(verdict: str | None) -> dict | None:
    cell = _verdict_cell(verdict)
    return {"label": cell.text, "cls": cell.cls} if cell.cls else None


def _flag_cell(text: str, verdict: str | None) -> HtmlCell:
    if verdict not in NEEDS_A_LOOK:
        return HtmlCell(text)
    return HtmlCell(f"{text} {HTML_ICONS[verdict]}", verdict_class(verdict), verdict)


def _chips(counts: Mapping[str, int]) -> list[dict]:
    return [{"count": n, "verdict": v, "cls": verdict_class(v)} for v, n in counts.items()]


def _table(headers: Sequence[str], rows: Iterable[Sequence[HtmlCell]], fp32_rows: Iterable[bool] = ()) -> dict:
    flags = list(fp32_rows)
    return {"headers": list(headers),
            "rows": [{"cells": list(r),
                      "fp32": flags[i] if i < len(flags) else False} for i, r in enumerate(rows)]}


def _figure(chart: Chart) -> dict:
    return {"title": chart.title, "caption": chart.caption, "data": base64.b64encode(chart.png).decode("ascii")}


def _run_tables(run: Run) -> dict:
    """The per-model tables and the table of other tests, as the template's `run_tables` reads them."""
    models = []
    verdict_col = ROW_HEADERS.index("speed verdict")
    for model, rows in model_rows(run).items():
        body = []
        for r in rows:
            flags = r.flags()
            cells = [_flag_cell(c, flags[i]) if i in flags else HtmlCell(c) for i, c in enumerate(r.cells())]
            cells[verdict_col] = _verdict_cell(r.verdict)
            body.append(cells)
        models.append((model, _table(ROW_HEADERS, body, [r.fp32_only for r in rows])))
    # a paired cell has its own table (``_paired_context``)
    others = [c for c in run.cells if not isinstance(c, (SpeedRecord, MemoryRecord, ConvergenceRecord, PairedRecord))]
    other_table = _table(
        ["test", "kind", "verdict", "message"],
        ([HtmlCell(c.test_id), HtmlCell(c.kind), _verdict_cell(c.verdict), HtmlCell(c.message or DASH)]
         for c in others),
    ) if others else None
    return {"models": models, "others": other_table}


def _matrix_cell(entry: MatrixEntry | None) -> dict | None:
    """A matrix cell: the speedup with its verdict's sign and colour, its interval, the device-time method."""
    if entry is None:
        return None
    verdict = entry.verdict
    interval = f"[{entry.estimate.low:.2f}, {entry.estimate.high:.2f}]" if entry.estimate else None
    tip = [t for t in (verdict, METHOD_LABELS.get(entry.method or "")) if t]
    # as in summary.md: "no baseline" on every cell of a fresh GPU is told by the colour alone
    icon = "" if verdict == Verdict.NO_BASELINE.value else HTML_ICONS.get(verdict or "", "")
    return {"value": f"{fmt_number(entry.value, '.2f', 'x')} {icon}".strip(),
            "cls": verdict_class(verdict) if verdict else None, "title": "; ".join(tip) or None,
            "interval": interval, "method": entry.method}


def _matrix(run: Run, kind: RatioKind, title: str, note: str) -> dict:
    return _matrix_context(title, note, *matrix(run, kind))


# what each matrix of a ratio over fp32 says of its cells, by the ratio's name
MATRIX_NOTES = {
    DEVICE.name: "Each cell: the speedup, its interval and how device time was measured; colour and sign: the "
                 "device-time verdict against the baseline.",
    WALL.name: "What eager training gets on this host: the same steps by the wall clock, launches and host "
               "overhead included. Colour and sign: the wall-clock verdict.",
}
MATRIX_NOTE = "Each cell: the speedup and its interval; colour and sign: its verdict against the baseline."


def _matrix_context(title: str, note: str, modes: list[str],
                    rows: list[tuple[str, list[MatrixEntry | None]]]) -> dict:
    return {"title": title, "note": note, "modes": modes,
            "rows": [{"model": model, "cells": [_matrix_cell(e) for e in row]} for model, row in rows]}


def _speed_context(run: Run) -> dict | None:
    """The speed section, as summary.md has it: the device-time matrix (the gate), the wall-clock one
    beside it, the host-bound cells and the kernel changes; a run from before device time gets its one
    wall-clock matrix."""
    shown = [kind for kind in over_fp32() if has_figure(run, kind)]
    if not shown:
        return None
    if DEVICE in shown:
        matrices = [_matrix(run, kind, kind.title, MATRIX_NOTES.get(kind.name, MATRIX_NOTE)) for kind in shown]
    else:
        matrices = [_matrix(run, WALL, "Speedup over fp32", "Wall-clock speedup of each mode's training step and "
                                                            "its interval; colour and sign: its verdict.")]
    matrices += [_matrix_context(m.title, m.note, m.modes, m.rows) for m in versus_matrices(run)]
    host = host_bound_cells(run)
    noun = device_noun(run)
    host_table = _table(
        ["model", "mode", f"{noun} idle", "host overhead per step", f"{noun} busy per step", "eager step"],
        ([HtmlCell(model_of(c)), HtmlCell(mode_of(c)),
          HtmlCell(fmt_number(None if (m := c.side(MODE_SIDE)).idle_share is None else 100 * m.idle_share, ".0f", "%")),
          HtmlCell(fmt_ms(m.host_overhead_ms)), HtmlCell(fmt_ms(m.busy_ms)),
          HtmlCell(fmt_ms(c.ratio(WALL).side(MODE_SIDE).step_ms))] for c in host),
    ) if host else None
    energy = energy_cells(run)
    energy_table = _table(ENERGY_HEADERS, ([HtmlCell(t) for t in energy_row(c, e)] for c, e in energy)) if energy \
        else None
    outliers = outlier_cells(run)
    outlier_table = _table(OUTLIER_HEADERS, ([HtmlCell(t) for t in outlier_row(c)] for c in outliers)) \
        if outliers else None
    changes = [{"notable": notable(c), "verdict": _verdict_span(v.value if (v := c.ratio(DEVICE).verdict) else None),
                "test_id": c.test_id,
                "lines": text.split("; ")} for c, text in kernel_change_cells(run)]
    return {
        "matrices": matrices,
        "methods": [(m, METHOD_LABELS[m]) for m in used_methods(run)],
        "host_bound": host_table,
        "host_bound_count": len(host),
        "energy": energy_table, "energy_title": ENERGY_TITLE, "energy_note": ENERGY_NOTE,
        "outliers": outlier_table, "outlier_title": OUTLIER_TITLE, "outlier_note": OUTLIER_NOTE,
        "device_noun": noun,
        "kernel_changes": [c for c in changes if c["notable"]],
        "kernel_drift": [c for c in changes if not c["notable"]],
    }


def _paired_context(run: Run) -> dict | None:
    """An A/B run's paired cells, as summary.md has them: one row per figure of each cell, its verdict marked."""
    rows = paired_rows(run)
    if not rows:
        return None
    body = [[*(HtmlCell(c) for c in r.cells()), _verdict_cell(r.verdict.value if r.verdict else None)] for r in rows]
    return {"title": PAIRED_TITLE, "trees": trees(run), "table": _table(PAIRED_HEADERS, body)}


def _comparison_context(comparison: "Comparison", charts: Sequence[Chart]) -> dict:
    headers = ["test", "figure", "old", "new", "change", "verdict", "message"]
    verdict_col = headers.index("verdict")

    def table(rows: Sequence, with_message: bool) -> dict:
        body = []
        for r in rows:
            cells = [HtmlCell(c) for c in r.cells()] + ([HtmlCell(r.message)] if with_message else [])
            cells[verdict_col] = _verdict_cell(r.verdict)
            body.append(cells)
        return _table(headers if with_message else headers[:-1], body)

    old_tables = _run_tables(comparison.old)
    return {
        "old_label": comparison.old.label,
        "old_gpu": comparison.old.gpu,
        "new_gpu": comparison.new.gpu,
        "notes": list(comparison.notes),
        "counts": _chips(comparison.counts()),
        "charts": [_figure(c) for c in charts],
        "notable": table([r for r in comparison.rows if r.verdict != Verdict.PASS.value], with_message=True),
        "every": table(comparison.rows, with_message=False),
        "old_software": comparison.old.software(),
        "old_tables": old_tables,
    }


_template_cache: list = []


def _template():
    """The page template, loaded once; jinja2 is imported here so `ampbench compare` never needs it."""
    if not _template_cache:
        import jinja2

        env = jinja2.Environment(
            loader=jinja2.PackageLoader("ampbench", "templates"),
            autoescape=True,  # everything interpolated is text; the template's own markup is all there is
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
        _template_cache.append(env.get_template("report.html.j2"))
    return _template_cache[0]


def _flagged(f: Flagged) -> dict:
    """A line of "Needs a look": what decided the cell and the kernel that moved most, the details behind it."""
    kernel = f.kernel
    return {"verdict": _verdict_span(f.cell.verdict), "test_id": f.cell.test_id, "figure": f.figure,
            "change": f.change, "line": f.line, "message": f.cell.message or "",
            "summary": f.summary if f.figure is None else "",
            "kernel": None if kernel is None else {"short": kernel.short, "name": kernel.name, "how": kernel.how,
                                                   "change": f"{kernel.change_ms:+.3f} ms"},
            "changes": f.kernel_changes, "kernels": [(name, f"{ms:.3f}") for name, ms in f.kernels]}


def render_html(run: Run, charts: Sequence[Chart], comparison: "Comparison | None" = None,
                compare_charts: Sequence[Chart] = (), failures: Sequence[tuple[str, str]] = (),
                trends: "Trends | None" = None, trend_charts: Sequence[Chart] = ()) -> str:
    """index.html: one file, CSS inline and charts as data: URIs, so it opens anywhere, offline."""
    counts = verdict_counts(run.cells)
    trends_context = None
    if trends is not None:
        from ampbench.report.trends import html_context

        trends_context = html_context(trends, trend_charts, _figure)
    return _template().render(
        title=f"ampbench report — {run.gpu}",
        gpu=run.gpu,
        run_file=run.path.name,
        run_software=run.software(),
        kinds=[(kind, _chips(counts[kind])) for kind in run.kinds()] if run.cells else [],
        foreign_note=foreign_note(run) if run.foreign else None,
        failures=list(failures),
        smoke_note=SMOKE_NOTE if run.smoke else None,
        flagged=[_flagged(f) for f in needs_a_look(run)],
        paired=_paired_context(run),
        speed=_speed_context(run),
        comparison=_comparison_context(comparison, compare_charts) if comparison is not None else None,
        charts=[_figure(c) for c in charts],
        trends=trends_context,
        run_tables_of=_run_tables(run),
    )
