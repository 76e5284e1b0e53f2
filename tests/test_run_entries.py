"""The run JSON as the tools that read pytest-benchmark's format see it (``ampbench.plugin.entries``):
every cell's entry has its group, the step times a cell hands over are the entry's stats exactly, cells
that time nothing sit beside the benchmarks without stats (and a run of them only is still written),
and pytest-benchmark's own ``compare`` loads two runs, grouped by a parameter, into a CSV."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ampbench.results import load_run
from ampbench.results.schema import UNTIMED_KEY

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"

CELLS = '''
import pytest
from ampbench.results import ConvergenceRecord, MemoryRecord, RatioFigures, SpeedRecord, UnderflowRecord, Verdict
from ampbench.suite.outcome import STEP_TIMES, record_step_times

TIMES = {"bf16": [0.010, 0.011, 0.0125], "fp16": [0.020, 0.021, 0.019, 0.022]}
CELLS = pytest.mark.parametrize("model_name, mode_name", [("mlp", "bf16"), ("mlp", "fp16")])


@CELLS
@pytest.mark.benchmark(group="speed", **STEP_TIMES)
def test_speed(benchmark, record_result, model_name, mode_name):
    wall = RatioFigures(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=3, confidence=0.99)
    record_result(SpeedRecord(model=model_name, mode=mode_name, device="cpu", ratios={"wall": wall},
                              verdict=Verdict.PASS))
    record_step_times(benchmark, TIMES[mode_name])


@CELLS
@pytest.mark.benchmark(group="convergence")
def test_convergence(record_result, model_name, mode_name):
    record_result(ConvergenceRecord(model=model_name, mode=mode_name, device="cpu", accuracy=0.9,
                                    accuracy_ref=0.91, verdict=Verdict.PASS))


@CELLS
@pytest.mark.benchmark(group="memory")
def test_memory(benchmark, record_result, model_name, mode_name):
    record_result(MemoryRecord(model=model_name, mode=mode_name, device="cpu", memory_ratio=0.6,
                               max_batch_searched=False))


@pytest.mark.benchmark(group="underflow")
def test_underflow(record_result):
    record_result(UnderflowRecord(model="mlp_64_64_10", device="cpu", accuracy_ref=0.9, verdict=Verdict.PASS))


@pytest.mark.benchmark(group="memory")
def test_skipped_on_this_device(benchmark, record_result):
    pytest.skip("needs a device this run lacks")


@pytest.mark.benchmark(group="speed")
def test_unmarked_clock(benchmark, record_result):
    """A test whose timer is not the step clock: handing it step times fails rather than records a no-op."""
    with pytest.raises(RuntimeError, match="step_clock"):
        record_step_times(benchmark, [0.5])
'''


def _run(tmp_path: Path, out: str, *args: str) -> dict:
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(CELLS))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "--perf-device", "cpu", "--perf-history", "off", "--benchmark-json", str(tmp_path / out),
                          *args, str(tmp_path / "test_cells.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no benchmarks have been run" not in run.stdout + run.stderr
    return json.loads((tmp_path / out).read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """A run of the cells, and its copy as a second run, as a dashboard or a comparison gets them."""
    tmp = tmp_path_factory.mktemp("runs")
    _run(tmp, "a.json", "-k", "not unmarked")
    (tmp / "b.json").write_bytes((tmp / "a.json").read_bytes())
    return tmp / "a.json", tmp / "b.json"


def test_timed_cells_are_benchmarks_with_their_step_times_and_a_group(runs):
    doc = json.loads(runs[0].read_text())
    timed = {b["name"]: b for b in doc["benchmarks"]}
    assert sorted(timed) == ["test_speed[mlp-bf16]", "test_speed[mlp-fp16]"]
    for mode, times in (("bf16", [0.010, 0.011, 0.0125]), ("fp16", [0.020, 0.021, 0.019, 0.022])):
        bench = timed[f"test_speed[mlp-{mode}]"]
        assert bench["group"] == "speed: mlp"
        assert bench["stats"]["data"] == pytest.approx(times, abs=1e-12) and bench["stats"]["rounds"] == len(times)
        assert bench["options"]["timer"] == "step_clock"


def test_untimed_cells_sit_beside_the_benchmarks_without_stats(runs):
    doc = json.loads(runs[0].read_text())
    untimed = {e["name"]: e for e in doc[UNTIMED_KEY]}
    assert sorted(untimed) == ["test_convergence[mlp-bf16]", "test_convergence[mlp-fp16]", "test_memory[mlp-bf16]",
                               "test_memory[mlp-fp16]", "test_underflow"]
    assert all("stats" not in e for e in untimed.values())
    assert untimed["test_memory[mlp-fp16]"]["group"] == "memory: mlp"
    assert untimed["test_convergence[mlp-bf16]"]["group"] == "convergence: mlp"
    assert untimed["test_underflow"]["group"] == "underflow"
    run = load_run(runs[0])
    assert sorted(c.test_id for c in run.cells) == sorted([*untimed, "test_speed[mlp-bf16]", "test_speed[mlp-fp16]"])


def test_a_run_of_untimed_cells_only_is_written(tmp_path):
    doc = _run(tmp_path, "out.json", "-k", "convergence")
    assert doc["benchmarks"] == [] and len(doc[UNTIMED_KEY]) == 2
    assert doc["machine_info"]["ampbench"]["device"]  # written through pytest-benchmark's own hooks
    assert len(load_run(tmp_path / "out.json").cells) == 2


def test_a_run_whose_every_cell_skipped_is_written_and_reported(tmp_path, capsys):
    from ampbench.cli import main

    doc = _run(tmp_path, "out.json", "-k", "skipped_on_this_device")
    assert doc["benchmarks"] == [] and UNTIMED_KEY not in doc and doc["machine_info"]["ampbench"]["device"]
    assert load_run(tmp_path / "out.json").cells == []
    assert main(["report", str(tmp_path / "out.json"), "-o", str(tmp_path / "report")]) == 0
    assert "holds no cell: every test of its run was skipped or deselected" in capsys.readouterr().out
    assert (tmp_path / "report" / "index.html").exists()


def test_handing_step_times_without_the_step_clock_fails(tmp_path):
    _run(tmp_path, "out.json", "-k", "unmarked")  # the test asserts the RuntimeError itself


def test_the_dashboards_pytest_readers_take_the_run(runs):
    jsonschema = pytest.importorskip("jsonschema", reason="the consumers' schemas are checked with jsonschema "
                                     "(pip install -e '.[test]')")
    doc = json.loads(runs[0].read_text())
    for name in ("github_pytest", "bencher_pytest"):
        schema = json.loads((DATA / "consumers" / f"{name}.schema.json").read_text())
        assert list(jsonschema.Draft7Validator(schema).iter_errors(doc)) == [], name


def test_pytest_benchmark_compare_groups_two_runs_by_mode_into_a_csv(runs, tmp_path):
    out = tmp_path / "compare.csv"
    compare = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", *map(str, runs),
                              "--group-by", "param:mode_name", "--csv", str(out)],
                             capture_output=True, text=True, timeout=60)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    assert "Failed to load" not in compare.stdout + compare.stderr
    rows = list(csv.DictReader(out.open()))
    # both runs' two speed cells; pytest-benchmark's CSV has no column saying which file a row is from
    assert sorted(r["param:mode_name"] for r in rows) == ["bf16", "bf16", "fp16", "fp16"]
