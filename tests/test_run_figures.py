"""Every figure the suite shows of a run stays as it was: for each committed run (real GPU runs, synthetic
ones and a CPU run of the suite), the report (summary.md, index.html's text, the values its charts draw),
the end-of-session summary, `ampbench export`'s figures, the figure rows of a history and `ampbench
compare`'s table are what the code made of it before the run JSON was nested by ratio
(``tests/data/before/``, written by ``tests/run_figures.py``): read as it was written, and rewritten in
the current layout (``ampbench export --format pytest-benchmark``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampbench.export.formats import pytest_benchmark
from ampbench.results import SCHEMA_VERSION
from ampbench.results.schema import ERRORS_KEY, SCHEMA_KEY, UNTIMED_KEY
from run_figures import BEFORE, COMPARED, DATA, RUNS, comparison, figures, flat_names


def _before(name: str):
    return json.loads((BEFORE / name).read_text())


@pytest.mark.parametrize("name", RUNS)
def test_a_committed_run_shows_every_figure_as_before(name):
    assert figures(DATA / name) == _before(name)


def test_compare_says_of_two_committed_runs_what_it_said_before():
    assert comparison(*(DATA / n for n in COMPARED)) == _before("compare.json")


def _rewritten(name: str) -> dict:
    """The committed run as `ampbench export --format pytest-benchmark` writes it: in the current layout."""
    return pytest_benchmark(json.loads((DATA / name).read_text()))


@pytest.mark.parametrize("name", RUNS)
def test_a_committed_run_rewritten_in_the_current_layout_shows_every_figure_as_before(name, tmp_path):
    path = tmp_path / name  # the report names the file
    path.write_text(json.dumps(_rewritten(name)))
    assert figures(path) == _before(name)


def _cells(document: dict) -> dict[str, dict]:
    return {b["name"]: b["extra_info"] for key in ("benchmarks", UNTIMED_KEY, ERRORS_KEY)
            for b in document.get(key) or () if SCHEMA_KEY in (b.get("extra_info") or {})}


@pytest.mark.parametrize("name", RUNS)
def test_every_figure_of_a_committed_run_json_keeps_its_value_in_the_current_layout(name):
    """Each figure a cell of schema 1 wrote is in the cell as the current schema writes it, with its value:
    a timed cell's ratios moved under ``ratios``, each figure named there without its ratio's prefix."""
    before, after = _cells(json.loads((DATA / name).read_text())), _cells(_rewritten(name))
    assert before.keys() == after.keys()
    for test_id, info in before.items():
        assert after[test_id][SCHEMA_KEY] == SCHEMA_VERSION
        flat = flat_names(after[test_id])
        kept = {k: v for k, v in info.items() if v is not None and k != SCHEMA_KEY}
        assert {k: flat.get(k) for k in kept} == kept, test_id


def test_a_cpu_cell_measured_now_writes_every_figure_the_cpu_run_of_before_wrote():
    """mlp's compiled amp_bf16 cell, measured now on the CPU (on eager sides: what is timed does not matter
    here), writes each figure the CPU run of before wrote of it, each of a ratio under its ratio's name."""
    import torch

    from ampbench.models import get_model
    from ampbench.modes import compiled, get_mode
    from ampbench.settings import PerfSettings
    from ampbench.speed import sides
    from ampbench.speed.cell import measure_speed, policy

    cpu, spec, amp_bf16 = torch.device("cpu"), get_model("mlp"), get_mode("amp_bf16")
    settings = PerfSettings(device=cpu, models=("mlp",), precisions=("amp_bf16",), tier="quick", baseline_dir=Path("b"),
                            update_baselines=False, tolerance=0.005, strict=False, min_rounds=5, memory_cap_gib=None,
                            data_root=None, loader_workers=0, pin_memory=False, loss_scaler="torch.amp:GradScaler",
                            block_seconds=0.002, cudnn_benchmark=False, gate="device", compile=(True,))
    side = lambda mode: sides.prepare_side(spec, mode, cpu, True, policy(cpu, settings))  # noqa: E731
    cell = measure_speed(spec, compiled(amp_bf16), side(get_mode("fp32")), lambda: side(amp_bf16),
                         versus=lambda: side(amp_bf16), settings=settings, device=cpu,
                         test_id="test_speed[mlp-amp_bf16-compiled]", source=None, software={},
                         peak_tflops=lambda dtype: None, prepared=lambda identity: None)
    before = _cells(json.loads((DATA / "cpu_fresh.json").read_text()))["test_speed[mlp-amp_bf16-compiled]"]
    now = flat_names(json.loads(json.dumps(cell.record.to_info())))
    written = {k for k, v in before.items() if v is not None}
    assert written <= {k for k, v in now.items() if v is not None}
