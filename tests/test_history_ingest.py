"""What the history takes from a run: each kind's figures with their intervals and own verdicts, the
injected marker, the run's id (the plugin's, or a hash of the file), and `ampbench history import|runs|
accept` on both stores, malformed files reported one line each with nothing of them written. A learned
ratio no measurement gives (1e308, zero, a hundredfold off its cell's level) never reaches a series: an
imported run holding one is refused whole, a pytest session's is left out with a warning."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from datetime import timedelta
from pathlib import Path

# psycopg before any in-process run: pytester drops the modules a run was first to import, and SQLAlchemy's
# PostgreSQL dialect would then hold a psycopg whose exceptions are not the ones later raised
import psycopg  # noqa: F401
import pytest

from ampbench.cli import main
from ampbench.history.ingest import (
    bytes_id,
    cell_row,
    content_id,
    figures_of,
    file_run,
    import_runs,
    run_content_id,
)
from ampbench.history.plausible import checked_run
from ampbench.history.store import open_history
from ampbench.results import (
    ConvergenceRecord,
    MemoryRecord,
    PipelineRecord,
    RatioFigures,
    SpeedRecord,
    UnderflowRecord,
    Verdict,
)
from history_runs import H100, START, speed_record, speed_run
from tests import records

pytest_plugins = ("pytester", "history_stores")

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
    assert "ampbench: 1 run imported into" in out and "1 unusable" in out
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
    assert capsys.readouterr().err == (f"ampbench: error: history {missing}: no such file; a `pytest perf/` run on a "
                                       "GPU (on the CPU, one given --perf-history) or `ampbench history import "
                                       "RUN.json` makes one, or give --history\n")
    assert not missing.exists()
    with pytest.raises(SystemExit) as info:
        main(["history", "runs", "--history", "postgresq://u:pw@host/db"])
    assert info.value.code == 2 and "--history: history store postgresq://u:***@host/db" in capsys.readouterr().err


# -- implausible ratios ---------------------------------------------------------------------------------

def _cell(model: str, device: float, wall: float = 2.0):
    """A speed cell's record with its device-time and wall-clock speedups, each with a 1% interval."""
    return records.speed(test_id=f"test_speed[{model}-amp_bf16]", model=model, mode="amp_bf16", device="cuda:0",
                         verdict=Verdict.PASS, device_verdict=Verdict.PASS, device_speedup=device,
                         device_speedup_low=device * 0.99, device_speedup_high=device * 1.01, speedup=wall,
                         speedup_low=wall * 0.99, speedup_high=wall * 1.01)


def _bare(model: str, device: float, wall: float) -> SpeedRecord:
    """A speed cell's record as a cell holds it in memory, its speedups without intervals."""
    return SpeedRecord(test_id=f"test_speed[{model}-amp_bf16]", model=model, mode="amp_bf16", device="cuda:0",
                       ratios={"device": RatioFigures(speedup=device), "wall": RatioFigures(speedup=wall)})


def _run_file(path: Path, run_id: str, cells, at: int = 0) -> Path:
    """A run JSON of `cells` on an H100, as the plugin saves one."""
    machine = {"device": H100, "gpu_slug": "nvidia-h100-80gb-hbm3", "torch": "2.11.0", "run_id": run_id}
    path.write_text(json.dumps({"machine_info": {"ampbench": machine},
                                "datetime": (START + timedelta(hours=at)).isoformat(), "commit_info": {},
                                "benchmarks": [{"name": c.test_id, "extra_info": c.to_info()} for c in cells]}))
    return path


def _values(history, test_id: str, figure: str = "device_speedup") -> list[float]:
    return [p.value for p in history.series(H100, test_id, figure).points]


@pytest.mark.parametrize("value", [1e308, 5000.0, 1e-4])
def test_an_imported_run_with_a_ratio_out_of_bounds_is_refused_whole(store_url, tmp_path, capsys, value):
    good = _run_file(tmp_path / "good.json", "good", [_cell("a", 2.0), _cell("b", 3.0)])
    bad = _run_file(tmp_path / "bad.json", "bad", [_cell("a", 2.1), _cell("b", value)], at=1)
    assert main(["history", "import", str(good), str(bad), "--history", store_url]) == 2
    out, err = capsys.readouterr()
    shown = f"{value:.6g}"
    assert err.splitlines() == [
        f"ampbench: error: {bad}: run bad: cell test_speed[b-amp_bf16]: device_speedup {shown} is no plausible ratio; "
        "expected a finite number within [0.001, 1000]; the run is refused, nothing of it imported"]
    assert "1 run imported" in out and "1 unusable" in out
    history = open_history(store_url)
    assert [r.id for r in history.runs()] == ["good"], "nothing of the refused run is written"
    assert _values(history, "test_speed[a-amp_bf16]") == [2.0] and _values(history, "test_speed[b-amp_bf16]") == [3.0]


def test_a_run_with_several_implausible_ratios_names_the_first_and_counts_the_rest(tmp_path, capsys):
    bad = _run_file(tmp_path / "bad.json", "bad", [_cell("a", 1e308, wall=1e300), _cell("b", 2.0)])
    store = tmp_path / "h.sqlite"
    assert main(["history", "import", str(bad), "--history", str(store)]) == 2
    err = capsys.readouterr().err
    assert "cell test_speed[a-amp_bf16]: device_speedup 1e+308 is no plausible ratio" in err
    assert "(and 1 more such figure); the run is refused" in err
    assert open_history(str(store)).runs() == []


def test_an_imported_ratio_a_hundredfold_off_its_cells_level_refuses_the_run(store_url, tmp_path, capsys):
    history = open_history(store_url)
    for i, value in enumerate([2.0, 2.1, 1.9]):
        history.append(speed_run(f"r{i}", [speed_record("a", "amp_bf16", value)], at=i))
    high = _run_file(tmp_path / "high.json", "high", [_cell("a", 300.0)], at=5)
    low = _run_file(tmp_path / "low.json", "low", [_cell("a", 0.015)], at=6)
    moved = _run_file(tmp_path / "moved.json", "moved", [_cell("a", 5.0)], at=7)  # a real change goes in
    assert main(["history", "import", str(high), str(low), str(moved), "--history", store_url]) == 2
    err = capsys.readouterr().err.splitlines()
    bound = ("is no plausible ratio; expected within 100x of its level 2 on NVIDIA H100 80GB HBM3 (the median of its 3 "
             "earlier runs): [0.02, 200]; the run is refused, nothing of it imported")
    assert err == [f"ampbench: error: {high}: run high: cell test_speed[a-amp_bf16]: device_speedup 300 {bound}",
                   f"ampbench: error: {low}: run low: cell test_speed[a-amp_bf16]: device_speedup 0.015 {bound}"]
    assert _values(history, "test_speed[a-amp_bf16]") == [2.0, 2.1, 1.9, 5.0]
    (again,) = import_runs(history, [high])
    assert not again.appended and "is no plausible ratio" in again.error, "refused again, never 'already there'"


def test_a_run_imported_before_it_in_the_same_import_sets_the_level(tmp_path, capsys):
    first = _run_file(tmp_path / "first.json", "first", [_cell("a", 2.0)])
    second = _run_file(tmp_path / "second.json", "second", [_cell("a", 2.1)], at=1)
    off = _run_file(tmp_path / "off.json", "off", [_cell("a", 0.01)], at=2)
    store = tmp_path / "h.sqlite"
    assert main(["history", "import", str(first), str(second), str(off), "--history", str(store)]) == 2
    assert "expected within 100x of its level 2.05 on NVIDIA H100 80GB HBM3 (the median of its 2 earlier runs)" in (
        capsys.readouterr().err)
    assert _values(open_history(str(store)), "test_speed[a-amp_bf16]") == [2.0, 2.1]


def test_a_sessions_implausible_figures_are_left_out_and_the_rest_of_its_run_appended(store_url):
    history = open_history(store_url)
    for i in range(3):
        history.append(speed_run(f"r{i}", [speed_record(m, "amp_bf16", 2.0) for m in "abcde"], at=i))
    # a record in memory is not read back through the file's checks: zero, NaN and negative figures reach the end
    cells = [_cell("a", 1e308), _bare("b", 0.0, 2.0), _bare("c", math.nan, -1.0), _cell("d", 2.05, wall=900.0),
             _cell("e", 2.02)]
    row = speed_run("live", cells, at=5)
    kept, left_out = checked_run(history, row, cells)
    assert [(i.test_id, i.figure) for i in left_out] == [
        ("test_speed[a-amp_bf16]", "device_speedup"), ("test_speed[b-amp_bf16]", "device_speedup"),
        ("test_speed[c-amp_bf16]", "device_speedup"), ("test_speed[c-amp_bf16]", "speedup"),
        ("test_speed[d-amp_bf16]", "speedup")]
    assert "expected within 100x of its level 2" in str(left_out[-1])
    assert history.append(kept)
    assert {m: _values(history, f"test_speed[{m}-amp_bf16]")[3:] for m in "abcde"} == {
        "a": [], "b": [], "c": [], "d": [2.05], "e": [2.02]}
    assert {m: _values(history, f"test_speed[{m}-amp_bf16]", "speedup")[3:] for m in "ade"} == {
        "a": [2.0], "d": [], "e": [2.0]}
    assert history.run("live").cells == 5, "every cell of the session is in the history, its record whole"


CELL = """
import pytest
from ampbench.plugin import summary
from ampbench.results import RatioFigures, SpeedRecord, Verdict

@pytest.mark.parametrize("speedup", [1e308, 1.5])
def test_speed(request, benchmark, speedup):
    record = SpeedRecord(model="mlp", mode="amp_bf16", device="cpu", verdict=Verdict.PASS,
                         ratios={"device": RatioFigures(speedup=speedup), "wall": RatioFigures(speedup=1.4)})
    benchmark.extra_info.update(record.to_info())
    summary.keep_record(request.config, request.node.nodeid, record)
    benchmark.pedantic(lambda: None, rounds=1)
"""


def test_a_pytest_session_leaves_an_implausible_figure_out_of_the_history_with_a_warning(pytester, tmp_path,
                                                                                          monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    pytester.makepyfile(CELL)
    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")
    store = tmp_path / "h.sqlite"
    saved = tmp_path / "run.json"
    result = pytester.runpytest_inprocess("-p", "ampbench.plugin.history", "-p", "no:cacheprovider",
                                          "--perf-history", str(store), f"--benchmark-json={saved}")
    result.assert_outcomes(passed=2)
    assert result.ret == 0, "the session itself is not failed by a figure the history leaves out"
    (warning,) = [line for line in result.stdout.lines if line.startswith("ampbench: warning: run ")]
    assert warning.split(": ", 3)[3] == ("cell test_speed[1e+308]: device_speedup 1e+308 is no plausible ratio; "
                                         "expected a finite number within [0.001, 1000]; left out of the history")
    assert any(line.startswith("ampbench: run ") and "(2 cells) appended to the history" in line
               for line in result.stdout.lines)
    history = open_history(str(store))
    assert [p.value for p in history.series("cpu", "test_speed[1e+308]", "device_speedup").points] == []
    assert [p.value for p in history.series("cpu", "test_speed[1e+308]", "speedup").points] == [1.4]
    assert [p.value for p in history.series("cpu", "test_speed[1.5]", "device_speedup").points] == [1.5]
    # its JSON, which holds the figure, is the run the history holds: imported later, it is already there
    capsys.readouterr()
    assert main(["history", "import", str(saved), "--history", str(store)]) == 0
    assert "(2 cells) already in the history" in capsys.readouterr().out
