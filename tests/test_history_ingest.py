"""What the history takes from a run: each kind's figures with their intervals and own verdicts, the
injected marker, the run's id (the plugin's, or a hash of the file), and `ampbench history import|runs|
accept` on both stores, malformed files reported one line each with nothing of them written."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.history.ingest import bytes_id, cell_row, content_id, figures_of, file_run, import_runs, run_content_id
from ampbench.history.store import open_history
from ampbench.results import (
    ConvergenceRecord,
    MemoryRecord,
    PipelineRecord,
    UnderflowRecord,
    Verdict,
)
from history_runs import H100
from tests import records

pytest_plugins = ("history_stores",)

DATA = Path(__file__).parent / "data"


def _figures(record) -> dict:
    return {f.name: (f.value, f.low, f.high, f.verdict) for f in figures_of(record)}


def test_a_speed_cell_gives_each_speedup_with_its_interval_and_own_verdict():
    record = records.speed(verdict=Verdict.REGRESSION, device_speedup=2.0, device_speedup_low=1.9,
                         device_speedup_high=2.1, device_verdict=Verdict.REGRESSION, speedup=1.5, speedup_low=1.4,
                         speedup_high=1.6, wall_verdict=Verdict.PASS, versus_speedup=1.2, versus_speedup_low=1.1,
                         versus_speedup_high=1.3)
    assert _figures(record) == {"device_speedup": (2.0, 1.9, 2.1, "regression"), "speedup": (1.5, 1.4, 1.6, "pass"),
                                "versus_speedup": (1.2, 1.1, 1.3, "regression")}
    assert list(_figures(records.speed(speedup=1.5, verdict=Verdict.PASS))) == ["speedup"]


def test_the_other_kinds_give_their_ratios():
    assert _figures(MemoryRecord(memory_ratio=0.6, max_batch_ratio=1.8, verdict=Verdict.PASS)) == {
        "memory_ratio": (0.6, None, None, "pass"), "max_batch_ratio": (1.8, None, None, "pass")}
    assert list(_figures(MemoryRecord(memory_ratio=0.6, max_batch_searched=False))) == ["memory_ratio"]
    delta = _figures(ConvergenceRecord(accuracy=0.95, accuracy_ref=0.97, verdict=Verdict.PASS))["accuracy_delta"]
    assert delta[0] == pytest.approx(-0.02)
    assert _figures(records.distributed(speedup=1.7, speedup_low=1.6, speedup_high=1.8, scaling_efficiency=0.9,
                                      scaling_efficiency_low=0.85, scaling_efficiency_high=0.95)) == {
        "speedup": (1.7, 1.6, 1.8, None), "scaling_efficiency": (0.9, 0.85, 0.95, None)}
    # where device time was measured it is the distributed cell's first figure, with its own verdict
    assert _figures(records.distributed(device_speedup=1.9, device_speedup_low=1.85, device_speedup_high=1.95,
                                      device_verdict=Verdict.REGRESSION, speedup=1.7, speedup_low=1.6, speedup_high=1.8,
                                      wall_verdict=Verdict.PASS, verdict=Verdict.REGRESSION)) == {
        "device_speedup": (1.9, 1.85, 1.95, "regression"), "speedup": (1.7, 1.6, 1.8, "pass")}
    assert _figures(PipelineRecord(loader_ratio=0.8)) == {"loader_ratio": (0.8, None, None, None)}
    assert _figures(UnderflowRecord(accuracy_ref=0.9)) == {}


def test_a_slowed_cell_is_marked_whichever_kind_wrote_it():
    assert cell_row(records.speed(test_id="t", injected_slowdown=0.01)).injected
    assert cell_row(records.distributed(test_id="t", injected_slowdown=0.03)).injected
    assert not cell_row(records.speed(test_id="t")).injected


def test_a_run_is_known_by_the_plugins_id_or_by_its_content(tmp_path):
    copy = tmp_path / "copy.json"
    shutil.copy(DATA / "h100_run.json", copy)
    assert file_run(copy).id == file_run(DATA / "h100_run.json").id == run_content_id(file_run(copy))
    document = json.loads(copy.read_text())
    document["machine_info"]["ampbench"].update(run_id="3f1c", label="app@1", suite_revision="v2")
    copy.write_text(json.dumps(document))
    row = file_run(copy)
    assert (row.id, row.label, row.suite_revision, row.source, row.gpu) == ("3f1c", "app@1", "v2", "copy.json", H100)


def _rewritten(document):
    """The document as another tool writes it again: keys reversed, whole floats as integers."""
    if isinstance(document, dict):
        return {k: _rewritten(v) for k, v in reversed(document.items())}
    if isinstance(document, list):
        return [_rewritten(v) for v in document]
    return int(document) if isinstance(document, float) and document.is_integer() else document


def test_a_run_written_again_by_another_tool_is_imported_once(store_url, tmp_path):
    history = open_history(store_url)
    (first,) = import_runs(history, [DATA / "h100_run.json"])
    again = tmp_path / "rewritten.json"
    again.write_text(json.dumps(_rewritten(json.loads((DATA / "h100_run.json").read_text())), indent=2))
    assert again.read_bytes() != (DATA / "h100_run.json").read_bytes()
    (second,) = import_runs(history, [again])
    assert first.appended and (second.appended, second.error, second.run_id) == (False, None, first.run_id)
    assert history.counts() == (1, 42)


def test_a_file_an_older_version_imported_by_its_bytes_is_not_imported_again(store_url):
    history = open_history(store_url)
    history.append(dataclasses.replace(file_run(DATA / "h100_run.json"), id=bytes_id(DATA / "h100_run.json")))
    (again,) = import_runs(history, [DATA / "h100_run.json"])
    assert (again.appended, again.error) == (False, None) and history.counts() == (1, 42)


def test_a_file_an_older_version_imported_by_its_document_is_not_imported_again(store_url):
    history = open_history(store_url)
    document = json.loads((DATA / "h100_run.json").read_text())
    history.append(dataclasses.replace(file_run(DATA / "h100_run.json"), id=content_id(document)))
    (again,) = import_runs(history, [DATA / "h100_run.json"])
    assert (again.appended, again.error) == (False, None) and history.counts() == (1, 42)


def test_a_run_and_its_pytest_benchmark_export_import_as_one_run(store_url, tmp_path, capsys):
    from ampbench.cli import main

    for name in ("h100_run.json", "cpu_smoke.json"):
        assert "run_id" not in json.loads((DATA / name).read_text())["machine_info"]["ampbench"]
        exported = tmp_path / f"exported-{name}"
        assert main(["export", str(DATA / name), "--format", "pytest-benchmark", "-o", str(exported)]) == 0
        assert exported.read_bytes() != (DATA / name).read_bytes()
    history = open_history(store_url)
    first = import_runs(history, [DATA / "h100_run.json", DATA / "cpu_smoke.json"])
    second = import_runs(history, [tmp_path / "exported-h100_run.json", tmp_path / "exported-cpu_smoke.json"])
    assert all(o.appended for o in first) and not any(o.appended or o.error for o in second)
    assert [o.run_id for o in second] == [o.run_id for o in first] and history.counts() == (2, 42 + 12)


def test_import_takes_the_good_files_and_names_each_bad_one(store_url, tmp_path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text((DATA / "h100_run.json").read_text()[:5000])
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"benchmarks": [{"name": "test_x", "extra_info": {}}]}))
    history = open_history(store_url)
    outcomes = import_runs(history, [truncated, DATA / "h100_run.json", foreign, DATA / "cpu_smoke.json"])
    assert [(o.path.name, o.appended) for o in outcomes] == [
        ("truncated.json", False), ("h100_run.json", True), ("foreign.json", False), ("cpu_smoke.json", True)]
    assert outcomes[0].error.startswith(f"{truncated}: is truncated")
    assert outcomes[2].error.startswith(f"{foreign}: is not ampbench output")
    assert history.counts() == (2, 42 + 12), "nothing of a bad file is written"
    again = import_runs(history, [DATA / "h100_run.json"])
    assert [(o.appended, o.error) for o in again] == [(False, None)] and history.counts() == (2, 54)


def test_the_history_command(store_url, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    store = ["--history", store_url]
    assert main(["history", "import", str(DATA / "h100_speed_device.json"), str(bad), *store]) == 2
    out, err = capsys.readouterr()
    assert f"ampbench: error: {bad}: is truncated" in err and len(err.splitlines()) == 1
    assert "ampbench: 1 runs imported into" in out and "1 unusable" in out
    assert main(["history", "import", str(DATA / "h100_speed_device.json"), *store]) == 0
    assert "(35 cells) already in the history" in capsys.readouterr().out
    run_id = file_run(DATA / "h100_speed_device.json").id
    assert main(["history", "runs", "--gpu", H100, *store]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].split() == ["run", "time", "(UTC)", "gpu", "cells", "failing", "suspect", "label", "revision",
                                  "source"]
    assert listing[1].startswith(f"{run_id}  2026-11-23 09:03  {H100}  35     1        0        -      240dbb6acf28")
    cell = "test_speed[gpt-amp_bf16]"
    assert main(["history", "accept", run_id, "--cell", cell + "x", "--reason", "r", *store]) == 2
    assert f"run {run_id} has no cell '{cell}x' (did you mean {cell}?)" in capsys.readouterr().err
    assert main(["history", "accept", run_id, "--cell", cell, "--reason", "cuDNN upgrade", *store]) == 0
    assert "the level restarts there (cuDNN upgrade)" in capsys.readouterr().out
    (point,) = open_history(store_url).series(H100, cell, "device_speedup").points
    assert point.restart


def test_reading_commands_do_not_make_a_store(tmp_path, capsys):
    missing = tmp_path / "none.sqlite"
    assert main(["history", "runs", "--history", str(missing)]) == 2
    assert capsys.readouterr().err == (f"ampbench: error: history {missing}: no such file; a `pytest perf/` run or "
                                       "`ampbench history import` makes one, or give --history\n")
    assert not missing.exists()
    with pytest.raises(SystemExit) as info:
        main(["history", "runs", "--history", "postgresq://u:pw@host/db"])
    assert info.value.code == 2 and "--history: history store postgresq://u:***@host/db" in capsys.readouterr().err
