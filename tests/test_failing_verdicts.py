"""Every kind of cell going from pass to every failing verdict fails `ampbench compare` and
`ampbench report --fail-on-regression`, with the figures unchanged: the verdict alone must do it
(a convergence run gone non-finite was once called "inconclusive" and passed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_OK, EXIT_REGRESSION
from ampbench.report.compare import compare_runs
from ampbench.results import (
    ConvergenceRecord,
    MemoryRecord,
    PipelineRecord,
    Record,
    Verdict,
    load_run,
)
from tests import records

INTERVAL = dict(rounds=12, confidence=0.99)
PASSING: dict[str, Record] = {
    "speed": records.speed(model="mlp", mode="bf16", speedup=2.0, speedup_low=1.98, speedup_high=2.02,
                         device_speedup=2.2, device_speedup_low=2.19, device_speedup_high=2.21, device_rounds=12,
                         device_method="graph", **INTERVAL),
    "memory": MemoryRecord(model="mlp", mode="bf16", memory_ratio=0.6, max_batch_ratio=1.7),
    "convergence": ConvergenceRecord(model="mnist_cnn", mode="bf16", accuracy=0.97, accuracy_ref=0.975),
    "input_pipeline": PipelineRecord(model="wide_resnet28_10", mode="bf16", input_bound=False),
    "distributed": records.distributed(model="resnet50", mode="bf16", comm="bf16_hook", world_size=2, speedup=2.5,
                                     speedup_low=2.48, speedup_high=2.52, **INTERVAL),
}
FAILING = [v for v in Verdict if v.failing]
NAMES = {"speed": "test_speed[mlp-bf16]", "memory": "test_memory[mlp-bf16]",
         "convergence": "test_convergence[mnist_cnn-bf16]",
         "input_pipeline": "test_input_pipeline[wide_resnet28_10-bf16]",
         "distributed": "test_ddp_speed[resnet50-bf16-bf16_hook]"}


def _write(path: Path, cells: dict[str, Record]) -> Path:
    benchmarks = [{"name": NAMES[kind], "extra_info": cell.to_info()} for kind, cell in cells.items()]
    path.write_text(json.dumps({"machine_info": {"ampbench": {"device": "NVIDIA H100 80GB HBM3"}},
                                "benchmarks": benchmarks}))
    return path


def _runs(tmp_path: Path, kind: str, verdict: Verdict) -> tuple[Path, Path]:
    old = {k: dataclasses.replace(c, device="cuda:0",
                                  verdict=Verdict.PASS, message=f"{k} holds") for k, c in PASSING.items()}
    new = dict(old, **{kind: dataclasses.replace(old[kind], verdict=verdict, message=f"{kind} went {verdict}")})
    return _write(tmp_path / "old.json", old), _write(tmp_path / "new.json", new)


def test_every_kind_is_written_and_read_back_unchanged(tmp_path):
    path = _write(tmp_path / "run.json", PASSING)
    for cell in load_run(path).cells:
        assert dataclasses.replace(cell, test_id="") == PASSING[cell.kind], cell.kind


@pytest.mark.parametrize("verdict", FAILING, ids=[v.value for v in FAILING])
@pytest.mark.parametrize("kind", list(PASSING))
def test_pass_to_a_failing_verdict_fails_compare(tmp_path, capsys, kind, verdict):
    old, new = _runs(tmp_path, kind, verdict)
    comparison = compare_runs(load_run(old), load_run(new))
    (row,) = comparison.failures
    assert row.test_id == NAMES[kind] and row.verdict is verdict and row.message == f"{kind} went {verdict}"
    assert comparison.failed()
    assert main(["compare", str(old), str(new)]) == EXIT_REGRESSION
    assert f"{verdict.value.upper()}: {kind} went {verdict}" in capsys.readouterr().out


@pytest.mark.parametrize("verdict", FAILING, ids=[v.value for v in FAILING])
@pytest.mark.parametrize("kind", list(PASSING))
def test_pass_to_a_failing_verdict_fails_report_on_regression(tmp_path, capsys, kind, verdict):
    old, new = _runs(tmp_path, kind, verdict)
    out = str(tmp_path / "report")
    assert main(["report", str(new), "-o", out, "--fail-on-regression"]) == EXIT_REGRESSION
    assert main(["report", str(new), "--compare", str(old), "-o", out, "--fail-on-regression"]) == EXIT_REGRESSION
    assert f"{NAMES[kind]}: {kind} went {verdict}" in capsys.readouterr().out


def test_unchanged_passing_cells_fail_nothing(tmp_path):
    old, new = _runs(tmp_path, "convergence", Verdict.PASS)
    assert not compare_runs(load_run(old), load_run(new)).failed()
    assert main(["compare", str(old), str(new)]) == EXIT_OK
    assert main(["report", str(new), "--compare", str(old), "-o",
                 str(tmp_path / "r"), "--fail-on-regression"]) == EXIT_OK


@pytest.mark.parametrize("verdict", [Verdict.INCONCLUSIVE, Verdict.INPUT_BOUND, Verdict.EXPECTED_LAG, Verdict.IMPROVED],
                         ids=lambda v: v.value)
def test_verdicts_that_do_not_fail_do_not_fail(tmp_path, verdict):
    old, new = _runs(tmp_path, "convergence", verdict)
    assert not compare_runs(load_run(old), load_run(new)).failed()
    assert main(["report", str(new), "--compare", str(old), "-o",
                 str(tmp_path / "r"), "--fail-on-regression"]) == EXIT_OK


def test_a_legacy_below_margin_reads_as_a_regression_with_its_reason(tmp_path):
    old, new = _runs(tmp_path, "convergence", Verdict.PASS)
    doc = json.loads(new.read_text())
    doc["benchmarks"][2]["extra_info"]["verdict"] = "below margin"  # as convergence cells once wrote it
    new.write_text(json.dumps(doc))
    cell = load_run(new).cell(ConvergenceRecord, "mnist_cnn", "bf16")
    assert cell.verdict is Verdict.REGRESSION and cell.reason == "below margin"
    assert main(["compare", str(old), str(new)]) == EXIT_REGRESSION
