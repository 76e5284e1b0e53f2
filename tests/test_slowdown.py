"""The slowdown plugin (``ampbench.plugin.slowdown``, loaded as ``-p ampbench.slowdown``) on the CPU: the
spec it reads, the steps it slows (and only those, ``ampbench.plugin.slowed_steps``), and its wiring as a
pytest plugin, where a bad spec is a usage error. What a slowed run records: test_slowdown_tags.py."""

from __future__ import annotations

import os
import statistics
import time

import pytest
import torch

from ampbench import train
from ampbench.distributed.launch import WORKER_PLUGINS_ENV
from ampbench.models import REGISTRY, get_model
from ampbench.modes import MODES
from ampbench.plugin import slowdown, slowed_steps

pytest_plugins = ("pytester",)

CPU = torch.device("cpu")


def test_parse_reads_several_cells():
    assert slowed_steps.parse(" mlp:fp32:0.5, gpt:amp_bf16:0.01 ,") == {("mlp", "fp32"): 0.5, ("gpt", "amp_bf16"): 0.01}
    assert slowed_steps.parse("") == {}


def test_a_star_names_every_model_or_mode_and_a_later_item_overrides_it():
    """'*:*:14': every cell's steps 15 times their own time, a card that much slower, as the run's time goes."""
    every = slowed_steps.parse("*:*:14")
    assert set(every) == {(m, p) for m in REGISTRY for p in MODES} and set(every.values()) == {14.0}
    some = slowed_steps.parse("gpt:*:0.5, *:*:2, mlp:fp32:0.1")
    assert some[("mlp", "fp32")] == 0.1 and some[("gpt", "amp_bf16")] == 2.0 and len(some) == len(every)
    assert slowed_steps.parse("*:fp32:0.2") == {(m, "fp32"): 0.2 for m in REGISTRY}


def test_a_wildcard_needs_no_cell_it_names_to_be_trained_and_a_named_cell_does(pytester):
    """'*:*:14' over a run of some models: the cells it names that the run does not train are no error (it
    names every model and mode); a cell named one by one that the run does not train still is."""
    assert slowed_steps.parse("*:*:14").broad == set(slowed_steps.parse("*:*:14"))
    assert ("gpt", "amp_fp16") not in slowed_steps.parse("*:*:14,gpt:amp_fp16:0.1").broad
    pytester.makepyfile(test_cells="from ampbench.suite import *  # noqa: F403\n")
    args = ("-p", "ampbench.slowdown", "--perf-device", "cpu", "--perf-models", "mlp", "--perf-history", "off",
            "-k", "test_speed", "--co")
    assert pytester.runpytest_subprocess(*args, "--perf-slowdown", "*:*:14").ret == pytest.ExitCode.OK
    refused = pytester.runpytest_subprocess(*args, "--perf-slowdown", "*:*:14,gpt:amp_fp16:0.1")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*no cell of this run trains gpt:amp_fp16;*"])


def test_the_header_counts_a_wildcards_cells_rather_than_naming_each(pytester):
    pytester.makeconftest("")
    result = pytester.runpytest("-p", "ampbench.slowdown", "--perf-slowdown", "*:*:14", "--co")
    header = [line for line in result.outlines if line.startswith("ampbench.slowdown:")]
    assert header == [f"ampbench.slowdown: steps slowed on purpose: {len(REGISTRY) * len(MODES)} cells (+1400.0%)"]


@pytest.mark.parametrize("spec, expected", [
    ("mlp:fp32", "'mlp:fp32' is not MODEL:MODE:FRACTION"),
    ("*:*:emulate", "emulate names one fp8 mode, not \\*"),
    ("*:fp9:0.1", "unknown precision mode 'fp9'"),
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
    result = pytester.runpytest_inprocess("-p", "ampbench.slowdown", "--perf-slowdown",
                                          "mlp:fp32:0.1,gpt:amp_bf16:0.03")
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
