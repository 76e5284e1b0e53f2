"""The formats ``ampbench export`` writes, each for the dashboard that reads it:

- ``bmf``: Bencher Metric Format (https://bencher.dev/docs/reference/bencher-metric-format/), one
  benchmark per test id, one measure per gated figure, with the interval as ``lower_value`` and
  ``upper_value``, and the cell's gate margin as the measure ``gate-margin`` (above 1 exactly where it
  fails: one static threshold with an upper boundary of 1 alerts on the failing cells); for
  ``bencher run --adapter json``.
- ``github``: github-action-benchmark's ``customBiggerIsBetter`` list (name, value, unit, range, extra),
  ``range`` the interval's half-width as "± x", which the action reads. Every value is one where bigger
  is better: the memory figure is fp32's peak over the mode's, the accuracy one the mode's accuracy over
  its parity mode's (a ratio, where the action divides one run's value by the other's). An A/B run's
  paired cell gives one entry per figure: head's speedup as it is, and of a figure where smaller is
  better (a step time, peak memory) base's value over head's.
- ``github-margin``: github-action-benchmark's ``customSmallerIsBetter`` list that makes the action hold
  each cell's gate margin to its line. The action knows no absolute limit: it divides each entry's value
  by the first entry of the same name in the previous run (src/write.ts, ``findAlerts``). So each cell
  has two entries under one name: first its line, 1, then its margin, floored at 1. The previous run's
  first entry of that name is always the line, so at ``alert-threshold: 100%`` the action alerts where
  the margin exceeds 1: on each failing cell, in every run it fails, and on no other. It cannot alert on
  a cell's first report (no previous entry of its name, or no previous run at all): ``ampbench export
  --fail-on-margin`` fails the job there. Its chart draws the line before each run's margin; the margin
  itself is in each entry's ``extra``.
- ``pytest-benchmark``: the run JSON itself in the current layout, for pytest-benchmark's ``compare`` and
  the dashboards' pytest readers: each cell written by the current schema (a timed cell's ratios by
  name), each entry with its group, the cells that time no step (or whose entries have no ``stats``:
  runs written before they were kept) moved to ``ampbench_untimed``.
- ``conbench``: refused. benchadapt (PyPI) installs beside torch and builds a ``BenchmarkResult``, but a
  Conbench server takes only the units B, B/s, s, ns and i/s (conbench.units.KNOWN_UNITS): a speedup, a
  memory ratio and an accuracy gap have none, and a time in their place is one side's figure again.
"""

from __future__ import annotations

from typing import Any

from ampbench.export.figures import Figure, Figures, cell_margins
from ampbench.results import record_type
from ampbench.results.run import entry_group, split_id, timed_entry
from ampbench.results.schema import ERRORS_KEY, KIND_KEY, SCHEMA_KEY, UNTIMED_KEY
from ampbench.stats import coverage_percent

CONBENCH_REFUSAL = (
    "--format conbench: a Conbench server accepts only the units B, B/s, s, ns and i/s "
    "(conbench.units.KNOWN_UNITS), and a speedup, a memory ratio or an accuracy gap has none; publishing "
    "one side's time instead would chart what the suite does not judge. Use --format bmf (Bencher) or "
    "--format github (github-action-benchmark)")


# the measure of a cell's gate margin in BMF, and what its entry is called in github-margin
MARGIN_MEASURE = "gate-margin"
MARGIN_UNIT = "tolerances"
LINE = 1.0  # a gate margin on the regression line; above it the gate fails the cell


class ExportError(ValueError):
    """A run that cannot be written in the asked format; the message says why and what to do."""


def bmf(figures: Figures) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: {test id: {measure slug: {value, lower_value, upper_value}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for f in figures.figures:
        metric = {"value": f.value}
        if f.low is not None and f.high is not None:
            metric.update(lower_value=f.low, upper_value=f.high)
        out.setdefault(f.test_id, {})[f.measure] = metric
    for test_id, worst in cell_margins(figures).items():
        out[test_id][MARGIN_MEASURE] = {"value": float(worst.margin or 0.0)}
    return out


def _bigger_is_better(f: Figure) -> tuple[str, float, float | None] | None:
    """(label, value, ± half-width) of `f` where bigger is better; None where it has none (an accuracy
    gap against a parity mode that learned nothing)."""
    if f.relative is not None:
        return (*f.relative, None)
    return (f.label, f.value, f.half_width) if f.bigger_is_better and f.unit == "x" else None


def _extra(f: Figure) -> str:
    shown = {"pts": f"{f.value:+.2f} pts", "x": f"{f.value:.4f}x"}.get(f.unit, f"{f.value:.6g} {f.unit}")
    lines = [f"group: {f.group}", f"gated figure: {f.label} {shown}"]
    if f.low is not None and f.high is not None:
        lines.append(f"interval: {f.low:.4g}-{f.high:.4g}"
                     + (f" ({coverage_percent(f.confidence)} coverage)" if f.confidence else ""))
    if f.baseline is not None:
        lines.append(f"baseline: {f.baseline:.4g}")
    if f.tolerance is not None:
        lines.append(f"tolerance: {f.tolerance:.2f} pts" if f.unit == "pts" else f"tolerance: {f.tolerance:.2%}")
    if f.verdict is not None:
        lines.append(f"verdict: {f.verdict}")
    return "\n".join(lines)


def github(figures: Figures) -> list[dict[str, Any]]:
    """github-action-benchmark's customBiggerIsBetter: one entry per gated figure."""
    out = []
    for f in figures.figures:
        shown = _bigger_is_better(f)
        if shown is None:
            figures.left_out.append((f.test_id,
                                     f"{f.label}: no ratio where bigger is better (its reference's accuracy is 0)"))
            continue
        label, value, half = shown
        entry = {"name": f"{f.test_id} {label}", "value": value, "unit": "x"}
        if half is not None:
            entry["range"] = f"± {half:.6g}"
        entry["extra"] = _extra(f)
        out.append(entry)
    return out


def github_margin(figures: Figures) -> list[dict[str, Any]]:
    """github-action-benchmark's customSmallerIsBetter: per cell held to a line, its line (1) then its gate
    margin floored at 1, under one name (the module's docstring says why)."""
    worst = cell_margins(figures)
    for test_id in dict.fromkeys(f.test_id for f in figures.figures if f.test_id not in worst):
        figures.left_out.append((test_id, "no gate margin: none of its figures is held to a line (no baseline)"))
    out = []
    for test_id, f in worst.items():
        margin = float(f.margin or 0.0)
        name = f"{test_id} {MARGIN_MEASURE}"
        # the action compares each entry with the first of its name in the previous run: this one
        out.append({"name": name, "value": LINE, "unit": MARGIN_UNIT,
                    "extra": "the line (1): the next run's margin of this cell is divided by it"})
        out.append({"name": name, "value": max(margin, LINE), "unit": MARGIN_UNIT,
                    "extra": f"gate margin: {margin:.3f} of its {f.label} (0: on its baseline, 1: on its line, "
                             f"above 1: it fails)\n{_extra(f)}"})
    return out


def over_the_line(figures: Figures) -> list[str]:
    """One line per cell whose gate margin is above 1 (its gate fails it), naming the figure: what
    ``ampbench export --fail-on-margin`` prints before it exits 1."""
    return [f"{test_id}: gate margin {float(f.margin or 0.0):.3f} of its {f.label} (above 1: past its line)"
            for test_id, f in cell_margins(figures).items() if float(f.margin or 0.0) > LINE]


def pytest_benchmark(document: dict) -> dict:
    """The run JSON in the current layout: every cell as the current schema writes it, a group on every
    ampbench entry, and in ``benchmarks`` only the entries whose stats are training-step times (the
    others, and entries without stats, beside them)."""
    timed, untimed = [], [_current(b) for b in document.get(UNTIMED_KEY) or ()]
    for bench in document["benchmarks"]:
        bench = _current(bench)
        info = bench.get("extra_info") or {}
        if SCHEMA_KEY in info and not bench.get("group"):
            model = info.get("model") or split_id(bench.get("name", ""))[0]
            bench["group"] = entry_group(record_type(info.get(KIND_KEY)).KIND or str(info.get(KIND_KEY)), model)
        if isinstance(bench.get("stats"), dict) and timed_entry(bench):
            timed.append(bench)
        else:
            untimed.append({k: v for k, v in bench.items() if k not in ("stats", "options")})
    out = {**document, "benchmarks": timed}
    if untimed:
        out[UNTIMED_KEY] = untimed
    if document.get(ERRORS_KEY):
        out[ERRORS_KEY] = [_current(b) for b in document[ERRORS_KEY]]
    return out


def _current(bench: dict) -> dict:
    """A benchmarks entry whose cell (its extra_info, of any schema this version reads) is written as the
    current schema writes it; an entry that is no ampbench cell as it is."""
    info = bench.get("extra_info") or {}
    if SCHEMA_KEY not in info:
        return dict(bench)
    return {**bench, "extra_info": record_type(info.get(KIND_KEY)).from_info(info).to_info()}


def conbench(figures: Figures) -> Any:
    raise ExportError(CONBENCH_REFUSAL)
