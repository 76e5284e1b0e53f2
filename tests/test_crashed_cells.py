"""A cell whose test stopped with an error (in its setup, or failing outside its verdict) is a failing
cell wherever the run is read: the terminal summary, the run JSON (its entry, or ``ampbench_errors``
where pytest-benchmark timed nothing), ``ampbench report`` and ``ampbench history runs``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ampbench.cli import main

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]

CELLS = '''
import pytest
from ampbench.results import RatioFigures, SpeedRecord, Verdict


@pytest.fixture
def broken_parity_mode():
    raise RuntimeError("expected scalar type BFloat16 but found Float")


def _speed(model_name, mode_name, perf_device):
    return SpeedRecord(model=model_name, mode=mode_name, device=str(perf_device), verdict=Verdict.PASS,
                       ratios={"device": RatioFigures(speedup=1.5, speedup_low=1.4, speedup_high=1.6)})


def test_memory(model_name, mode_name):
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_convergence(model_name, mode_name, broken_parity_mode):
    pass


def test_speed(model_name, mode_name, benchmark, record_result, perf_device):
    benchmark.pedantic(lambda: None, rounds=2)
    record_result(_speed(model_name, mode_name, perf_device))
    raise AssertionError("no optimizer step changed the weights")


def test_speed_holds(model_name, mode_name, benchmark, record_result, perf_device):
    benchmark.pedantic(lambda: None, rounds=2)
    record_result(_speed(model_name, mode_name, perf_device))
'''
ERRORS = {"test_memory[mlp-bf16]": "the test failed: RuntimeError: CUDA error: an illegal memory "
                                   "access was encountered",
          "test_convergence[mlp-bf16]": "error in setup: RuntimeError: expected scalar type BFloat16 but found Float",
          "test_speed[mlp-bf16]": "the test failed: AssertionError: no optimizer step changed the "
                                  "weights"}


@pytest.fixture(scope="module")
def crashed_run(tmp_path_factory):
    """A CPU run of four cells, three of whose tests stop with an error: (its folder, pytest's output)."""
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("crashed")
    (folder / "pyproject.toml").write_text('[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n')
    (folder / "test_cells.py").write_text(CELLS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--perf-device", "cpu",
                          "--perf-models", "mlp", "--perf-precisions", "bf16", "--benchmark-json", "out.json",
                          "--perf-history", "h.sqlite"], cwd=folder, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    return folder, run.stdout


def test_the_summary_lists_each_cell_whose_test_stopped(crashed_run):
    _, stdout = crashed_run
    assert "ampbench: cells that need a look (3)" in stdout, stdout
    for test_id, message in ERRORS.items():
        assert f"{test_id} (error" in stdout and message in stdout, (test_id, stdout)


def test_the_json_keeps_them_where_dashboards_do_not_read(crashed_run):
    folder, _ = crashed_run
    document = json.loads((folder / "out.json").read_text())
    timed = {b["name"]: b["extra_info"] for b in document["benchmarks"]}
    assert set(timed) == {"test_speed[mlp-bf16]", "test_speed_holds[mlp-bf16]"} and "stats" in document["benchmarks"][0]
    assert (timed["test_speed[mlp-bf16]"]["verdict"],
            timed["test_speed_holds[mlp-bf16]"]["verdict"]) == ("error", "pass")
    errors = {e["name"]: e["extra_info"] for e in document["ampbench_errors"]}
    assert {name: (info["kind"], info["verdict"], info["message"]) for name, info in errors.items()} == {
        "test_memory[mlp-bf16]": ("memory", "error", ERRORS["test_memory[mlp-bf16]"]),
        "test_convergence[mlp-bf16]": ("convergence", "error", ERRORS["test_convergence[mlp-bf16]"])}


def test_the_report_counts_them_failing(crashed_run, capsys):
    folder, _ = crashed_run
    assert main(["report", str(folder / "out.json"), "-o", str(folder / "report"), "--fail-on-regression"]) == 1
    out = capsys.readouterr().out
    for test_id, message in ERRORS.items():
        assert f"ERROR: {test_id}: {message}" in out, out
    summary = (folder / "report" / "summary.md").read_text()
    assert "- **speed** (2 cells): 1 ❌ error, 1 ✅ pass" in summary and "- **memory** (1 cell): 1 ❌ error" in summary


def test_history_runs_counts_them_failing(crashed_run, capsys):
    folder, _ = crashed_run
    assert main(["history", "runs", "--history", str(folder / "h.sqlite")]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    cells, failing = row[header.index("cells"):].split()[:2]  # the columns start where their headers do
    assert (cells, failing) == ("4", "3"), row
