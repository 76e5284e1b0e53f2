"""PNG charts of a run and of a comparison. matplotlib is imported inside the chart functions, with the
Agg backend, so importing this module has no side effects."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ampbench.modes import order_modes
from ampbench.report.speed_cells import METHOD_LABELS, has_figure, used_methods
from ampbench.results import MODE_SIDE, MemoryRecord, RatioKind, Record, Run, SpeedRecord
from ampbench.results.ratios import DEVICE, WALL
from ampbench.results.run import mode_of, model_of
from ampbench.verdict import VERDICT_ORDER, Verdict

if TYPE_CHECKING:  # compare imports the run reader; rendering only needs its types
    from ampbench.report.compare import Comparison

MODE_COLORS = {
    "fp32": "#7f7f7f",
    "tf32": "#9467bd",
    "amp_fp16": "#1f77b4",
    "amp_bf16": "#2ca02c",
    "fp16_master": "#17becf",
    "fp16": "#ff7f0e",
    "bf16": "#8c564b",
}
VERDICT_COLORS = {
    Verdict.PASS: "#2e7d32",
    Verdict.IMPROVED: "#1565c0",
    **{v: "#c62828" for v in Verdict if v.failing},
    Verdict.INCONCLUSIVE: "#ef6c00",
    Verdict.INPUT_BOUND: "#ef6c00",
    Verdict.EXPECTED_LAG: "#757575",
    Verdict.NO_BASELINE: "#757575",
}


# ---------------------------------------------------------------------------------------------------
# charts


@dataclass(frozen=True)
class Chart:
    filename: str
    title: str
    caption: str
    png: bytes = field(repr=False)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _mode_color(mode: str, modes: Sequence[str]) -> str:
    if mode in MODE_COLORS:
        return MODE_COLORS[mode]
    spare = ["#e377c2", "#bcbd22", "#d62728", "#aec7e8", "#98df8a"]
    return spare[modes.index(mode) % len(spare)]


# models a bar chart draws: past this many, bars are a pixel or two wide and a chart tells nothing the
# tables do not (and drawing one costs about a millisecond a bar)
CHART_MODELS = 40


def _first_models(models: list[str], what: str) -> tuple[list[str], str]:
    """The models a chart draws, and the sentence its caption adds where it leaves some out."""
    if len(models) <= CHART_MODELS:
        return models, ""
    return models[:CHART_MODELS], (f" The first {CHART_MODELS} of the run's {len(models)} models with {what} are "
                                   "drawn; every cell is in the tables.")


@dataclass
class _Bars:
    """One mode's bars: their positions and heights, error bars, markers and which are hatched."""

    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    lo_err: list[float] = field(default_factory=list)
    hi_err: list[float] = field(default_factory=list)
    mx: list[float] = field(default_factory=list)  # the markers' positions and values
    my: list[float] = field(default_factory=list)
    hatch: list[bool] = field(default_factory=list)


def _mode_bars(cells: list, offset: float, value: Callable[[Any], float | None],
               interval: Callable[[Any], tuple[float, float] | None] | None,
               marker: Callable[[Any], float | None] | None, hatched: Callable[[Any], bool] | None) -> _Bars:
    """The bars of one mode's `cells` (one per model drawn, None where it has none), `offset` from each
    model's tick."""
    bars = _Bars()
    for i, c in enumerate(cells):
        y = None if c is None else value(c)
        if y is None:  # a model without this mode: the chart keeps only the cells with a value
            continue
        x = i + offset
        bars.xs.append(x)
        bars.ys.append(y)
        bars.hatch.append(bool(hatched and hatched(c)))
        iv = interval(c) if interval else None
        bars.lo_err.append(max(y - iv[0], 0.0) if iv else 0.0)
        bars.hi_err.append(max(iv[1] - y, 0.0) if iv else 0.0)
        m = marker(c) if marker else None
        if m is not None:
            bars.mx.append(x)
            bars.my.append(m)
    return bars


def _draw_bars(ax, bars: _Bars, mode: str, modes: list[str], width: float, with_errors: bool,
               marker_label: str | None) -> bool:
    """Draws one mode's bars; whether any of them is hatched. `marker_label` labels its markers in the
    legend (None: an earlier mode's already do)."""
    drawn = ax.bar(bars.xs, bars.ys, width=width * 0.92, color=_mode_color(mode, modes), label=mode, zorder=2)
    any_hatched = False
    for bar, h in zip(drawn, bars.hatch):
        if h:
            bar.set_hatch("///")
            bar.set_edgecolor("#fff")
            any_hatched = True
    if with_errors and any(bars.lo_err + bars.hi_err):
        ax.errorbar(bars.xs, bars.ys, yerr=[bars.lo_err, bars.hi_err], fmt="none", ecolor="#222", elinewidth=1,
                    capsize=2, zorder=3)
    if bars.mx:
        ax.scatter(bars.mx, bars.my, marker="_", s=max(60, 900 * width), linewidths=2.2, color="#000",
                   label=marker_label, zorder=4)
    return any_hatched


def _grouped_bars(
    run: Run,
    kind: type[Record],
    value: Callable[[Any], float | None],
    *,
    title: str,
    ylabel: str,
    interval: Callable[[Any], tuple[float, float] | None] | None = None,
    marker: Callable[[Any], float | None] | None = None,
    marker_label: str = "",
    unity_line: float | None = None,
    log: bool = False,
    hatched: Callable[[Any], bool] | None = None,
    hatched_label: str = "",
) -> tuple[bytes, str] | None:
    """Bars grouped by model, one colour per mode, and the sentence the caption adds where some models
    are left out (CHART_MODELS); None when no cell has a value. Bars of cells for which `hatched` is
    true are drawn hatched (a figure other than the chart's own)."""
    cells = [c for c in run.of_kind(kind) if (v := value(c)) is not None and v > (0 if log else -math.inf)]
    if not cells:
        return None
    models, left_out = _first_models(list(dict.fromkeys(map(model_of, cells))), "this figure")
    drawn = set(models)
    cells = [c for c in cells if c.model in drawn]
    modes = order_modes(map(mode_of, cells))
    plt = _pyplot()
    width = min(0.8 / max(len(modes), 1), 0.3)
    # as wide as the HTML page's column (about 1220 px at 100 dpi), whatever the number of models
    fig, ax = plt.subplots(figsize=(12.0, 4.8), dpi=100)
    crowded = len(models) > 9
    fig.subplots_adjust(left=0.065, right=0.99, top=0.92, bottom=0.27 if crowded else 0.2)
    by_key = {(c.model, c.mode): c for c in cells}
    marked = any_hatched = False
    for j, mode in enumerate(modes):
        bars = _mode_bars([by_key.get((model, mode)) for model in models], (j - (len(modes) - 1) / 2) * width,
                          value, interval, marker, hatched)
        any_hatched |= _draw_bars(ax, bars, mode, modes, width, interval is not None,
                                  marker_label if not marked else None)
        marked = marked or bool(bars.mx)
    if any_hatched:
        ax.bar([0], [0], width=0, color="#bbb", hatch="///", edgecolor="#fff", label=hatched_label)
    _finish_axes(ax, models, ylabel, title, crowded, unity_line, log)
    ax.legend(ncol=min(len(modes) + (1 if marked else 0) + (1 if any_hatched else 0), 9), fontsize=8, frameon=False,
              loc="upper center", bbox_to_anchor=(0.5, -0.22 if crowded else -0.12))
    return _png(fig), left_out


def _finish_axes(ax, models: list[str], ylabel: str, title: str, crowded: bool, unity_line: float | None,
                 log: bool) -> None:
    """The 1x line, scale, ticks, labels and grid of a bar chart over `models`."""
    if unity_line is not None:
        ax.axhline(unity_line, color="#444", linestyle="--", linewidth=1, zorder=1)
    if log:
        ax.set_yscale("log")
    ax.set_xticks(range(len(models)))
    ax.set_xticklabels(models, rotation=20 if crowded else 0, ha="right" if crowded else "center")
    ax.set_xlim(-0.6, len(models) - 0.4)
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left", fontsize=12)
    ax.grid(axis="y", color="#ddd", zorder=0)
    ax.spines[["top", "right"]].set_visible(False)


def _png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    # fixed margins (set where each figure is made) instead of bbox_inches="tight", which draws every
    # figure twice: a full-tier report must render in seconds
    fig.savefig(buf, format="png")
    _pyplot().close(fig)
    return buf.getvalue()


def run_charts(run: Run) -> list[Chart]:
    """The charts of one run; a chart without data (e.g. memory on a CPU smoke run) is left out."""
    charts: list[Chart] = []

    def add(filename: str, title: str, caption: str, drawn: tuple[bytes, str] | None) -> None:
        if drawn is not None:
            png, left_out = drawn
            charts.append(Chart(filename, title, caption + left_out, png))

    add("speedup.png", *_speedup_chart(run))

    mem_kind = MemoryRecord if any(c.memory_ratio is not None for c in run.of_kind(MemoryRecord)) else SpeedRecord
    add(
        "memory.png", "Peak memory against fp32",
        "Peak allocated memory of one training step, as a fraction of fp32's; below 1 the mode saves memory.",
        _grouped_bars(run, mem_kind, lambda c: c.memory_ratio, title=f"Peak memory / fp32 — {run.gpu}",
                      ylabel="memory ratio (x)", unity_line=1.0),
    )
    add(
        "max_batch.png", "Largest batch against fp32",
        "Largest batch that fits in memory, as a multiple of fp32's.",
        _grouped_bars(run, MemoryRecord, lambda c: c.max_batch_ratio, title=f"Largest batch / fp32 — {run.gpu}",
                      ylabel="largest batch (x fp32)", unity_line=1.0),
    )
    add(
        "throughput.png", "Throughput",
        "Training samples per second of each mode (log scale: models differ by orders of magnitude).",
        _grouped_bars(run, SpeedRecord, lambda c: c.side(MODE_SIDE).throughput, title=f"Throughput — {run.gpu}",
                      ylabel="samples / s", log=True),
    )
    return charts


def _speedup_chart(run: Run) -> tuple[str, str, tuple[bytes, str] | None]:
    """(title, caption, PNG) of the speedup chart: device-time speedups where the run measured them (the
    gate's figure), each cell's wall-clock speedup where it did not; the title and caption say which."""
    device = has_figure(run, DEVICE)
    mixed = device and any(c.ratio(DEVICE).speedup is None and c.ratio(WALL).speedup is not None
                           for c in run.of_kind(SpeedRecord))

    def figure(c: SpeedRecord) -> RatioKind:
        return DEVICE if device and c.ratio(DEVICE).speedup is not None else WALL

    def interval(c: SpeedRecord) -> tuple[float, float] | None:
        est = c.estimate(figure(c))
        return (est.low, est.high) if est else None

    shown = DEVICE if device else WALL
    title = f"Speedup over fp32 in {shown.scope}"
    what = f"{WALL.scope} time of eager training steps"
    if device:
        what = "device time, the figure the verdict gates"
        methods = used_methods(run)
        if methods:
            what += f" (by {'; '.join(METHOD_LABELS[m] for m in methods)})"
    caption = (f"Bars: each mode's speedup over fp32 in {what} (centre of interleaved rounds); whiskers: its "
               "interval; black dash: the baseline it was held against. Above the dashed line at 1 the mode is faster.")
    if mixed:
        caption += " Hatched bars: wall-clock speedups of cells that measured no device time."
    drawn = _grouped_bars(run, SpeedRecord, lambda c: c.ratio(figure(c)).speedup, title=f"{title} — {run.gpu}",
                          ylabel="speedup (x)", interval=interval,
                          marker=lambda c: c.ratio(figure(c)).baseline_speedup,
                          marker_label="baseline", unity_line=1.0,
                          hatched=(lambda c: figure(c) is WALL) if mixed else None, hatched_label="wall clock")
    return title, caption, drawn


# bars of the comparison chart: past this many, the notable rows are drawn
COMPARE_BARS = 200


def _cell_label(test_id: str) -> str:
    """A test by its parameters: 'test_ddp_speed[mlp-amp_bf16-bf16_hook]' -> 'mlp amp_bf16 bf16_hook'."""
    inside = test_id[test_id.find("[") + 1:-1] if "[" in test_id and test_id.endswith("]") else test_id
    return inside.replace("-", " ") or test_id


def _bar_labels(rows: Sequence) -> list[str]:
    """Each bar's cell and, where the chart holds more than one kind of figure, which one it is; the full
    test id where two cells' parameters read the same (a DDP and an FSDP2 cell)."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[_cell_label(r.test_id)] = counts.get(_cell_label(r.test_id), 0) + 1
    mixed = len({r.figure for r in rows}) > 1
    labels = []
    for r in rows:
        label = _cell_label(r.test_id)
        label = r.test_id if counts[label] > 1 else label
        labels.append(f"{label} ({'wall' if r.figure == 'speedup' else r.figure})"
                      if mixed and r.figure != "device speedup" else label)
    return labels


def _notable_first(rows: list) -> tuple[list, str]:
    """At most COMPARE_BARS rows, in the comparison's order: failing and inconclusive verdicts first, then
    the largest changes; and the sentence the caption adds where some are left out."""
    if len(rows) <= COMPARE_BARS:
        return rows, ""
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    chosen = sorted(range(len(rows)), key=lambda i: (rank.get(rows[i].verdict, len(rank)), -abs(rows[i].change)))
    kept = sorted(chosen[:COMPARE_BARS])
    return [rows[i] for i in kept], (f" The {COMPARE_BARS} most notable of {len(rows)} compared figures are drawn "
                                     "(by verdict, then by the size of the change); every one is in the table.")


def comparison_chart(comparison: "Comparison") -> Chart | None:
    """Relative change of the figure each cell is gated on, new run against old, coloured by its verdict."""
    rows, left_out = _notable_first([r for r in comparison.rows if r.charted])
    if not rows:
        return None
    plt = _pyplot()
    labels = _bar_labels(rows)
    height = max(2.5, 0.8 + 0.19 * len(rows))
    fig, ax = plt.subplots(figsize=(11, height), dpi=100)
    label_chars = max(len(label) for label in labels)
    fig.subplots_adjust(left=min(0.45, 0.03 + 0.0065 * label_chars), right=0.98,
                        top=1 - 0.45 / height, bottom=0.55 / height)
    ys = list(range(len(rows)))[::-1]
    changes = [r.change for r in rows]
    colors = [VERDICT_COLORS.get(r.verdict, "#999") for r in rows]
    ax.barh(ys, changes, color=colors, height=0.7, zorder=2)
    lo = [max(r.change - r.change_low, 0) for r in rows]
    hi = [max(r.change_high - r.change, 0) for r in rows]
    ax.errorbar(changes, ys, xerr=[lo, hi], fmt="none", ecolor="#222", elinewidth=0.9, capsize=1.5, zorder=3)
    lines = [(y, -r.tolerance) for y, r in zip(ys, rows) if r.tolerance is not None]
    if lines:
        ax.scatter([t for _, t in lines], [y for y, _ in lines], marker="|", s=70, color="#c62828",
                   zorder=4, label="regression line (-tolerance)")
        ax.legend(fontsize=8, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.2)
    ax.axvline(0, color="#444", linewidth=1)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:+.0%}"))
    ax.set_xlabel("change of the gated speedup, new against old")
    ax.set_title(f"Change per test — {comparison.new.gpu}", loc="left", fontsize=12)
    ax.grid(axis="x", color="#ddd", zorder=0)
    ax.spines[["top", "right"]].set_visible(False)
    return Chart(
        "compare.png", "Change per test",
        "Relative change of the figure each cell is gated on, against the old run: its device-time speedup where "
        "both runs measured one the same way, else its wall-clock speedup (marked wall where the chart holds both), "
        "and a compiled cell's ratio over its versus side; whiskers: the new run's interval; colour: the verdict "
        "(red: regression, orange: inconclusive, green: pass, blue: improved); red tick: the cell's regression line."
        + left_out,
        _png(fig),
    )
