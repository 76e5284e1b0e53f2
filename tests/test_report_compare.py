"""ampbench compare against the benchmark JSON files in tests/data/: the suite's own statistics, the
tests only one run has, other devices, and the comparison in the report."""

from __future__ import annotations

import copy
import json

import pytest

from ampbench.report import build_report, load_run, parse_run, render_comparison_markdown, render_markdown
from ampbench.report.compare import MISSING, NEW, compare_runs
from ampbench.results import SpeedRecord
from ampbench.results.ratios import WALL
from ampbench.tolerance import tolerance_for
from ampbench.verdict import SpeedupCheck, Verdict
from report_runs import gpu_run, png_ok

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
    return min((c for c in run.of_kind(SpeedRecord)), key=lambda c: c.estimate(WALL).half_width)


def test_a_run_compared_with_itself_has_no_regression():
    run = load_run(gpu_run())
    comparison = compare_runs(run, run)
    assert not comparison.failures and not comparison.failed(strict=True)
    assert not [r for r in comparison.rows if r.verdict in (Verdict.IMPROVED.value, MISSING, NEW)]
    assert {r.test_id for r in comparison.rows} >= {c.test_id for c in run.of_kind(SpeedRecord)}


def test_compare_uses_the_suites_statistics(tmp_path):
    path = gpu_run()
    doc = json.loads(path.read_text())
    old = load_run(path)
    cell = _tightest_speed_cell(old)
    est = cell.estimate(WALL)
    tolerance = max(tolerance_for(0.03, est.half_width), cell.ratio(WALL).tolerance or 0)
    # far enough down that the whole new interval lies below the regression line
    factor = (1 - tolerance) / (est.high / est.speedup) * 0.9
    new = parse_run(_scaled(doc, cell.test_id, factor), tmp_path / "new.json")
    comparison = compare_runs(old, new)
    (row,) = [r for r in comparison.rows if r.test_id == cell.test_id]
    expected = SpeedupCheck(cell.model, cell.mode, est.speedup, tolerance).classify(
        new.cell(SpeedRecord, cell.model, cell.mode).estimate(WALL))
    assert row.verdict == expected.value == Verdict.REGRESSION.value
    assert row.change == pytest.approx(factor - 1)
    assert cell.model in row.message and cell.mode in row.message
    assert comparison.failed() and comparison.failures == [row]
    others = [r for r in comparison.rows if r.test_id != cell.test_id]
    assert not [r for r in others if r.verdict in (Verdict.REGRESSION.value, Verdict.INCONCLUSIVE.value)]


def test_compare_sees_an_improvement_and_a_memory_regression(tmp_path):
    path = gpu_run()
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
    path = gpu_run()
    doc = json.loads(path.read_text())
    old = load_run(path)
    gone = doc["benchmarks"].pop(0)["name"]
    doc["benchmarks"].append({"name": "test_speed[newmodel-bf16]",
                              "extra_info": {"ampbench_schema": 1, "kind": "speed",
                                             "model": "newmodel", "mode": "bf16"}})
    comparison = compare_runs(old, parse_run(doc, tmp_path / "new.json"))
    verdicts = {r.test_id: r.verdict for r in comparison.rows}
    assert verdicts[gone] == MISSING
    assert verdicts["test_speed[newmodel-bf16]"] == NEW
    assert [r.test_id for r in comparison.missing] == [gone]
    assert comparison.failed(), "a test the new run lost must not read as a pass"
    assert not comparison.failed(allow_missing=True)


def test_compare_refuses_runs_from_different_devices_unless_asked(tmp_path):
    from ampbench.report.compare import CompareError

    path = gpu_run()
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
    assert not compare_runs(run({"torch": "2.11"}, "cuda:0"),
                            run({"device": "NVIDIA H100 80GB HBM3"}, "cuda")).cross_device


def test_comparison_goes_into_html_markdown_and_a_chart(tmp_path):
    path = gpu_run()
    old = load_run(path)
    cell = _tightest_speed_cell(old)
    new = parse_run(_scaled(json.loads(path.read_text()), cell.test_id, 0.5), tmp_path / "new.json")
    comparison = compare_runs(old, new)
    files = build_report(new, comparison)
    assert png_ok(files["compare.png"])
    html = files["index.html"].decode()
    assert "Compared with" in html and cell.test_id in html
    md = render_markdown(new, comparison)
    assert "Compared with" in md and cell.test_id in md

