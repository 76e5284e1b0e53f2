"""A run JSON whose figures cannot reach a verdict is refused, naming the file, the field and what
it must be; figures that are only shown read as a dash."""

from __future__ import annotations

import json
import re

import pytest

from ampbench.report import RunError, load_run
from report_runs import DATA, write_run


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

