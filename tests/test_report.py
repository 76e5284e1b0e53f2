"""The report (``ampbench report``) of the saved runs in tests/data/: complete, self-contained pages and
charts, the figures a speed cell is gated on shown first, a full tier's run, and a smoke run said to be one."""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import pytest

from ampbench.report.compare import compare_runs
from ampbench.report import (
    ROW_HEADERS,
    build_report,
    fmt_ms,
    load_run,
    model_rows,
    speedup_matrix,
    parse_run,
    write_report,
)
from ampbench.results import MemoryRecord, SpeedRecord
from ampbench.verdict import Verdict
from report_runs import DATA, REAL_H100, RUNS, SEARCHED_RUN, fixtures_module, gpu_report, gpu_run, png_ok, write_run  # noqa: F401 - gpu_report is a fixture


# ---------------------------------------------------------------------------------------------------
# the report


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_report_of_every_fixture_is_complete_and_self_contained(path: Path):
    run = load_run(path)
    files = build_report(run)
    assert {"index.html", "summary.md"} <= set(files)
    html = files["index.html"].decode()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # one file that opens offline: no fetches of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//|file:)""", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    images = re.findall(r'<img [^>]*src="([^"]+)"', html)
    assert images, "no charts in the HTML"
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert png_ok(base64.b64decode(src.split(",", 1)[1]))
    for name, data in files.items():
        if name.endswith(".png"):
            assert png_ok(data), name
    if run.of_kind(SpeedRecord):
        assert "speedup.png" in files and "throughput.png" in files
    # the write-ups' table, per model: every model and every mode of the run appears in the HTML
    for model, rows in model_rows(run).items():
        assert f"<h3>{model}</h3>" in html
        for row in rows:
            assert f"<td>{row.mode}</td>" in html
    assert run.gpu in html


def test_gpu_run_has_memory_and_batch_charts(gpu_report):
    run, files = gpu_report
    assert "memory.png" in files
    if run.of_kind(MemoryRecord):
        assert "max_batch.png" in files


def _unsearched(doc: dict) -> dict:
    """`doc` as the quick tier writes it: memory cells with the default batch's figures only."""
    doc = copy.deepcopy(doc)
    for b in doc["benchmarks"]:
        info = b["extra_info"]
        if info.get("kind") == "memory":
            for key in [k for k in info if k.startswith("max_batch")]:
                info[key] = None
            info.update(max_batch_searched=False, message=f"{info['model']} {info['mode']}: largest batch not searched")
    return doc


def test_a_run_whose_memory_cells_did_not_search_reports_their_memory_and_no_batch(tmp_path):
    run = parse_run(_unsearched(json.loads(SEARCHED_RUN.read_text())), tmp_path / "quick.json")
    memory = run.of_kind(MemoryRecord)
    assert memory and all(c.max_batch is None and not c.batch_searched for c in memory)
    files = build_report(run)
    assert "memory.png" in files and "max_batch.png" not in files  # no bars of nothing
    html, md = files["index.html"].decode(), files["summary.md"].decode()
    assert "<td>not searched</td>" in html and html.rstrip().endswith("</html>")
    assert md.startswith(f"## ampbench: {run.gpu}")
    batch, peak = ROW_HEADERS.index("largest batch (ratio)"), ROW_HEADERS.index("peak memory (ratio)")
    for c in memory:
        row = next(r for r in model_rows(run)[c.model] if r.mode == c.mode)
        assert row.cells()[batch] == "not searched" and row.cells()[peak] != "-"


def test_a_run_without_the_search_compares_its_memory_and_not_its_largest_batch(tmp_path):
    full = load_run(SEARCHED_RUN)
    quick = parse_run(_unsearched(json.loads(SEARCHED_RUN.read_text())), tmp_path / "quick.json")
    memory_ids = {c.test_id for c in full.of_kind(MemoryRecord)}
    comparison = compare_runs(full, quick)
    figures = {(r.test_id, r.figure): r.verdict for r in comparison.rows if r.test_id in memory_ids}
    assert {f for _, f in figures} == {"memory ratio"}  # the quick run chose not to search: no row
    assert not comparison.failed(strict=True), [r.message for r in comparison.rows if r.failing]
    # the other way the old run has no largest batch to hold the new one to
    back = compare_runs(quick, full)
    assert {r.verdict for r in back.rows if r.test_id in memory_ids and r.figure == "largest batch"} == {Verdict.NO_BASELINE}
    assert "Compared with" in build_report(quick, comparison)["index.html"].decode()


def test_speed_chart_marks_baselines_and_intervals(gpu_report):
    """The speedup chart is drawn with error bars and baseline marks: check the figure, not the pixels."""
    run, _ = gpu_report
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.collections import LineCollection, PathCollection

    from ampbench.report import charts

    figures = []
    real_png = charts._png

    def keep(fig):
        figures.append(fig)
        return real_png(fig)

    charts._png = keep
    try:
        charts.run_charts(run)
    finally:
        charts._png = real_png
    speed_ax = figures[0].axes[0]
    assert "Speedup" in speed_ax.get_title(loc="left")
    assert any(isinstance(c, LineCollection) for c in speed_ax.collections), "no interval whiskers"
    if any(c.baseline_speedup is not None for c in run.of_kind(SpeedRecord)):
        assert any(isinstance(c, PathCollection) for c in speed_ax.collections), "no baseline marks"


def test_summary_fits_a_ci_job_summary(gpu_report):
    run, files = gpu_report
    md = files["summary.md"].decode()
    assert len(files["summary.md"]) < 1024 * 1024  # GitHub's limit for a step summary
    assert md.startswith(f"## ampbench: {run.gpu}")
    assert "| model |" in md
    for cell in run.cells:
        if cell.verdict == Verdict.REGRESSION.value:
            assert cell.test_id in md


def test_regressions_of_the_run_are_listed_first():
    # the synthetic run carries a regression and an inconclusive cell by design; a real capture may not
    run = load_run(DATA / "synthetic_h100_quick.json")
    html = build_report(run)["index.html"].decode()
    flagged = [c for c in run.cells if c.verdict in ("regression", "inconclusive")]
    assert flagged, "the synthetic run should flag cells"
    assert "Needs a look" in html
    assert html.index("Needs a look") < html.index("Charts")
    for c in flagged:
        assert c.test_id in html


def test_missing_optional_fields_and_unknown_kinds_show_a_dash(tmp_path):
    doc = {
        "machine_info": {"ampbench": {"device": "NVIDIA H100 80GB HBM3"}},
        "benchmarks": [
            {"name": "test_speed[gpt-amp_bf16]", "extra_info": {"ampbench_schema": 1, "kind": "speed", "speedup": 2.0}},
            {"name": "test_memory[gpt-amp_bf16]", "extra_info": {"ampbench_schema": 1, "kind": "memory",
                                                                 "memory_ratio": None, "max_batch": "lots"}},
            {"name": "test_loader[gpt-amp_bf16]", "extra_info": {"ampbench_schema": 1, "kind": "input_pipeline"}},
            {"name": "test_future[gpt-amp_bf16]", "extra_info": {"ampbench_schema": 1, "kind": "something new",
                                                                 "message": "<script>alert(1)</script>"}},
        ],
    }
    run = parse_run(doc, tmp_path / "sparse.json")
    files = build_report(run)
    html = files["index.html"].decode()
    assert "<td>-</td>" in html
    assert "Other tests" in html and "test_future[gpt-amp_bf16]" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "memory.png" not in files  # nothing to draw
    (row,) = model_rows(run)["gpt"][-1:]
    assert row.cells()[1] == "-" and row.cells()[4] == "2.00x"


def test_the_interval_across_runs_is_shown_beside_the_runs_own(tmp_path):
    speed = {"ampbench_schema": 1, "kind": "speed", "speedup": 8.5, "speedup_low": 8.44, "speedup_high": 8.55}
    doc = {"machine_info": {"ampbench": {"device": "NVIDIA H100 80GB HBM3"}}, "benchmarks": [
        {"name": "test_speed[gpt-bf16]", "extra_info": dict(speed, speedup_across_low=8.16, speedup_across_high=8.85)},
        {"name": "test_speed[gpt-fp16]", "extra_info": dict(speed, speedup_across_low=None)},
    ]}
    rows = {r.mode: r for r in model_rows(parse_run(doc, tmp_path / "run.json"))["gpt"]}
    assert rows["bf16"].cells()[4] == "8.50x [8.44, 8.55]; across runs [8.16, 8.85]"
    assert rows["fp16"].cells()[4] == "8.50x [8.44, 8.55]"


def test_nan_and_infinite_figures_that_are_only_shown_are_a_dash(tmp_path):
    doc = json.loads(gpu_run().read_text())
    speed = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"]
    speed[0]["extra_info"]["throughput"] = float("nan")
    speed[0]["extra_info"]["step_ms"] = float("inf")
    run = parse_run(json.loads(json.dumps(doc)), tmp_path / "nan.json")
    files = build_report(run)
    assert "speedup.png" in files and "throughput.png" in files
    row = next(r for r in model_rows(run)[run.cells[0].model] if r.mode == run.cells[0].mode)
    assert row.cells()[1] == row.cells()[3] == "-"


# ---------------------------------------------------------------------------------------------------
# a full-tier run (its render time is not asserted: a timed unit test fails on a loaded runner, which
# is noise)


def test_full_tier_report_is_complete(tmp_path):
    doc = fixtures_module().full_tier_run()
    path = write_run(tmp_path, "full.json", doc)
    run = load_run(path)
    comparison = compare_runs(run, run)
    write_report(tmp_path / "report", build_report(run, comparison))
    assert len(run.of_kind(SpeedRecord)) == 84 and len(run.of_kind(MemoryRecord)) == 84
    assert (tmp_path / "report" / "index.html").stat().st_size > 0
    assert (tmp_path / "report" / "summary.md").stat().st_size < 256 * 1024


def test_summary_shows_device_time_as_the_gate_the_wall_beside_it_host_bound_cells_and_kernel_changes():
    from ampbench.report import parse_run, render_markdown

    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    speed = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"
             and b["extra_info"].get("mode") != "fp32"]  # fp32 is every column's reference, not a column
    first, second = speed[0]["extra_info"], speed[1]["extra_info"]
    for info, share in ((first, 0.4), (second, 0.02)):
        s = info["speedup"]
        info.update(device_speedup=s * 1.5, device_speedup_low=s * 1.49, device_speedup_high=s * 1.51,
                    device_verdict="pass", wall_verdict=info.get("verdict"), idle_share=share,
                    host_overhead_ms=3.0 * share, host_bound=share > 0.1)
    second.update(device_verdict="regression",
                  kernel_changes="kernels per step +0.2 ms against the baseline; new: at::cuda::spin_kernel 0.2 ms")
    text = render_markdown(parse_run(doc, "run.json"))
    assert "in device time (the gate)" in text and "Wall-clock speedup of eager steps" in text
    assert f"{first['device_speedup']:.2f}x" in text.split("Wall-clock")[0]
    assert "Host-bound cells (1)" in text and f"`{first['model']}` {first['mode']}: the GPU idles 40%" in text
    assert "Kernel changes against the baseline" in text and "at::cuda::spin_kernel" in text


# ---------------------------------------------------------------------------------------------------
# index.html and the speedup chart since device time gates a speed cell

DEVICE_RUN = DATA / "h100_speed_device.json"  # a real quick-tier run, resnet50 amp_fp16 made 5% slower on the GPU


def _section(html: str, heading: str) -> str:
    """The HTML from the <h2> `heading` to the next <h2>."""
    start = html.index(f"<h2>{heading}")
    end = html.find("<h2>", start + 4)
    return html[start:end if end >= 0 else len(html)]


def test_html_shows_device_time_as_the_gate_the_wall_beside_it_host_bound_cells_and_kernel_changes():
    from html import escape

    from ampbench.report.speed_cells import DEVICE, WALL

    run = load_run(DEVICE_RUN)
    html = build_report(run)["index.html"].decode()
    assert html.index(DEVICE.title) < html.index(WALL.title) < html.index("Charts")
    device, wall = _section(html, DEVICE.title), _section(html, WALL.title)
    speed = run.of_kind(SpeedRecord)
    for c in (c for c in speed if c.mode != "fp32"):  # fp32 is every column's reference, not a column
        assert f"{c.device_speedup:.2f}x" in device, c.test_id
        assert f"[{c.device_speedup_low:.2f}, {c.device_speedup_high:.2f}]" in device, c.test_id
        assert f"[{c.speedup_low:.2f}, {c.speedup_high:.2f}]" in wall, c.test_id
    assert "<code>graph</code> CUDA-graph replay" in device
    regression = next(c for c in speed if c.device_verdict == Verdict.REGRESSION)
    assert 'class="v v-regression"' in device and f"{regression.device_speedup:.2f}x ✗" in device
    host = [c for c in speed if c.host_bound is True]
    assert host, "the device run should hold host-bound cells"
    bound = _section(html, f"Host-bound cells ({len(host)})")
    for c in host:
        assert f"{100 * c.idle_share:.0f}%" in bound and f"<td>{c.mode}</td>" in bound
    changes = _section(html, "Kernel changes against the baseline")
    assert f"<code>{regression.test_id}</code>" in changes
    for line in regression.kernel_changes.split("; "):
        assert f"<li>{escape(line, quote=True)}</li>" in changes
    drift = sum(1 for c in speed if c.kernel_changes and c is not regression)
    assert f"Kernel changes of {drift} cells whose device time held" in changes


def test_html_of_a_run_from_before_device_time_shows_its_one_speedup_matrix():
    from ampbench.report.speed_cells import DEVICE, WALL

    run = load_run(REAL_H100)
    html = build_report(run)["index.html"].decode()
    assert DEVICE.title not in html and WALL.title not in html and "Host-bound" not in html
    matrix = _section(html, "Speedup over fp32")
    for c in (c for c in run.of_kind(SpeedRecord) if c.mode != "fp32"):
        assert f"{c.speedup:.2f}x" in matrix and f"[{c.speedup_low:.2f}," in matrix


def _speedup_figure(run, monkeypatch):
    """(chart, matplotlib figure) of the run's speedup chart."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from ampbench.report import charts

    figures = []
    real_png = charts._png
    monkeypatch.setattr(charts, "_png", lambda fig: figures.append(fig) or real_png(fig))
    chart = next(c for c in charts.run_charts(run) if c.filename == "speedup.png")
    return chart, figures[0]


def _bar_heights(figure) -> dict[float, str | None]:
    from matplotlib.patches import Rectangle

    ax = figure.axes[0]
    return {round(p.get_height(), 6): p.get_hatch() for p in ax.patches
            if isinstance(p, Rectangle) and p.get_width() > 0 and p.get_height() > 0}


def test_speedup_chart_plots_device_time_where_measured_and_says_so(monkeypatch):
    run = load_run(DEVICE_RUN)
    chart, figure = _speedup_figure(run, monkeypatch)
    assert "device time" in chart.title and "device time" in figure.axes[0].get_title(loc="left")
    assert "CUDA-graph replay" in chart.caption and "Hatched" not in chart.caption
    heights = _bar_heights(figure)
    assert set(heights) == {round(c.device_speedup, 6) for c in run.of_kind(SpeedRecord)}
    assert not any(heights.values())
    old_chart, old_figure = _speedup_figure(load_run(REAL_H100), monkeypatch)
    assert "wall clock" in old_chart.title and "device time" not in old_chart.caption


def test_speedup_chart_hatches_the_wall_figure_of_cells_without_device_time(tmp_path, monkeypatch):
    doc = json.loads(DEVICE_RUN.read_text())
    speed = [b["extra_info"] for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"]
    for info in speed[:3]:
        for key in [k for k in info if k.startswith("device_speedup")]:
            del info[key]
    chart, figure = _speedup_figure(parse_run(doc, tmp_path / "mixed.json"), monkeypatch)
    heights = _bar_heights(figure)
    assert {h for h, hatch in heights.items() if hatch} == {round(info["speedup"], 6) for info in speed[:3]}
    assert {h for h, hatch in heights.items() if not hatch} == {round(info["device_speedup"], 6) for info in speed[3:]}
    assert "Hatched bars: wall-clock speedups" in chart.caption


def test_a_cpu_run_says_first_that_its_figures_are_not_comparable():
    smoke = build_report(load_run(DATA / "cpu_smoke.json"))
    md, html = smoke["summary.md"].decode(), smoke["index.html"].decode()
    assert "Smoke run: figures are not comparable" in md.split("- **speed**")[0]
    assert html.index("Smoke run: figures are not comparable") < html.index("<h2>")
    gpu = build_report(load_run(REAL_H100))
    assert b"Smoke run" not in gpu["summary.md"] and b"Smoke run" not in gpu["index.html"]


def test_a_row_shows_fp32_from_its_own_rounds_and_fp32_is_no_finding():
    """mlp on the CPU: fp32's own cell ran at 0.48 ms a step, amp_fp16's fp32 side at 0.72 ms, so the fp32
    row's step time against amp_fp16's (0.30x) contradicted its speedup (0.48x); its own rounds agree."""
    run = load_run(DATA / "cpu_smoke.json")
    rows = {r.mode: r.cells() for r in model_rows(run)["mlp"]}
    col = {h: i for i, h in enumerate(ROW_HEADERS)}
    for mode, cells in rows.items():
        cell = run.cell(SpeedRecord, "mlp", mode)
        if mode == "fp32":
            assert cells[col["speedup over fp32 [interval]"]].startswith("reference (self-check 0.92x")
            continue
        assert cells[col["fp32 step, same rounds"]] == fmt_ms(cell.step_ms_ref)
        est = cell.estimate()
        assert est.low <= cell.step_ms_ref / cell.step_ms <= est.high, mode
    headers, matrix = speedup_matrix(run)
    assert "fp32" not in headers and all(len(r) == len(headers) for r in matrix)
