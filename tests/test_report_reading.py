"""Reading a saved run (``ampbench.report.load_run``): every fixture loads, and a file that is not a usable
run is refused with one message that names the file, the field and what is wrong with it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ampbench.report import RunError, build_report, load_run, parse_run
from ampbench.results import SpeedRecord
from report_runs import DATA, REAL_H100, RUNS, gpu_run, write_run


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
    path = write_run(tmp_path, "bad.json", doc)
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
    path = write_run(tmp_path, "bad.json", doc)
    with pytest.raises(RunError, match=re.escape(words)) as info:
        load_run(path)
    assert str(path) in str(info.value)


def test_every_bad_figure_of_a_file_is_counted_in_one_message(tmp_path):
    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    speed = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") == "speed"]
    for b in speed[:5]:
        b["extra_info"]["speedup"] = float("nan")
    with pytest.raises(RunError, match=r"and 2 more"):
        load_run(write_run(tmp_path, "bad.json", doc))


def test_a_directory_or_a_file_that_is_not_text_names_itself(tmp_path):
    with pytest.raises(RunError, match="is a directory") as info:
        load_run(tmp_path)
    assert "Errno" not in str(info.value) and str(tmp_path) in str(info.value)
    binary = tmp_path / "run.json"
    binary.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(RunError, match="not UTF-8"):
        load_run(binary)
    deep = write_run(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
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
