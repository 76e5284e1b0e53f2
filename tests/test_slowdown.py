"""The slowdown plugin (``ampbench.plugin.slowdown``, loaded as ``-p ampbench.slowdown``) on the CPU: the
spec it reads, the steps it slows (and only those, ``ampbench.plugin.slowed_steps``), and its wiring as a
pytest plugin, where a bad spec is a usage error."""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass

import pytest
import torch

from ampbench import fp8, train
from ampbench.plugin import slowdown, slowed_steps
from ampbench.distributed.launch import WORKER_PLUGINS_ENV
from ampbench.modes import MODES
from ampbench.models import get_model

pytest_plugins = ("pytester",)

CPU = torch.device("cpu")


def test_parse_reads_several_cells():
    assert slowed_steps.parse(" mlp:fp32:0.5, gpt:amp_bf16:0.01 ,") == {("mlp", "fp32"): 0.5, ("gpt", "amp_bf16"): 0.01}
    assert slowed_steps.parse("") == {}


@pytest.mark.parametrize("spec, expected", [
    ("mlp:fp32", "'mlp:fp32' is not MODEL:MODE:FRACTION"),
    ("resnet51:fp32:0.1", "unknown model 'resnet51'"),
    ("mlp:fp8:0.1", "unknown precision mode 'fp8'; valid modes: fp32"),
    ("mlp:fp32:much", "the fraction 'much' is not a number"),
    ("mlp:fp32:0", "must be a finite number above 0"),
    ("mlp:fp32:nan", "must be a finite number above 0"),
])
def test_parse_says_what_is_wrong(spec, expected):
    with pytest.raises(ValueError, match=expected.replace("(", r"\(")):
        slowed_steps.parse(spec)


def _median_step(fn, trainer: train.Trainer, n: int = 15) -> float:
    times = []
    with trainer.mode.math_flags():
        for _ in range(n):
            t0 = time.perf_counter()
            fn(trainer)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def test_a_named_cell_is_slowed_by_its_fraction_and_others_are_not(capsys):
    plain_step = train.Trainer.step
    sd = slowed_steps.Slowdown({("mlp", "fp32"): 3.0})
    sd.install()
    try:
        slowed = train.Trainer(get_model("mlp"), MODES["fp32"], CPU, smoke=True)
        other = train.Trainer(get_model("mlp"), MODES["bf16"], CPU, smoke=True)
        slowed.run(1)  # calibrates
        other.run(1)
        # the same trainer, its plain step and its slowed one, so the host's noise falls on both
        plain = _median_step(sd.original, slowed)
        extra = _median_step(train.Trainer.step, slowed)
    finally:
        sd.uninstall()
    assert train.Trainer.step is plain_step, "uninstall must restore Trainer.step"
    assert extra > 2.5 * plain, f"a step slowed by 300% took {extra * 1e3:.3f} ms against {plain * 1e3:.3f} ms plain"
    assert callable(slowed._slowdown_spin)
    assert not hasattr(other, "_slowdown_spin"), "a cell that was not named must not be calibrated or slowed"
    assert "ampbench.slowdown: mlp fp32: step" in capsys.readouterr().out


INNER_TEST = """
import torch
from ampbench import train
from ampbench.modes import MODES
from ampbench.models import get_model

def test_steps():
    for mode in ("fp32", "bf16"):
        train.Trainer(get_model("mlp"), MODES[mode], torch.device("cpu"), smoke=True).run(1)
    named = train.Trainer(get_model("mlp"), MODES["fp32"], torch.device("cpu"), smoke=True)
    named.run(1)
    assert callable(named._slowdown_spin)
"""


def test_plugin_reads_the_environment_and_restores_the_step(pytester, monkeypatch):
    plain_step = train.Trainer.step
    pytester.makepyfile(INNER_TEST)
    monkeypatch.setenv(slowed_steps.ENV, "mlp:fp32:0.2")
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["ampbench.slowdown: steps slowed on purpose: mlp fp32 +20.0%"])
    assert train.Trainer.step is plain_step


PASSED_ON_TEST = """
import os

def test_env():
    assert os.environ["AMPBENCH_SLOWDOWN"] == "mlp:fp32:0.1,gpt:amp_bf16:0.03"
    assert os.environ["AMPBENCH_WORKER_PLUGINS"].split(",") == ["other.plugin", "ampbench.plugin.slowdown"]
"""


def test_plugin_passes_its_spec_on_to_worker_processes_and_restores_the_environment(pytester, monkeypatch):
    """Distributed cells train in torchrun's ranks, which inherit the environment: the plugin names its
    cells and itself there for the session (beside plugins named already), and puts it back afterwards."""
    monkeypatch.delenv(slowed_steps.ENV, raising=False)
    monkeypatch.setenv(WORKER_PLUGINS_ENV, "other.plugin")
    pytester.makepyfile(PASSED_ON_TEST)
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "--perf-slowdown", "mlp:fp32:0.1,gpt:amp_bf16:0.03")
    result.assert_outcomes(passed=1)
    assert slowed_steps.ENV not in os.environ and os.environ[WORKER_PLUGINS_ENV] == "other.plugin"


def test_untagged_reaches_the_workers_and_is_put_back(monkeypatch):
    """The ranks are told whether to tag as this pytest run is, whatever the environment held before."""
    monkeypatch.delenv(slowed_steps.ENV, raising=False)
    tagged = []
    for given, before in ((True, "1"), (False, None)):
        if before is None:
            monkeypatch.delenv(slowed_steps.UNTAGGED_ENV, raising=False)
        else:
            monkeypatch.setenv(slowed_steps.UNTAGGED_ENV, before)
        env = slowdown._pass_on_to_workers({("mlp", "fp32"): 0.1}, tagged=given)
        sd = slowdown.worker_configure()
        sd.uninstall()
        env.undo()
        tagged.append(sd.tagged)
        assert os.environ.get(slowed_steps.UNTAGGED_ENV) == before and slowed_steps.ENV not in os.environ
    assert tagged == [True, False]


def test_a_worker_slows_the_cells_its_environment_names_by_their_wall_step(monkeypatch, capsys):
    """worker_configure, as a rank runs it: the cells of $AMPBENCH_SLOWDOWN slowed, sized on the wall
    time of its own first steps, timed as they run (no step of its own: a rank's peers would wait in a
    collective for it); nothing installed where it names no cell."""
    monkeypatch.delenv(slowed_steps.ENV, raising=False)
    assert slowdown.worker_configure() is None
    monkeypatch.setenv(slowed_steps.ENV, "mlp:fp32:3.0")
    plain_step = train.Trainer.step
    sd = slowdown.worker_configure()
    try:
        assert sd.in_place
        slowed = train.Trainer(get_model("mlp"), MODES["fp32"], CPU, smoke=True)
        calls = []
        sd.original = lambda trainer, *a, **k: calls.append(1) or plain_step(trainer, *a, **k)
        steps = slowed_steps.IN_PLACE_SETTLE + slowed_steps.IN_PLACE_TIMED
        slowed.run(steps)  # settles, then calibrates on its own steps
        assert len(calls) == steps, "the calibration ran steps of its own"
        sd.original = plain_step
        plain = _median_step(sd.original, slowed)
        extra = _median_step(train.Trainer.step, slowed)
    finally:
        sd.uninstall()
    assert train.Trainer.step is plain_step
    assert extra > 2.5 * plain, f"a step slowed by 300% took {extra * 1e3:.3f} ms against {plain * 1e3:.3f} ms plain"
    assert "ampbench.slowdown: mlp fp32: step" in capsys.readouterr().out


def test_spec_of_reads_back_as_its_targets():
    targets = {("mlp", "fp32"): 0.5, ("gpt", "fp8_tensorwise"): slowed_steps.EMULATE}
    assert slowed_steps.parse(slowdown.spec_of(targets)) == targets


def test_flag_overrides_the_environment(pytester, monkeypatch):
    pytester.makepyfile(INNER_TEST)
    monkeypatch.setenv(slowed_steps.ENV, "mlp:bf16:0.2")
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "--perf-slowdown", "mlp:fp32:0.1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*steps slowed on purpose: mlp fp32 +10.0%"])


@pytest.mark.parametrize("where", ["env", "flag"])
def test_a_bad_spec_is_a_usage_error_naming_its_source_once(pytester, monkeypatch, where):
    pytester.makepyfile(INNER_TEST)
    args = ["-p", "ampbench.slowdown"]
    if where == "env":
        monkeypatch.setenv(slowed_steps.ENV, "mlp:fp32")
    else:
        args += ["--perf-slowdown", "mlp:fp32"]
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    source = slowed_steps.ENV if where == "env" else "--perf-slowdown"
    assert f"{source}: 'mlp:fp32' is not MODEL:MODE:FRACTION" in err
    assert err.count(source) == 1, err


CELLS_TEST = """
import pytest

@pytest.mark.parametrize("model_name, mode_name", [("mlp", "amp_bf16"), ("gpt", "fp8_rowwise")])
def test_cell(model_name, mode_name):
    pass

@pytest.mark.parametrize("dist_cell", [("resnet50", "bf16", "fp32_grads")])
def test_ddp(dist_cell):
    pass
"""


@pytest.mark.parametrize("spec", ["mlp:amp_bf16:0.1", "mlp:fp32:0.1", "gpt:amp_bf16:0.1", "resnet50:bf16:0.1"],
                         ids=["the cell", "its fp32 reference", "fp8's parity reference", "a distributed cell"])
def test_a_slowed_cell_that_the_run_trains_is_taken(pytester, monkeypatch, spec):
    monkeypatch.delenv(slowed_steps.ENV, raising=False)
    pytester.makepyfile(CELLS_TEST)
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "-p", "no:cacheprovider", "--perf-slowdown", spec)
    result.assert_outcomes(passed=3)


@pytest.mark.parametrize("where", ["flag", "env"])
def test_a_slowed_cell_that_no_cell_of_the_run_trains_is_a_usage_error(pytester, monkeypatch, where):
    """Else the header announces it, nothing is slowed, and the run passes: a check that shows nothing."""
    pytester.makepyfile(CELLS_TEST)
    args = ["-p", "ampbench.slowdown", "-p", "no:cacheprovider"]
    monkeypatch.delenv(slowed_steps.ENV, raising=False)
    if where == "env":
        monkeypatch.setenv(slowed_steps.ENV, "gpt:amp_bf16:0.5,lstm_lm:bf16:0.5,mlp:amp_bf16:0.5")
    else:
        args += ["--perf-slowdown", "gpt:amp_bf16:0.5,lstm_lm:bf16:0.5,mlp:amp_bf16:0.5"]
    result = pytester.runpytest_inprocess(*args, "-k", "not fp8")  # gpt's only cell deselected
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    source = slowed_steps.ENV if where == "env" else "--perf-slowdown"
    assert (f"ERROR: {source}: no cell of this run trains gpt:amp_bf16, lstm_lm:bf16; run it (--perf-models, "
            "--perf-precisions) or leave it out") in result.stderr.lines


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
