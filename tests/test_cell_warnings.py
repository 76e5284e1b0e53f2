"""Cells under ``pytest -W error`` (or ``filterwarnings = error``): a cell that times nothing does not take
pytest-benchmark's fixture, so none warns that it went unused; and a cell whose teardown fails is an
error in the run JSON and its report, never a pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from ampbench.cli import main
from ampbench.results import load_run
from ampbench.verdict import Verdict

ROOT = Path(__file__).resolve().parents[1]

CELLS = '''
import pytest
from ampbench.results import ConvergenceRecord, PipelineRecord, Verdict

CELLS = pytest.mark.parametrize("model_name, mode_name", [("mlp", "bf16"), ("mlp", "fp16")])


@CELLS
@pytest.mark.benchmark(group="convergence")
def test_convergence(record_result, model_name, mode_name):
    record_result(ConvergenceRecord(model=model_name, mode=mode_name, device="cpu", accuracy=0.9,
                                    accuracy_ref=0.91, verdict=Verdict.PASS))


@pytest.fixture
def leaky():
    yield
    raise RuntimeError("the loader's workers did not stop")


@CELLS
@pytest.mark.benchmark(group="convergence")
def test_leaky_convergence(record_result, leaky, model_name, mode_name):
    record_result(ConvergenceRecord(model=model_name, mode=mode_name, device="cpu", accuracy=0.9,
                                    accuracy_ref=0.91, verdict=Verdict.PASS))
'''


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(CELLS))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           "--perf-device", "cpu", "--perf-history", "off", "--benchmark-json",
                           str(tmp_path / "out.json"), *args, str(tmp_path / "test_cells.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)


def test_untimed_cells_pass_under_w_error(tmp_path):
    run = _run(tmp_path, "-W", "error", "-k", "not leaky")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "not used" not in run.stdout + run.stderr
    cells = load_run(tmp_path / "out.json").cells
    assert sorted(c.test_id for c in cells) == ["test_convergence[mlp-bf16]", "test_convergence[mlp-fp16]"]
    assert all(c.verdict == Verdict.PASS for c in cells)


def test_a_cell_whose_teardown_fails_is_an_error_in_its_json_and_report(tmp_path, capsys):
    run = _run(tmp_path, "-k", "leaky")
    assert run.returncode == 1 and "2 errors" in run.stdout, run.stdout + run.stderr
    cells = load_run(tmp_path / "out.json").cells
    assert [c.verdict for c in cells] == [Verdict.ERROR, Verdict.ERROR]
    assert all("error in teardown: RuntimeError: the loader's workers did not stop" in c.message for c in cells)
    assert main(["report", str(tmp_path / "out.json"), "-o", str(tmp_path / "report"), "--fail-on-regression"]) == 1
    assert "ERROR: test_leaky_convergence[mlp-bf16]: error in teardown" in capsys.readouterr().out
    assert "error" in json.loads((tmp_path / "out.json").read_text())["ampbench_untimed"][0]["extra_info"]["verdict"]
