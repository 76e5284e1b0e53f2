"""ampbench.report and ampbench.report.compare against the benchmark JSON files in tests/data/.

Every ``tests/data/*.json`` is a run the suite wrote (or could have written): the tests assert the
structure of what is made from it, never its numbers, so a fresh capture can replace any of them.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from pathlib import Path

import pytest

from ampbench.report import ROW_HEADERS, RunError, build_report, load_run, model_rows, parse_run
from ampbench.report.compare import compare_runs
from ampbench.results import MODE_SIDE, MemoryRecord, PairedRecord, SpeedRecord
from ampbench.results.ratios import WALL
from ampbench.verdict import Verdict
from report_runs import DATA, REAL_H100, RUNS, gpu_report_of, gpu_run, png_ok, write_run


@pytest.fixture(scope="module")
def gpu_report():
    return gpu_report_of()


def test_there_is_test_data():
    assert RUNS, f"no benchmark JSON under {DATA}"


# ---------------------------------------------------------------------------------------------------
# loading


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_fixture_loads_as_a_run(path: Path):
    run = load_run(path)
    assert run.cells, f"{path.name} holds no ampbench results"
    assert run.gpu and run.gpu != "unknown device"
    assert set(run.kinds()) <= {"speed", "memory", "convergence", "input_pipeline", "loss_scaling"} | set(run.kinds())
    for cell in run.of_kind(SpeedRecord):
        est = cell.estimate(WALL)
        assert est is not None, f"{cell.test_id}: speed cell without a speedup interval"
        assert est.low <= est.speedup <= est.high
        assert cell.model in cell.test_id and cell.mode.replace(" ", "-") in cell.test_id  # 'amp_bf16-compiled'


def test_real_h100_capture_has_gpu_figures():
    if not REAL_H100.exists():
        pytest.skip(f"the real H100 capture {REAL_H100} is not in the repository yet")
    run = load_run(REAL_H100)
    assert "H100" in run.gpu
    speed = run.of_kind(SpeedRecord)
    assert speed, "an H100 run without speed results"
    assert all(c.side(MODE_SIDE).peak_mem_bytes is not None for c in speed), "peak memory missing on a GPU run"
    assert any(c.side(MODE_SIDE).tflops_fraction is not None for c in speed)
    assert {"torch", "cuda", "device"} <= set(run.machine)


def test_model_and_mode_come_from_the_test_id_when_extra_info_lacks_them(tmp_path):
    doc = {"machine_info": {"ampbench": {"device": "cpu"}}, "benchmarks": [
        {"name": "test_speed[wide_resnet28_10-amp_fp16]", "extra_info": {"ampbench_schema": 1, "kind": "speed"}}]}
    run = parse_run(doc, tmp_path / "x.json")
    (cell,) = run.cells
    assert (cell.model, cell.mode) == ("wide_resnet28_10", "amp_fp16")


def test_benchmarks_not_written_by_ampbench_are_left_out(tmp_path):
    doc = json.loads(gpu_run().read_text())
    doc["benchmarks"].append({"name": "test_other", "stats": {}, "extra_info": {}})
    run = parse_run(doc, tmp_path / "mixed.json")
    assert run.foreign == ["test_other"]
    assert all(c.test_id != "test_other" for c in run.cells)


# ---------------------------------------------------------------------------------------------------
# bad input: a clear error that names the file


def test_truncated_json_is_called_truncated(tmp_path):
    text = gpu_run().read_text()
    path = write_run(tmp_path, "cut.json", text[: len(text) // 2])
    with pytest.raises(RunError, match="truncated") as info:
        load_run(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "content, problem",
    [
        ("", "empty"),
        ("not json at all", "not valid JSON"),
        ("[1, 2, 3]", "not ampbench output"),
        ('{"benchmarks": "nope"}', "not ampbench output"),
        ('{"machine_info": {}, "benchmarks": [{"name": "test_x", "extra_info": {}, "stats": {}}]}',
         "not ampbench output"),
        ('{"machine_info": {}, "benchmarks": []}', "not ampbench output"),
        ('{"machine_info": {"ampbench": {}}, "benchmarks": [{"name": "t[a-b]", "extra_info": '
         '{"ampbench_schema": 99}}]}',
         "schema 99"),
        ('{"machine_info": {"ampbench": {}}, "benchmarks": [3]}', r"benchmarks\[0\]"),
    ],
    ids=["empty", "not-json", "list", "no-benchmarks-list", "plain-pytest-benchmark", "no-trace-of-ampbench",
         "other-schema", "bad-entry"],
)
def test_unusable_json_names_the_file_and_the_problem(tmp_path, content, problem):
    path = write_run(tmp_path, "bad.json", content)
    with pytest.raises(RunError, match=problem) as info:
        load_run(path)
    assert str(path) in str(info.value)
    assert info.value.path == path


def test_missing_file_is_named(tmp_path):
    with pytest.raises(RunError, match="no such file") as info:
        load_run(tmp_path / "absent.json")
    assert "absent.json" in str(info.value)


def test_an_empty_but_genuine_run_is_accepted(tmp_path):
    """Every test skipped (e.g. no GPU): still ampbench output, reported as having no results."""
    run = parse_run({"machine_info": {"ampbench": {"device": "cpu"}}, "benchmarks": []}, tmp_path / "e.json")
    files = build_report(run)
    assert b"no ampbench results" in files["index.html"]
    assert "no ampbench results" in files["summary.md"].decode()


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
    # an A/B run's figures are its table of head over base: it draws no chart
    assert images or all(isinstance(c, PairedRecord) for c in run.cells), "no charts in the HTML"
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


SEARCHED_RUN = DATA / "synthetic_h100_quick.json"  # memory cells with their largest batch


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
    assert memory and all(c.side("mode").max_batch is None and not c.batch_searched for c in memory)
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
    assert ({r.verdict for r in back.rows if r.test_id in memory_ids and r.figure == "largest batch"}
            == {Verdict.NO_BASELINE})
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
    if any(c.ratio(WALL).baseline_speedup is not None for c in run.of_kind(SpeedRecord)):
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


