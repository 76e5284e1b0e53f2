"""summary.md: the verdicts and the speedup matrix, short enough for a CI job summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

from ampbench.report.figure_text import DASH, VERDICT_ICONS, plural, verdict_label
from ampbench.report.format import (
    NEEDS_A_LOOK,
    ROW_HEADERS,
    SMOKE_NOTE,
    SPEEDUP_NOTE,
    device_noun,
    foreign_note,
    model_rows,
    verdict_counts,
)
from ampbench.report.md_text import md_code, md_text
from ampbench.report.needs_look import needs_a_look
from ampbench.report.paired_cells import PAIRED_HEADERS, PAIRED_TITLE, paired_rows, trees
from ampbench.report.speed_cells import (
    ENERGY_HEADERS,
    ENERGY_NOTE,
    ENERGY_TITLE,
    OUTLIER_HEADERS,
    OUTLIER_NOTE,
    OUTLIER_TITLE,
    MatrixEntry,
    energy_cells,
    energy_row,
    host_bound_cells,
    kernel_change_cells,
    matrix,
    notable,
    outlier_cells,
    outlier_row,
    over_fp32,
    versus_matrices,
)
from ampbench.results import MODE_SIDE, RatioKind, Run
from ampbench.results.ratios import DEVICE, WALL
from ampbench.verdict import Verdict

if TYPE_CHECKING:  # compare imports the run reader; rendering only needs its types
    from ampbench.report.compare import Comparison
    from ampbench.report.trends import Trends


def _flag_md(text: str, verdict: Verdict | None) -> str:
    return f"{text} {VERDICT_ICONS[verdict]}" if verdict in NEEDS_A_LOOK else text


def _md_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table of plain-text cells: each is escaped (``md_text``), so nothing of a run's text is markup."""
    lines = ["| " + " | ".join(md_text(h) for h in headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _counts_line(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {md_text(verdict_label(v))}" for v, n in counts.items())


def speedup_matrix(run: Run, kind: RatioKind = WALL) -> tuple[list[str], list[list[str]]]:
    """Models down, modes across, each cell 'speedup icon': the whole run at one glance, in one ratio over
    fp32 (the wall-clock speedup of eager steps by default; DEVICE: device time, the gate's figure), each
    with its verdict where the cell wrote one apart. fp32 is the side of every column's ratio, not a column."""
    modes, entries = matrix(run, kind)
    rows = []
    for model, row in entries:
        texts = [model]
        for e in row:
            texts.append(DASH if e is None else f"{e.value:.2f}x {_icon(e)}".strip())
        rows.append(texts)
    return ["model", *modes], rows


def _has_values(rows: list[list[str]]) -> bool:
    return any(cell != DASH for row in rows for cell in row[1:])


def _icon(entry: MatrixEntry) -> str:
    # "no baseline" on every cell of a fresh GPU would only add noise to the matrix
    return "" if entry.verdict == Verdict.NO_BASELINE.value else VERDICT_ICONS.get(entry.verdict or "", "")


def _with_interval(entry: MatrixEntry | None) -> str:
    if entry is None:
        return DASH
    interval = f" [{entry.estimate.low:.2f}, {entry.estimate.high:.2f}]" if entry.estimate else ""
    return f"{entry.value:.2f}x{interval} {_icon(entry)}".strip()


def versus_lines(run: Run) -> list[str]:
    """The compiled cells' second ratios: a matrix of compile gains, one of fp8 over compiled amp_bf16,
    each value with its interval."""
    out = []
    for m in versus_matrices(run):
        rows = [[model, *(_with_interval(e) for e in entries)] for model, entries in m.rows]
        out += [f"### {m.title}", "", _md_table(["model", *m.modes], rows), ""]
    return out


def host_bound_lines(run: Run) -> list[str]:
    """One line per speed cell whose eager step left the device idle more than a tenth of the time."""
    out = []
    noun = device_noun(run)
    for c in host_bound_cells(run):
        share, overhead = c.side(MODE_SIDE).idle_share, c.side(MODE_SIDE).host_overhead_ms
        cell = f"- {md_code(c.model)} {md_text(c.mode)}"
        out.append(f"{cell}: the {noun} idles {share:.0%} of the eager step "
                   f"({overhead:.2f} ms per step waiting for the host)" if share is not None and overhead is not None
                   else cell)
    return out


def kernel_change_lines(run: Run) -> list[str]:
    """The kernel changes of every speed cell whose device verdict is not a plain pass."""
    return [f"- {md_code(c.test_id)} ({v.value if (v := c.ratio(DEVICE).verdict) else DASH}): {md_text(text)}"
            for c, text in kernel_change_cells(run) if notable(c)]


def paired_lines(run: Run) -> list[str]:
    """The table of an A/B run's paired cells (``paired_cells.paired_rows``), under the trees it held against
    each other; none where the run holds no paired cell."""
    rows = paired_rows(run)
    if not rows:
        return []
    return [f"### {PAIRED_TITLE}", "", f"_{md_text(trees(run))}_", "",
            _md_table(PAIRED_HEADERS, ([*r.cells(), verdict_label(r.verdict)] for r in rows)), ""]


def render_markdown(run: Run, comparison: "Comparison | None" = None, failures: Sequence[tuple[str, str]] = (),
                    trends: "Trends | None" = None, paired_table: Sequence[str] = ()) -> str:
    """summary.md: the verdicts and the speedup matrix, short enough for $GITHUB_STEP_SUMMARY; with
    `trends`, a sparkline of the last runs of each cell that moved or fails, ending in this run's own
    figure, and how far each cell's tolerance has been learned. `paired_table`: the Markdown lines of a
    paired comparison of a pull request's base and head, measured together; the summary leads with them,
    under its title, as the pull request's comment should. Without them, an A/B run's own paired cells lead
    it (``paired_lines``)."""
    out = [f"## ampbench: {md_text(run.gpu)}", ""]
    out += [*paired_table, ""] if paired_table else paired_lines(run)
    if run.smoke:
        out += [f"> **{SMOKE_NOTE}**", ""]
    out.append(" · ".join(md_text(f"{k} {v}") for k, v in run.software() if k != "device"))
    out.append("")
    counts = verdict_counts(run.cells)
    for kind in run.kinds():
        n = plural(sum(counts[kind].values()), "cell")
        out.append(f"- **{md_text(kind)}** ({n}): {_counts_line(counts[kind])}")
    if not run.cells:
        out.append("- no ampbench results in this run (every test skipped?)")
    out.append("")
    if failures:
        out += [f"### Failed tests ({len(failures)})", ""]
        out += [f"- {md_code(name)}: {md_text(msg)}" for name, msg in failures]
        out.append("")
    if run.foreign:
        out += [f"> {md_text(foreign_note(run))}", ""]
    flagged = needs_a_look(run)
    if flagged:
        out += ["### Needs a look", ""]
        out += [f"- {md_text(verdict_label(f.cell.verdict))} {md_code(f.cell.test_id)}: {md_text(f.summary)}"
                for f in flagged]
        out.append("")
    device = speedup_matrix(run, DEVICE)
    if _has_values(device[1]):
        for ratio_kind in over_fp32():
            headers, rows = device if ratio_kind is DEVICE else speedup_matrix(run, ratio_kind)
            if _has_values(rows):
                out += [f"### {ratio_kind.title}", "", _md_table(headers, rows), ""]
    else:
        headers, rows = speedup_matrix(run)
        if rows:
            out += ["### Speedup over fp32", "", _md_table(headers, rows), ""]
    out += versus_lines(run)
    host = host_bound_lines(run)
    if host:
        out += [f"### Host-bound cells ({len(host)})", "", *host, ""]
    energy = energy_cells(run)
    if energy:
        out += [f"### {ENERGY_TITLE}", "", _md_table(ENERGY_HEADERS, (energy_row(c, e) for c, e in energy)), "",
                f"_{ENERGY_NOTE}_", ""]
    outliers = outlier_cells(run)
    if outliers:
        out += [f"### {OUTLIER_TITLE}", "", _md_table(OUTLIER_HEADERS, (outlier_row(c) for c in outliers)), "",
                f"_{OUTLIER_NOTE}_", ""]
    changes = kernel_change_lines(run)
    if changes:
        out += ["### Kernel changes against the baseline", "", *changes, ""]
    if comparison is not None:
        out += render_comparison_markdown(comparison)
    if trends is not None:
        from ampbench.report.sparklines import movement_lines
        from ampbench.report.trends import markdown_lines

        out += movement_lines(run, trends, comparison)
        out += markdown_lines(trends)
    tables = model_rows(run)
    if tables:
        out += ["<details><summary>Per-model tables</summary>", ""]
        for model, model_table in tables.items():
            cells = [r.marked_cells(_flag_md) for r in model_table]
            out += [f"#### {md_text(model)}", "", _md_table(ROW_HEADERS, cells), ""]
        out += [f"_{SPEEDUP_NOTE}_", "", "</details>", ""]
    return "\n".join(out).rstrip() + "\n"


def render_comparison_markdown(comparison: "Comparison") -> list[str]:
    out = [f"### Compared with {md_text(comparison.old.label)}", ""]
    if comparison.notes:
        out += [f"> {md_text(n)}" for n in comparison.notes] + [""]
    out.append(f"{_counts_line(comparison.counts())}")
    out.append("")
    changed = [r for r in comparison.rows if r.verdict != Verdict.PASS]
    headers = ["test", "figure", "old", "new", "change", "verdict"]
    if changed:
        out += [_md_table(headers, (r.cells() for r in changed)), ""]
    out += ["<details><summary>Every compared test</summary>", "",
            _md_table(headers, (r.cells() for r in comparison.rows)),
            "", "</details>", ""]
    return out
