"""Turn an ampbench ``--benchmark-json`` file into a report: tables like the seeds' (mode, step time,
throughput, speedup, memory, accuracy, per GPU), PNG charts, one self-contained ``index.html`` and a
``summary.md`` short enough for a CI job summary.

Nothing here imports torch or pytest: a report is made on machines that only hold the JSON.
matplotlib is imported inside the chart functions, with the Agg backend, so importing this package
has no side effects.

A run is read by ``ampbench.results`` into typed records; here `junit` adds a JUnit XML's failures;
`compare` holds two runs' cells against each other (``ampbench compare``, the report's ``--compare``);
`format` makes the per-model tables from figures that `figure_text` writes as text (for the pages and
for compare's table); `speed_cells` chooses the speed figures both pages show (the device-time and
wall-clock matrices, host-bound cells, kernel changes); `charts`, `markdown` and `html` render them;
`trends` reads a run history's series of the run's cells and draws them (``--history``); `build` makes
every file of a report and writes the folder, saying how far it got on large runs through
``ampbench.progress``. Only the rendering modules know of `compare` (for its types), and `compare`
needs nothing of them: it takes its text from `figure_text` and its progress from ``ampbench.progress``,
as the report does. The names below are re-exported for ``from ampbench.report import ...``.
"""

from ampbench.report.build import REPORT_MARKER, build_report, write_report
from ampbench.report.charts import MODE_COLORS, VERDICT_COLORS, Chart, comparison_chart, run_charts
from ampbench.report.figure_text import (
    DASH,
    VERDICT_ICONS,
    fmt_accuracy,
    fmt_bytes,
    fmt_ms,
    fmt_number,
    fmt_pct,
    fmt_rate,
    fmt_speedup,
    verdict_label,
)
from ampbench.report.format import (
    NEEDS_A_LOOK,
    ROW_HEADERS,
    SMOKE_NOTE,
    Row,
    attention,
    foreign_note,
    model_rows,
    verdict_counts,
)
from ampbench.report.html import HTML_ICONS, OTHER_VERDICT_CLASS, VERDICT_CLASSES, HtmlCell, render_html, verdict_class
from ampbench.report.junit import failed_tests
from ampbench.report.markdown import render_comparison_markdown, render_markdown, speedup_matrix
from ampbench.results import (
    FP32_MODE,
    KINDS,
    SCHEMA_VERSION,
    VERDICT_ORDER,
    Run,
    RunError,
    load_run,
    order_modes,
    parse_run,
)

__all__ = [
    "DASH", "HTML_ICONS", "KINDS", "MODE_COLORS", "NEEDS_A_LOOK", "OTHER_VERDICT_CLASS",
    "FP32_MODE", "REPORT_MARKER", "ROW_HEADERS", "SCHEMA_VERSION", "SMOKE_NOTE", "VERDICT_CLASSES",
    "VERDICT_COLORS", "VERDICT_ICONS", "VERDICT_ORDER", "Chart", "HtmlCell", "Row", "Run", "RunError", "attention",
    "build_report", "comparison_chart", "failed_tests", "fmt_accuracy", "fmt_bytes", "fmt_ms", "fmt_number",
    "fmt_pct", "fmt_rate", "fmt_speedup", "foreign_note", "load_run", "model_rows", "order_modes", "parse_run",
    "render_comparison_markdown", "render_html", "render_markdown", "run_charts", "speedup_matrix",
    "verdict_class", "verdict_counts", "verdict_label", "write_report",
]
