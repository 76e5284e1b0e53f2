"""ampbench.results: every run JSON written before reads into records that keep its figures as they were,
the reader names file, field and version of what it cannot read, the vocabulary says what fails, and
the format needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.results import RECORD_TYPES, SCHEMA_VERSION, Record, RunError, SpeedRecord, Verdict, load_run, record_type

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("*.json"))
ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_cell_of_an_older_run_keeps_its_figures(path):
    infos = {b["name"]: b["extra_info"] for b in json.loads(path.read_text())["benchmarks"]}
    for cell in load_run(path).cells:
        info = infos[cell.test_id]
        written = cell.to_info()
        assert type(cell) is record_type(info["kind"]) and not cell.detail, cell.test_id  # every key is typed
        assert {k: v for k, v in written.items() if k in info} == info, cell.test_id


def test_a_record_writes_plain_json_and_reads_back_equal():
    record = SpeedRecord(model="gpt", mode="bf16", device="cuda:0", speedup=2.0, speedup_low=1.9, speedup_high=2.1,
                         rounds=12, confidence=0.99, verdict=Verdict.REGRESSION, wall_verdict=Verdict.PASS,
                         gated=["device"], round_ms=[1.0, 1.1])
    info = json.loads(json.dumps(record.to_info()))
    assert info["ampbench_schema"] == SCHEMA_VERSION and info["kind"] == "speed"
    assert type(info["verdict"]) is str and info["verdict"] == "regression"
    assert SpeedRecord.from_info(info, "test_speed[gpt-bf16]") == record.__class__(**{**vars(record), "test_id": "test_speed[gpt-bf16]"})
    assert record.to_info(only_set=True) == {"ampbench_schema": SCHEMA_VERSION, "kind": "speed", **{
        k: v for k, v in info.items() if v is not None and k not in ("ampbench_schema", "kind")}}


def test_each_speedup_reads_back_with_its_own_confidence_else_the_records():
    # a gated device figure at 99% beside a wall figure only looked at, at 95%
    record = SpeedRecord(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=6, confidence=0.95,
                         device_speedup=2.5, device_speedup_low=2.49, device_speedup_high=2.51, device_rounds=8,
                         device_confidence=0.99)
    assert record.estimate().confidence == 0.95 and record.estimate(device=True).confidence == 0.99
    older = SpeedRecord(device_speedup=2.5, device_speedup_low=2.49, device_speedup_high=2.51, device_rounds=8,
                        confidence=0.99)
    assert older.estimate(device=True).confidence == 0.99


def test_keys_a_kind_does_not_name_are_kept_as_they_came():
    info = {"ampbench_schema": 1, "kind": "memory", "model": "gpt", "mode": "bf16", "weights_bytes": 123,
            "allocator_ooms": 0}
    record = record_type("memory").from_info(info)
    assert record.detail == {"weights_bytes": 123, "allocator_ooms": 0} and record.value("weights_bytes") == 123
    assert {k: v for k, v in record.to_info().items() if k in info} == info


def test_an_unknown_kind_reads_as_an_other_record_with_its_kind():
    record = record_type("future").from_info({"ampbench_schema": 1, "kind": "future", "verdict": "pass"})
    assert record.kind == "future" and record.verdict is Verdict.PASS and record.to_info()["kind"] == "future"


def test_another_schema_names_the_file_the_field_and_the_version(tmp_path):
    doc = json.loads((DATA / "cpu_smoke.json").read_text())
    doc["benchmarks"][4]["extra_info"]["ampbench_schema"] = 99
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(RunError) as info:
        load_run(path)
    text = str(info.value)
    assert str(path) in text and "benchmarks[4].extra_info.ampbench_schema" in text and "99" in text
    assert f"reads schema {SCHEMA_VERSION}" in text


def test_every_failing_outcome_is_recognisably_failing():
    assert {v for v in Verdict if v.failing} == {Verdict.REGRESSION, Verdict.NON_FINITE, Verdict.REFERENCE_FAILED,
                                                Verdict.ERROR}
    assert {v for v in Verdict if v.warns} == {Verdict.INCONCLUSIVE, Verdict.INPUT_BOUND}
    assert not any(v.failing and v.warns for v in Verdict)
    # a member is its value in text, in formats and as a key
    assert f"{Verdict.NON_FINITE}" == str(Verdict.NON_FINITE) == "non-finite"
    assert {"non-finite": 1}[Verdict.NON_FINITE] == 1 and {Verdict.NON_FINITE: 1}["non-finite"] == 1


def test_every_kind_has_a_record_type_of_its_own():
    kinds = [t.KIND for t in RECORD_TYPES]
    assert len(set(kinds)) == len(kinds) and all(issubclass(t, Record) for t in RECORD_TYPES)


def test_the_format_the_report_and_compare_import_no_torch():
    code = ("import sys; import ampbench.results, ampbench.report, ampbench.report.compare, ampbench.baselines.spread, ampbench.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "from ampbench.results import order_modes; print(order_modes(['bf16', 'new_mode', 'fp32', 'tf32']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    # the mode table's order, and a mode it does not know after them
    assert run.stdout.strip() == "['fp32', 'tf32', 'bf16', 'new_mode']"
