"""What a slowed run records (``ampbench.plugin.slowdown``, on the CPU): a slowed cell's tag in its
extra_info and the history, left off under --perf-slowdown-untagged, for single-GPU and distributed cells;
and torchao's emulated fp8 matmul as a slowdown of an fp8 cell, tagged as one."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pytest
import torch

from ampbench import fp8, train
from ampbench.distributed.launch import WORKER_PLUGINS_ENV
from ampbench.models import get_model
from ampbench.modes import MODES
from ampbench.plugin import slowed_steps

pytest_plugins = ("pytester",)
CPU = torch.device("cpu")


TAGGED_TEST = """
import pytest

@pytest.mark.parametrize("mode", ["fp32", "bf16"])
def test_cell(benchmark, mode):
    benchmark.extra_info.update(model="mlp", mode=mode)
    benchmark.pedantic(lambda: None, rounds=1)
"""


def _run_slowed(pytester, tmp_path, source: str, spec: str, passed: int, *more: str):
    """Run `source` under the plugin slowing `spec`: the pytest result and each benchmark's extra_info by
    its name."""
    pytester.makepyfile(source)
    out = tmp_path / "run.json"
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "--perf-slowdown", spec,
                                          f"--benchmark-json={out}", "-p", "no:cacheprovider", *more)
    result.assert_outcomes(passed=passed)
    return result, {b["name"]: b["extra_info"] for b in json.loads(out.read_text())["benchmarks"]}


def test_a_slowed_cell_is_tagged_in_its_extra_info_so_spread_never_counts_it(pytester, tmp_path):
    _, by_name = _run_slowed(pytester, tmp_path, TAGGED_TEST, "mlp:fp32:0.05", passed=2)
    infos = {info["mode"]: info for info in by_name.values()}
    assert infos["fp32"]["injected_slowdown"] == 0.05 and "injected_slowdown" not in infos["bf16"]


def test_a_slowed_cell_is_left_untagged_where_asked(pytester, tmp_path):
    _, by_name = _run_slowed(pytester, tmp_path, TAGGED_TEST, "mlp:fp32:0.05", 2, "--perf-slowdown-untagged")
    assert all("injected_slowdown" not in info for info in by_name.values())


def _slowed_ddp_cell(tmp_path, *args: str, env: dict[str, str] | None = None) -> tuple[dict, bool]:
    """Run perf/test_distributed.py's DDP cell of mlp amp_bf16 on two CPU ranks, history kept: (its entry's
    extra_info in the run JSON, whether the history holds its record as injected)."""
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out, store = tmp_path / "run.json", tmp_path / "h.sqlite"
    # a slowdown only where the test names one
    outer = {k: v for k, v in os.environ.items() if k not in (slowed_steps.ENV, WORKER_PLUGINS_ENV)}
    env = {**outer, "PYTHONPATH": str(root), **(env or {})}
    run = subprocess.run([sys.executable, "-m", "pytest", "perf/test_distributed.py", "-q", "-p", "no:cacheprovider",
                          "--perf-device", "cpu", "--perf-models", "mlp", "--perf-precisions", "amp_bf16",
                          "-k", "test_ddp_speed and fp32", "--perf-history", str(store), "--benchmark-json", str(out),
                          *args], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (entry,) = json.loads(out.read_text())["benchmarks"]
    with sqlite3.connect(store) as db:
        (injected,) = db.execute("SELECT injected FROM cells").fetchone()
    return entry["extra_info"], bool(injected)


def test_a_slowed_distributed_cell_is_left_untagged_where_asked(tmp_path):
    """Its ranks are slowed, yet neither the JSON nor the history marks it: the history judges and learns
    from it as from a real regression, as of a single-GPU cell."""
    info, injected = _slowed_ddp_cell(tmp_path, "-p", "ampbench.slowdown", "--perf-slowdown", "mlp:amp_bf16:0.05",
                                      "--perf-slowdown-untagged")
    assert info.get("injected_slowdown") is None and not injected


def test_a_distributed_cell_slowed_on_its_ranks_alone_reaches_the_history_as_injected(tmp_path):
    """A slowdown given to another node's pytest reaches only the ranks (here: the environment that
    pytest would leave them, this one without the plugin): the record node 0 keeps names it in the
    history as in the JSON, or the history would count a slowed run as a sample of the cell's noise."""
    info, injected = _slowed_ddp_cell(tmp_path, env={slowed_steps.ENV: "mlp:amp_bf16:0.05",
                                                     WORKER_PLUGINS_ENV: "ampbench.plugin.slowdown"})
    assert info["injected_slowdown"] == 0.05 and injected


# -- emulate: an fp8 cell's matmuls in torchao's emulation ---------------------------------------------

def test_parse_reads_emulate_for_an_fp8_mode_only():
    assert slowed_steps.parse("gpt:fp8_tensorwise:emulate,gpt:amp_bf16:0.01") == {
        ("gpt", "fp8_tensorwise"): slowed_steps.EMULATE, ("gpt", "amp_bf16"): 0.01}
    with pytest.raises(ValueError, match="'gpt:amp_bf16:emulate': emulate slows an fp8 mode's matmuls "
                                         r"\(fp8_tensorwise, fp8_rowwise\); amp_bf16 has none"):
        slowed_steps.parse("gpt:amp_bf16:emulate")
    with pytest.raises(ValueError, match="nor emulate, for an fp8 mode"):
        slowed_steps.parse("gpt:fp8_rowwise:emulated")


@dataclass(frozen=True)
class FakeFloat8Config:
    """Stands in for torchao's Float8LinearConfig (a frozen dataclass with an `emulate` field)."""

    recipe: str
    emulate: bool = False


def test_convert_builds_its_config_through_the_hook_the_plugin_wraps(monkeypatch):
    class Built(Exception):
        pass

    def hook(mode):
        raise Built(mode.name)

    monkeypatch.setattr(fp8, "float8_config", hook)
    with pytest.raises(Built, match="fp8_tensorwise"):  # before torchao is imported: this runs without it
        fp8.convert(get_model("mlp").build(get_model("mlp").smoke_config), MODES["fp8_tensorwise"])


def test_emulate_turns_torchaos_emulation_on_for_the_named_cells_trainers_only(monkeypatch, capsys):
    monkeypatch.setattr(fp8, "float8_config", lambda mode: FakeFloat8Config(mode.fp8_recipe))
    built: list[tuple[str, str, FakeFloat8Config]] = []

    def fake_convert(model, mode):  # torchao's conversion, as far as the config goes
        built.append((type(model).__name__, mode.name, fp8.float8_config(mode)))
        return []

    monkeypatch.setattr(fp8, "convert", fake_convert)
    plain_init, plain_config = train.Trainer.__init__, fp8.float8_config
    sd = slowed_steps.Slowdown({("mlp", "fp8_tensorwise"): slowed_steps.EMULATE})
    sd.install()
    try:
        named = train.Trainer(get_model("mlp"), MODES["fp8_tensorwise"], CPU, smoke=True)
        train.Trainer(get_model("mlp"), MODES["fp8_rowwise"], CPU, smoke=True)
        train.Trainer(get_model("mnist_cnn"), MODES["fp8_tensorwise"], CPU, smoke=True)
        outside = fp8.float8_config(MODES["fp8_tensorwise"])  # no trainer being built: no cell to slow
    finally:
        sd.uninstall()
    assert train.Trainer.__init__ is plain_init and fp8.float8_config is plain_config, "uninstall must restore both"
    assert [(mode, config.emulate) for _, mode, config in built] == [
        ("fp8_tensorwise", True), ("fp8_rowwise", False), ("fp8_tensorwise", False)]
    assert built[0][2] == FakeFloat8Config("tensorwise", emulate=True)
    assert outside.emulate is False and named._slowdown_emulated
    assert "ampbench.slowdown: mlp fp8_tensorwise: torchao's emulated fp8 matmul" in capsys.readouterr().out


EMULATED_TEST = """
import pytest
import torch
from ampbench import train
from ampbench.modes import MODES
from ampbench.models import get_model

@pytest.mark.parametrize("mode", ["fp8_tensorwise", "amp_bf16"])
def test_cell(benchmark, mode):
    benchmark.extra_info.update(model="gpt", mode=mode)
    benchmark.pedantic(lambda: None, rounds=1)

def test_versus(benchmark):
    # a cell whose own mode is not named, but one of whose trainers (its versus side) was slowed
    benchmark.extra_info.update(model="mlp", mode="amp_bf16 compiled")
    trainer = train.Trainer(get_model("mlp"), MODES["amp_bf16"], torch.device("cpu"), smoke=True)
    trainer._slowdown_emulated = True  # as the plugin marks a trainer it built emulated
    trainer.run(1)
    benchmark.pedantic(lambda: None, rounds=1)
"""


def test_an_emulated_cell_and_a_cell_its_trainers_took_part_in_are_tagged(pytester, tmp_path):
    result, infos = _run_slowed(pytester, tmp_path, EMULATED_TEST, "gpt:fp8_tensorwise:emulate", passed=3)
    result.stdout.fnmatch_lines(["*steps slowed on purpose: gpt fp8_tensorwise torchao's emulated fp8 matmul"])
    assert infos["test_cell[fp8_tensorwise]"]["injected_slowdown"] == slowed_steps.EMULATED
    assert "injected_slowdown" not in infos["test_cell[amp_bf16]"]
    assert infos["test_versus"]["injected_slowdown"] == slowed_steps.EMULATED


def test_spread_counts_no_emulated_cell_as_a_sample_of_noise():
    from ampbench.baselines import spread
    from ampbench.results import SpeedRecord

    record = SpeedRecord.from_info({"ampbench_schema": 1, "model": "gpt", "mode": "fp8_tensorwise", "speedup": 1.4,
                                    "injected_slowdown": slowed_steps.EMULATED})
    assert record.injected_slowdown == slowed_steps.EMULATED
    assert "a slowdown of torchao's emulated fp8 matmul was injected" in spread._why_not({}, None, record)
