"""ampbench.results: every run JSON written before reads into records that keep its figures as they were,
the reader names file, field and version of what it cannot read, the vocabulary says what fails, and
the format needs no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.results import (
    FP32_SIDE,
    MODE_SIDE,
    READABLE_SCHEMAS,
    RECORD_TYPES,
    SCHEMA_VERSION,
    VERSUS_SIDE,
    DeviceQueue,
    RatioFigures,
    Record,
    RunError,
    SpeedRecord,
    SpeedSide,
    StepFigures,
    Verdict,
    load_run,
    record_type,
)
from ampbench.results.ratios import DEVICE, DIST_DEVICE, SCALING, VERSUS, WALL
from run_figures import flat_names
from tests import records

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("*.json"))
ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_cell_of_an_older_run_keeps_its_figures(path):
    document = json.loads(path.read_text())
    infos = {b["name"]: b["extra_info"] for key in ("benchmarks", "ampbench_untimed", "ampbench_errors")
             for b in document.get(key) or ()}
    for cell in load_run(path).cells:
        # what it measured (a ratio holds no null: an unmeasured figure is absent)
        info = {k: v for k, v in infos[cell.test_id].items() if k != "ampbench_schema" and v is not None}
        written = flat_names(cell.to_info())  # each figure of a ratio under the name its older run gave it
        assert type(cell) is record_type(info["kind"]) and not cell.detail, cell.test_id  # every key is typed
        # a cell that wrote no model or mode (the underflow demonstration) is named by its test id
        unnamed = {k for k in ("model", "mode") if info.get(k) is None}
        assert {k: v for k, v in written.items() if k in info and k not in unnamed} == {
            k: v for k, v in info.items() if k not in unnamed}, cell.test_id


def test_a_record_writes_plain_json_and_reads_back_equal():
    wall = RatioFigures(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=12, confidence=0.99,
                        verdict=Verdict.PASS, sides={MODE_SIDE: StepFigures(round_ms=[1.0, 1.1])})
    record = SpeedRecord(model="gpt", mode="bf16", device="cuda:0", verdict=Verdict.REGRESSION, gated=["device"],
                         ratios={"wall": wall})
    info = json.loads(json.dumps(record.to_info()))
    assert info["ampbench_schema"] == SCHEMA_VERSION and info["kind"] == "speed"
    assert type(info["verdict"]) is str and info["verdict"] == "regression"
    # a ratio holds what it measured, by name, as a baseline entry does
    assert info["ratios"] == {"wall": {"speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1, "rounds": 12,
                                       "confidence": 0.99, "verdict": "pass",
                                       "sides": {"mode": {"round_ms": [1.0, 1.1]}}}}
    assert SpeedRecord.from_info(info, "test_speed[gpt-bf16]") == record.__class__(
        **{**vars(record), "test_id": "test_speed[gpt-bf16]"})
    assert record.to_info(only_set=True) == {"ampbench_schema": SCHEMA_VERSION, "kind": "speed", **{
        k: v for k, v in info.items() if v is not None and k not in ("ampbench_schema", "kind")}}


def test_each_speedup_reads_back_with_its_own_confidence_else_the_records():
    # a gated device figure at 99% beside a wall figure only looked at, at 95%
    record = records.speed(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=6, confidence=0.95,
                           device_speedup=2.5, device_speedup_low=2.49, device_speedup_high=2.51, device_rounds=8,
                           device_confidence=0.99)
    assert record.estimate(WALL).confidence == 0.95 and record.estimate(DEVICE).confidence == 0.99
    older = records.speed(device_speedup=2.5, device_speedup_low=2.49, device_speedup_high=2.51, device_rounds=8,
                          confidence=0.99)
    assert older.estimate(DEVICE).confidence == 0.99


def test_a_run_of_the_first_schema_reads_each_figure_into_its_ratio():
    info = {"ampbench_schema": 1, "kind": "speed", "speedup": 2.0, "wall_verdict": "pass", "device_speedup": 2.5,
            "device_method": "graph", "versus": "amp_bf16", "versus_speedup": 1.2, "versus_step_ms": 3.0,
            "step_ms": 4.0, "between_run_sd": 0.01}
    record = SpeedRecord.from_info(info)
    assert record.ratio(WALL) == RatioFigures(speedup=2.0, verdict=Verdict.PASS, between_run_sd=0.01,
                                              sides={MODE_SIDE: StepFigures(step_ms=4.0)})
    assert record.ratio(DEVICE) == RatioFigures(speedup=2.5, method="graph")
    assert record.ratio(VERSUS) == RatioFigures(speedup=1.2, sides={VERSUS_SIDE: StepFigures(step_ms=3.0)})
    assert record.versus == "amp_bf16"
    assert not record.detail and SpeedRecord.from_info(record.to_info()) == record
    # a distributed cell's rounds and confidence were its record's: each of its ratios reads them
    cell = records.distributed(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=8, confidence=0.99,
                               scaling_efficiency=0.9, scaling_efficiency_low=0.88, scaling_efficiency_high=0.92,
                               device_method="wall")
    assert cell.estimate(SCALING).rounds == 8 and cell.estimate(SCALING).confidence == 0.99
    assert set(cell.ratios) == {"wall", "scaling", "device"} and cell.ratio(DIST_DEVICE).speedup is None


def test_a_ratio_that_breaks_its_schema_is_named_where_it_lies():
    def problems(ratios):
        return SpeedRecord.problems({"ampbench_schema": 2,
                                     "kind": "speed", "ratios": ratios}, "benchmarks[0].extra_info")

    assert problems({"device": {"speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1}}) == []
    assert problems([]) == ["benchmarks[0].extra_info.ratios is a list; expected an object"]
    assert problems({"device": 2.0}) == ["benchmarks[0].extra_info.ratios.device is 2.0 (a number); expected an object"]
    [bad] = problems({"device": {"speedup": -2.0}})
    assert bad.startswith("benchmarks[0].extra_info.ratios.device.speedup is -2")
    [order] = problems({"wall": {"speedup": 2.0, "speedup_low": 2.1, "speedup_high": 2.2}})
    assert "ratios.wall.speedup_low 2.1, benchmarks[0].extra_info.ratios.wall.speedup 2" in order
    # an older run names the figure as it wrote it
    [bad] = SpeedRecord.problems({"ampbench_schema": 1, "kind": "speed", "device_speedup": "2.3x"}, "e")
    assert bad.startswith("e.device_speedup is '2.3x'")


def test_keys_a_kind_does_not_name_are_kept_as_they_came():
    info = {"ampbench_schema": 1, "kind": "memory", "model": "gpt", "mode": "bf16", "weights_bytes": 123,
            "allocator_ooms": 0}
    record = record_type("memory").from_info(info)
    assert record.detail == {"weights_bytes": 123, "allocator_ooms": 0} and record.value("weights_bytes") == 123
    assert {k: v for k, v in record.to_info().items() if k in info} == {**info, "ampbench_schema": SCHEMA_VERSION}


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
    assert f"reads schema {', '.join(map(str, READABLE_SCHEMAS))}" in text


def test_every_failing_outcome_is_recognisably_failing():
    assert {v for v in Verdict if v.failing} == {Verdict.REGRESSION, Verdict.NON_FINITE, Verdict.PARITY_FAILED,
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
    code = ("import sys; import ampbench.results, ampbench.report, ampbench.report.compare, ampbench.baselines.spread, "
            "ampbench.cli; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "from ampbench.results import order_modes; print(order_modes(['bf16', 'new_mode', 'fp32', 'tf32']))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    # the mode table's order, and a mode it does not know after them
    assert run.stdout.strip() == "['fp32', 'tf32', 'bf16', 'new_mode']"


def test_a_record_of_schema_2_reads_its_flat_sides_into_sides_and_writes_them_nested():
    info = {"ampbench_schema": 2, "kind": "speed",
            "ratios": {"wall": {"speedup": 2.0, "step_ms": 4.0, "step_ms_ref": 8.0}},
            "busy_ms_ref": 1.5, "ref_prepare_s": 3.0, "peak_mem_ref_bytes": 10, "throughput": 5.0,
            "device_queue": "all 12 blocks held", "device_hold_ms": 50.0}
    record = SpeedRecord.from_info(info)
    assert record.side(FP32_SIDE) == SpeedSide(busy_ms=1.5, prepare_s=3.0, peak_mem_bytes=10)
    assert record.side(MODE_SIDE) == SpeedSide(throughput=5.0) and not record.detail
    assert record.device_queue == DeviceQueue(text="all 12 blocks held", hold_ms=50.0)
    assert record.ratio(WALL).side(FP32_SIDE).step_ms == 8.0 and record.ratio(WALL).side(MODE_SIDE).step_ms == 4.0
    written = json.loads(json.dumps(record.to_info()))
    assert written["ampbench_schema"] == SCHEMA_VERSION == 4
    assert written["sides"] == {"mode": {"throughput": 5.0},
                                "fp32": {"prepare_s": 3.0, "busy_ms": 1.5, "peak_mem_bytes": 10}}
    assert written["device_queue"] == {"text": "all 12 blocks held", "hold_ms": 50.0}
    assert written["ratios"]["wall"]["sides"] == {"mode": {"step_ms": 4.0}, "fp32": {"step_ms": 8.0}}
    assert SpeedRecord.from_info(written) == record


def test_a_malformed_side_names_where_it_lies():
    info = {"ampbench_schema": 3, "kind": "speed", "sides": {"fp32": [1.0]}}
    assert SpeedRecord.problems(info, "benchmarks[0].extra_info") == [
        "benchmarks[0].extra_info.sides.fp32 is a list; expected an object"]
