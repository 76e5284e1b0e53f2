"""ampbench.report and ampbench.report.compare against the benchmark JSON files in tests/data/.

Every ``tests/data/*.json`` is a run the suite wrote (or could have written): the tests assert the
structure of what is made from it, never its numbers, so a fresh capture can replace any of them.
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest

from ampbench.report.compare import MISSING, NEW, compare_runs
from ampbench.report import (
    REPORT_MARKER,
    ROW_HEADERS,
    RunError,
    build_report,
    fmt_ms,
    load_run,
    model_rows,
    speedup_matrix,
    parse_run,
    render_comparison_markdown,
    render_markdown,
    write_report,
)
from ampbench.results import MemoryRecord, SpeedRecord
from ampbench.verdict import SpeedupCheck, Verdict, tolerance_for

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("*.json"))
REAL_H100 = DATA / "h100_run.json"


def _fixtures_module():
    spec = importlib.util.spec_from_file_location("ampbench_test_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(tmp_path: Path, name: str, document) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def _gpu_run() -> Path:
    """A run with GPU figures (memory, largest batch): the real H100 capture once it is there."""
    return REAL_H100 if REAL_H100.exists() else DATA / "synthetic_h100_quick.json"


def _png_ok(data: bytes) -> bool:
    return data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


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
        est = cell.estimate()
        assert est is not None, f"{cell.test_id}: speed cell without a speedup interval"
        assert est.low <= est.speedup <= est.high
        assert cell.model in cell.test_id and cell.mode in cell.test_id


def test_real_h100_capture_has_gpu_figures():
    if not REAL_H100.exists():
        pytest.skip(f"the real H100 capture {REAL_H100} is not in the repository yet")
    run = load_run(REAL_H100)
    assert "H100" in run.gpu
    speed = run.of_kind(SpeedRecord)
    assert speed, "an H100 run without speed results"
    assert all(c.peak_mem_bytes is not None for c in speed), "peak memory missing on a GPU run"
    assert any(c.tflops_fraction is not None for c in speed)
    assert {"torch", "cuda", "device"} <= set(run.machine)


def test_model_and_mode_come_from_the_test_id_when_extra_info_lacks_them(tmp_path):
    doc = {"machine_info": {"ampbench": {"device": "cpu"}}, "benchmarks": [
        {"name": "test_speed[wide_resnet28_10-amp_fp16]", "extra_info": {"ampbench_schema": 1, "kind": "speed"}}]}
    run = parse_run(doc, tmp_path / "x.json")
    (cell,) = run.cells
    assert (cell.model, cell.mode) == ("wide_resnet28_10", "amp_fp16")


def test_benchmarks_not_written_by_ampbench_are_left_out(tmp_path):
    doc = json.loads(_gpu_run().read_text())
    doc["benchmarks"].append({"name": "test_other", "stats": {}, "extra_info": {}})
    run = parse_run(doc, tmp_path / "mixed.json")
    assert run.foreign == ["test_other"]
    assert all(c.test_id != "test_other" for c in run.cells)


# ---------------------------------------------------------------------------------------------------
# bad input: a clear error that names the file


def test_truncated_json_is_called_truncated(tmp_path):
    text = _gpu_run().read_text()
    path = _write(tmp_path, "cut.json", text[: len(text) // 2])
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
        ('{"machine_info": {}, "benchmarks": [{"name": "test_x", "extra_info": {}, "stats": {}}]}', "not ampbench output"),
        ('{"machine_info": {}, "benchmarks": []}', "not ampbench output"),
        ('{"machine_info": {"ampbench": {}}, "benchmarks": [{"name": "t[a-b]", "extra_info": {"ampbench_schema": 2}}]}',
         "schema 2"),
        ('{"machine_info": {"ampbench": {}}, "benchmarks": [3]}', r"benchmarks\[0\]"),
    ],
    ids=["empty", "not-json", "list", "no-benchmarks-list", "plain-pytest-benchmark", "no-trace-of-ampbench",
         "other-schema", "bad-entry"],
)
def test_unusable_json_names_the_file_and_the_problem(tmp_path, content, problem):
    path = _write(tmp_path, "bad.json", content)
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


@pytest.fixture(scope="module")
def gpu_report():
    run = load_run(_gpu_run())
    return run, build_report(run)


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
        assert _png_ok(base64.b64decode(src.split(",", 1)[1]))
    for name, data in files.items():
        if name.endswith(".png"):
            assert _png_ok(data), name
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
    doc = json.loads(_gpu_run().read_text())
    speed = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"]
    speed[0]["extra_info"]["throughput"] = float("nan")
    speed[0]["extra_info"]["step_ms"] = float("inf")
    run = parse_run(json.loads(json.dumps(doc)), tmp_path / "nan.json")
    files = build_report(run)
    assert "speedup.png" in files and "throughput.png" in files
    row = next(r for r in model_rows(run)[run.cells[0].model] if r.mode == run.cells[0].mode)
    assert row.cells()[1] == row.cells()[3] == "-"


def _first_of_kind(doc: dict, kind: str) -> tuple[int, dict]:
    return next((i, b) for i, b in enumerate(doc["benchmarks"]) if b["extra_info"].get("kind") == kind)


@pytest.mark.parametrize(
    "kind, key, value, words",
    [
        ("speed", "speedup", float("nan"), "is nan"),
        ("speed", "speedup", float("inf"), "is inf"),
        ("speed", "speedup", "2.3x", "'2.3x' (a string)"),
        ("speed", "speedup", -1.5, "is -1.5"),
        ("speed", "speedup", 0, "is 0"),
        ("speed", "speedup", True, "True (a boolean)"),
        ("speed", "speedup_low", 99.0, "out of order"),
        ("speed", "rounds", 2.5, "2.5 (a number); expected an integer"),
        ("speed", "confidence", 99, "is 99"),
        ("speed", "verdict", 3, "3 (an integer); expected one of 'pass'"),
        ("speed", "verdict", "fine", "'fine' (a string); expected one of 'pass'"),
        ("convergence", "verdict", "diverged", "'diverged' (a string); expected one of"),
        ("speed", "kind", None, "extra_info.kind is null; expected a string"),
        ("memory", "memory_ratio", "0.6", "'0.6' (a string)"),
        ("memory", "max_batch_ratio", -2, "is -2"),
        ("convergence", "accuracy", float("nan"), "is nan"),
        ("convergence", "accuracy", [0.9], "a list"),
        ("convergence", "message", {"text": "x"}, "an object; expected a string"),
    ],
)
def test_a_figure_that_reaches_a_verdict_must_be_usable(tmp_path, kind, key, value, words):
    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    i, bench = _first_of_kind(doc, kind)
    bench["extra_info"][key] = value
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(RunError) as info:
        load_run(path)
    message = str(info.value)
    assert str(path) in message and f"benchmarks[{i}].extra_info.{key}" in message and words in message
    assert bench["name"] in message


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.update(machine_info="H100"), "machine_info is 'H100' (a string); expected an object"),
        (lambda d: d.update(datetime=20260510), "datetime is 20260510"),
        (lambda d: d["machine_info"]["ampbench"].update(device=["cuda"]), "machine_info.ampbench.device is a list"),
        (lambda d: d["benchmarks"][2].pop("name"), "benchmarks[2].name is missing; expected a string"),
        (lambda d: d["benchmarks"][2].update(extra_info=[1]), "benchmarks[2].extra_info is a list"),
    ],
    ids=["machine-info", "datetime", "device", "no-name", "extra-info"],
)
def test_the_frame_of_a_run_must_be_pytest_benchmarks(tmp_path, change, words):
    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    change(doc)
    path = _write(tmp_path, "bad.json", doc)
    with pytest.raises(RunError, match=re.escape(words)) as info:
        load_run(path)
    assert str(path) in str(info.value)


def test_every_bad_figure_of_a_file_is_counted_in_one_message(tmp_path):
    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    speed = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"]
    for b in speed[:5]:
        b["extra_info"]["speedup"] = float("nan")
    with pytest.raises(RunError, match=r"and 2 more"):
        load_run(_write(tmp_path, "bad.json", doc))


def test_a_directory_or_a_file_that_is_not_text_names_itself(tmp_path):
    with pytest.raises(RunError, match="is a directory") as info:
        load_run(tmp_path)
    assert "Errno" not in str(info.value) and str(tmp_path) in str(info.value)
    binary = tmp_path / "run.json"
    binary.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(RunError, match="not UTF-8"):
        load_run(binary)
    deep = _write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(RunError, match="nested too deeply"):
        load_run(deep)


def test_the_fixtures_read_with_the_same_verdict_counts():
    """Validation turns nothing away that the suite wrote, and changes no verdict."""
    from ampbench.report import verdict_counts

    expected = {
        "cpu_smoke.json": {"speed": {"no baseline": 12}},
        "h100_run.json": {"speed": {"no baseline": 42}},
        "synthetic_h100_quick.json": {"speed": {"regression": 1, "inconclusive": 1, "pass": 33},
                                      "memory": {"no baseline": 35}, "convergence": {"regression": 1, "pass": 13}},
    }
    for name, counts in expected.items():
        assert verdict_counts(load_run(DATA / name).cells) == counts, name


# ---------------------------------------------------------------------------------------------------
# html from hostile data: every string of the JSON is text, never markup

HOSTILE = [
    "<script>alert(1)</script>",
    "\"><script>alert('x')</script>",
    "x' onmouseover='alert(1)",
    'y" onerror="alert(1)',
    "javascript:alert(1)",
]


def _hostile_run(tmp_path: Path) -> Path:
    h = HOSTILE
    speed = {"ampbench_schema": 1, "kind": "speed", "speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1,
             "rounds": 12, "confidence": 0.99}
    doc = {
        "datetime": h[1],
        "commit_info": {"id": h[0], "dirty": True},
        "machine_info": {"ampbench": {"device": h[0], "torch": h[1], "driver": h[2], "cuda": h[4],
                                      "clocks": {h[0]: h[3]}}},
        "benchmarks": [
            {"name": f"test_speed[{h[0]}-{h[2]}]", "extra_info": dict(
                speed, model=h[0], mode=h[2], device=h[1], verdict="improved", message=h[4], device_speedup=2.5,
                device_speedup_low=2.4, device_speedup_high=2.6, device_method=h[0], kernel_changes=f"{h[2]}; {h[3]}",
                host_bound=True, idle_share=0.5, host_overhead_ms=1.0)},
            {"name": f"test_speed[{h[3]}-{h[4]}]", "extra_info": dict(
                speed, model=h[3], mode=h[4], verdict="regression", message=h[0])},
            {"name": f"test_memory[{h[3]}-{h[4]}]", "extra_info": {
                "ampbench_schema": 1, "kind": "memory", "model": h[3], "mode": h[4], "memory_ratio": 0.6,
                "device": h[3], "verdict": "non-finite", "message": h[2]}},
            {"name": f"test_x[{h[4]}-{h[1]}]", "extra_info": {
                "ampbench_schema": 1, "kind": h[0], "verdict": "input-bound", "message": h[3]}},
            {"name": h[0], "extra_info": {}},
        ],
    }
    return _write(tmp_path, h[0].replace("/", "_") + ".json", doc)


class _Page(__import__("html.parser").parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))

    handle_startendtag = handle_starttag

    def handle_data(self, data):
        self.text.append(data)


def test_html_from_hostile_json_holds_only_the_templates_markup(tmp_path):
    from ampbench.report import VERDICT_CLASSES

    run = load_run(_hostile_run(tmp_path))
    comparison = compare_runs(run, run)
    html = build_report(run, comparison, failures=[(HOSTILE[0], HOSTILE[3])])["index.html"].decode()
    page = _Page()
    page.feed(html)
    page.close()
    allowed_tags = {"html", "head", "meta", "title", "style", "body", "main", "h1", "h2", "h3", "p", "code", "div",
                    "span", "b", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "details", "summary",
                    "figure", "img", "figcaption", "footer"}
    allowed_classes = {"sub", "software", "chips", "chip", "kind", "msg", "reference", "v", "flag", "note", "wide",
                       "matrix", "iv", "method", "changes", "look", "look-detail", "kernel", "kernels",
                       *VERDICT_CLASSES.values(), "v-other"}
    for tag, attrs in page.tags:
        assert tag in allowed_tags, tag
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert name in {"lang", "charset", "name", "content", "class", "title", "alt", "src"}, (tag, name)
            assert not "".join((value or "").split()).lower().startswith("javascript:"), (tag, name, value)
            if name == "class":
                assert set((value or "").split()) <= allowed_classes, value
            if name == "src":
                assert (value or "").startswith("data:image/png;base64,")
    text = "".join(page.text)
    for s in HOSTILE:
        assert s in text, f"{s!r} is not shown as text"
    assert "<script" not in html.lower()


def test_a_verdict_outside_the_vocabulary_is_refused_naming_file_and_field(tmp_path):
    doc = json.loads(_hostile_run(tmp_path).read_text())
    doc["benchmarks"][3]["extra_info"]["verdict"] = 'x" onclick="alert(1)'
    path = _write(tmp_path, "crafted.json", doc)
    with pytest.raises(RunError, match=re.escape("benchmarks[3].extra_info.verdict is 'x\" onclick=")) as info:
        load_run(path)
    assert str(path) in str(info.value) and "expected one of 'pass'" in str(info.value)


def test_verdicts_map_to_a_fixed_set_of_classes():
    from ampbench.report import VERDICT_CLASSES, verdict_class

    assert verdict_class("regression") == verdict_class(Verdict.NON_FINITE) == "v-regression"
    assert verdict_class('x" onclick="alert(1)') == "v-other"
    assert all(verdict_class(v) != "v-other" for v in Verdict), "every verdict of the vocabulary has its class"
    assert {verdict_class(v) for v in Verdict if v.failing} == {"v-regression"} and "v-regression" in VERDICT_CLASSES.values()


def test_the_template_and_css_ship_with_the_package():
    from importlib.resources import files

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    templates = files("ampbench") / "templates"
    assert (templates / "report.html.j2").is_file() and (templates / "report.css").is_file()
    project = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert any(d.replace(" ", "").startswith("jinja2>=3.1") for d in project["project"]["dependencies"])
    shipped = project["tool"]["setuptools"]["package-data"]["ampbench"]
    assert "templates/*.j2" in shipped and "templates/*.css" in shipped


# ---------------------------------------------------------------------------------------------------
# writing: all or nothing


def test_write_report_replaces_an_earlier_report(tmp_path, gpu_report):
    _, files = gpu_report
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old", "stale.png": b"x"})
    write_report(out, files)
    assert (out / "index.html").read_bytes() == files["index.html"]
    assert not (out / "stale.png").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]  # no temp folders left


def test_write_report_refuses_a_folder_that_is_not_a_report(tmp_path, gpu_report):
    _, files = gpu_report
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.tex").write_text("keep me")
    with pytest.raises(FileExistsError):
        write_report(out, files)
    assert (out / "thesis.tex").read_text() == "keep me"


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    def boom(self, data):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", boom)
    with pytest.raises(OSError, match="disk full"):
        write_report(tmp_path / "report", {"index.html": b"x", "summary.md": b"y"})
    assert list(tmp_path.iterdir()) == []


def test_write_report_lists_its_files_in_a_marker(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"a", "summary.md": b"b", "speedup.png": b"c"})
    marker = json.loads((out / REPORT_MARKER).read_text())
    assert marker["files"] == ["index.html", "speedup.png", "summary.md"]
    assert sorted(p.name for p in out.iterdir()) == sorted([REPORT_MARKER, *marker["files"]])


@pytest.mark.parametrize("extra", ["notes.txt", "sub/data.csv", "index.html/inside.txt"],
                         ids=["file", "folder", "folder-under-a-report-name"])
def test_write_report_never_deletes_what_it_did_not_write(tmp_path, extra):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    if extra.startswith("index.html/"):
        (out / "index.html").unlink()
    (out / extra).parent.mkdir(parents=True, exist_ok=True)
    (out / extra).write_text("mine")
    with pytest.raises(FileExistsError, match=re.escape(extra.split("/")[0])) as info:
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert str(out) in str(info.value)
    assert (out / extra).read_text() == "mine"


def test_a_folder_without_a_marker_is_not_a_report(tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("someone's page")
    (out / "summary.md").write_text("someone's notes")
    with pytest.raises(FileExistsError, match="index.html"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert (out / "index.html").read_text() == "someone's page"


def test_a_failed_write_keeps_the_previous_report(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = Path.write_bytes

    def fail_on_summary(self, data):
        if self.name == "summary.md":
            raise OSError("disk full")
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", fail_on_summary)
    with pytest.raises(OSError, match="disk full"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_a_failed_swap_puts_the_previous_report_back(tmp_path, monkeypatch):
    import os

    out = tmp_path / "report"
    write_report(out, {"index.html": b"old", "summary.md": b"old"})
    real = os.replace

    def fail_into_place(src, dst):
        if Path(src).name.endswith(".tmp"):  # the new report into place, after the old one moved aside
            raise OSError("interrupted")
        return real(src, dst)

    monkeypatch.setattr(os, "replace", fail_into_place)
    with pytest.raises(OSError, match="interrupted"):
        write_report(out, {"index.html": b"new", "summary.md": b"new"})
    monkeypatch.undo()
    assert (out / "index.html").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


# ---------------------------------------------------------------------------------------------------
# compare


def _scaled(doc: dict, test_id: str, factor: float, keys=("speedup", "speedup_low", "speedup_high")) -> dict:
    doc = copy.deepcopy(doc)
    for b in doc["benchmarks"]:
        if b["name"] == test_id:
            for k in keys:
                b["extra_info"][k] *= factor
    return doc


def _tightest_speed_cell(run):
    return min((c for c in run.of_kind(SpeedRecord)), key=lambda c: c.estimate().half_width)


def test_a_run_compared_with_itself_has_no_regression():
    run = load_run(_gpu_run())
    comparison = compare_runs(run, run)
    assert not comparison.failures and not comparison.failed(strict=True)
    assert not [r for r in comparison.rows if r.verdict in (Verdict.IMPROVED.value, MISSING, NEW)]
    assert {r.test_id for r in comparison.rows} >= {c.test_id for c in run.of_kind(SpeedRecord)}


def test_compare_uses_the_suites_statistics(tmp_path):
    path = _gpu_run()
    doc = json.loads(path.read_text())
    old = load_run(path)
    cell = _tightest_speed_cell(old)
    est = cell.estimate()
    tolerance = max(tolerance_for(0.03, est.half_width), cell.tolerance or 0)
    # far enough down that the whole new interval lies below the regression line
    factor = (1 - tolerance) / (est.high / est.speedup) * 0.9
    new = parse_run(_scaled(doc, cell.test_id, factor), tmp_path / "new.json")
    comparison = compare_runs(old, new)
    (row,) = [r for r in comparison.rows if r.test_id == cell.test_id]
    expected = SpeedupCheck(cell.model, cell.mode, est.speedup, tolerance).classify(new.cell(SpeedRecord, cell.model, cell.mode).estimate())
    assert row.verdict == expected.value == Verdict.REGRESSION.value
    assert row.change == pytest.approx(factor - 1)
    assert cell.model in row.message and cell.mode in row.message
    assert comparison.failed() and comparison.failures == [row]
    others = [r for r in comparison.rows if r.test_id != cell.test_id]
    assert not [r for r in others if r.verdict in (Verdict.REGRESSION.value, Verdict.INCONCLUSIVE.value)]


def test_compare_sees_an_improvement_and_a_memory_regression(tmp_path):
    path = _gpu_run()
    doc = json.loads(path.read_text())
    old = load_run(path)
    cell = _tightest_speed_cell(old)
    doc = _scaled(doc, cell.test_id, 1.5)
    memory = [c for c in old.cells if c.memory_ratio is not None and c.kind == "memory"]
    if memory:
        doc = _scaled(doc, memory[0].test_id, 1.5, keys=("memory_ratio",))
    comparison = compare_runs(old, parse_run(doc, tmp_path / "new.json"))
    verdicts = {(r.test_id, r.figure): r.verdict for r in comparison.rows}
    assert verdicts[(cell.test_id, "speedup")] == Verdict.IMPROVED.value
    if memory:
        assert verdicts[(memory[0].test_id, "memory ratio")] == Verdict.REGRESSION.value
        assert comparison.failed()


def test_compare_lists_tests_only_one_run_has(tmp_path):
    path = _gpu_run()
    doc = json.loads(path.read_text())
    old = load_run(path)
    gone = doc["benchmarks"].pop(0)["name"]
    doc["benchmarks"].append({"name": "test_speed[newmodel-bf16]",
                              "extra_info": {"ampbench_schema": 1, "kind": "speed", "model": "newmodel", "mode": "bf16"}})
    comparison = compare_runs(old, parse_run(doc, tmp_path / "new.json"))
    verdicts = {r.test_id: r.verdict for r in comparison.rows}
    assert verdicts[gone] == MISSING
    assert verdicts["test_speed[newmodel-bf16]"] == NEW
    assert [r.test_id for r in comparison.missing] == [gone]
    assert comparison.failed(), "a test the new run lost must not read as a pass"
    assert not comparison.failed(allow_missing=True)


def test_compare_refuses_runs_from_different_devices_unless_asked(tmp_path):
    from ampbench.report.compare import CompareError

    path = _gpu_run()
    doc = json.loads(path.read_text())
    doc["machine_info"]["ampbench"].update(device="NVIDIA A100-SXM4-80GB", torch="9.9.9")
    a100 = parse_run(doc, tmp_path / "a100.json")
    with pytest.raises(CompareError, match="--cross-device") as info:
        compare_runs(load_run(path), a100)
    assert "a100.json" in str(info.value) and "NVIDIA A100-SXM4-80GB" in str(info.value)
    comparison = compare_runs(load_run(path), a100, cross_device=True)
    assert comparison.cross_device and comparison.notes[0].startswith("CROSS-DEVICE")
    assert "ratios over fp32 only" in comparison.notes[0] and "9.9.9" in " ".join(comparison.notes)
    md = "\n".join(render_comparison_markdown(comparison))
    assert md.index("CROSS-DEVICE") < md.index("|")
    assert b"CROSS-DEVICE" in build_report(a100, comparison)["index.html"]


def test_a_device_is_told_by_machine_info_or_by_cells_that_name_hardware(tmp_path):
    from ampbench.report.compare import device_of

    def run(machine: dict, device: str) -> "object":
        return parse_run({"machine_info": {"ampbench": machine}, "benchmarks": [
            {"name": "test_speed[m-bf16]", "extra_info": {"ampbench_schema": 1, "kind": "speed", "device": device}}]},
            tmp_path / "r.json")

    assert device_of(run({"device": "NVIDIA H100 80GB HBM3"}, "cuda")) == "NVIDIA H100 80GB HBM3"
    assert device_of(run({"torch": "2.11"}, "cpu")) == "cpu"
    assert device_of(run({"torch": "2.11"}, "cuda:0")) is None  # which card, it does not say
    assert not compare_runs(run({"torch": "2.11"}, "cuda:0"), run({"device": "NVIDIA H100 80GB HBM3"}, "cuda")).cross_device


def test_comparison_goes_into_html_markdown_and_a_chart(tmp_path):
    path = _gpu_run()
    old = load_run(path)
    cell = _tightest_speed_cell(old)
    new = parse_run(_scaled(json.loads(path.read_text()), cell.test_id, 0.5), tmp_path / "new.json")
    comparison = compare_runs(old, new)
    files = build_report(new, comparison)
    assert _png_ok(files["compare.png"])
    html = files["index.html"].decode()
    assert "Compared with" in html and cell.test_id in html
    md = render_markdown(new, comparison)
    assert "Compared with" in md and cell.test_id in md


# ---------------------------------------------------------------------------------------------------
# a full-tier run (its render time is not asserted: a timed unit test fails on a loaded runner, which
# is noise)


def test_full_tier_report_is_complete(tmp_path):
    doc = _fixtures_module().full_tier_run()
    path = _write(tmp_path, "full.json", doc)
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
