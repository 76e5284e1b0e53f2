"""The report of speed cells since device time gates them: the device-time matrix first, the wall clock
beside it, host-bound cells, kernel changes and the speedup chart; a full-tier run's report."""

from __future__ import annotations

import json

from ampbench.report import (
    ROW_HEADERS,
    build_report,
    fmt_ms,
    load_run,
    model_rows,
    parse_run,
    render_markdown,
    speedup_matrix,
    write_report,
)
from ampbench.report.compare import compare_runs
from ampbench.results import FP32_SIDE, MODE_SIDE, MemoryRecord, SpeedRecord
from ampbench.results.ratios import DEVICE, WALL
from ampbench.verdict import Verdict
from report_runs import DATA, REAL_H100, fixtures_module, write_run

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
    from ampbench.report import parse_run

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

    run = load_run(DEVICE_RUN)
    html = build_report(run)["index.html"].decode()
    assert html.index(DEVICE.title) < html.index(WALL.title) < html.index("Charts")
    device, wall = _section(html, DEVICE.title), _section(html, WALL.title)
    speed = run.of_kind(SpeedRecord)
    for c in (c for c in speed if c.mode != "fp32"):  # fp32 is every column's reference, not a column
        assert f"{c.ratio(DEVICE).speedup:.2f}x" in device, c.test_id
        assert f"[{c.ratio(DEVICE).speedup_low:.2f}, {c.ratio(DEVICE).speedup_high:.2f}]" in device, c.test_id
        assert f"[{c.ratio(WALL).speedup_low:.2f}, {c.ratio(WALL).speedup_high:.2f}]" in wall, c.test_id
    assert "<code>graph</code> CUDA-graph replay" in device
    regression = next(c for c in speed if c.ratio(DEVICE).verdict == Verdict.REGRESSION)
    assert 'class="v v-regression"' in device and f"{regression.ratio(DEVICE).speedup:.2f}x ✗" in device
    host = [c for c in speed if c.side(MODE_SIDE).host_bound is True]
    assert host, "the device run should hold host-bound cells"
    bound = _section(html, f"Host-bound cells ({len(host)})")
    for c in host:
        assert f"{100 * c.side(MODE_SIDE).idle_share:.0f}%" in bound and f"<td>{c.mode}</td>" in bound
    changes = _section(html, "Kernel changes against the baseline")
    assert f"<code>{regression.test_id}</code>" in changes
    for line in regression.kernel_changes.split("; "):
        assert f"<li>{escape(line, quote=True)}</li>" in changes
    drift = sum(1 for c in speed if c.kernel_changes and c is not regression)
    assert f"Kernel changes of {drift} cells whose device time held" in changes


def test_html_of_a_run_from_before_device_time_shows_its_one_speedup_matrix():
    run = load_run(REAL_H100)
    html = build_report(run)["index.html"].decode()
    assert DEVICE.title not in html and WALL.title not in html and "Host-bound" not in html
    matrix = _section(html, "Speedup over fp32")
    for c in (c for c in run.of_kind(SpeedRecord) if c.mode != "fp32"):
        assert f"{c.ratio(WALL).speedup:.2f}x" in matrix and f"[{c.ratio(WALL).speedup_low:.2f}," in matrix


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
    assert set(heights) == {round(c.ratio(DEVICE).speedup, 6) for c in run.of_kind(SpeedRecord)}
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
            assert cells[col["wall-clock speedup [interval]"]].startswith("reference (self-check 0.92x")
            continue
        wall = cell.ratio(WALL)
        assert cells[col["fp32 step, same rounds"]] == fmt_ms(wall.side(FP32_SIDE).step_ms)
        est = cell.estimate(WALL)
        assert est.low <= wall.side(FP32_SIDE).step_ms / wall.side(MODE_SIDE).step_ms <= est.high, mode
    headers, matrix = speedup_matrix(run)
    assert "fp32" not in headers and all(len(r) == len(headers) for r in matrix)
