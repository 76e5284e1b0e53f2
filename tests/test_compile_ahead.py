"""Compiling ahead (``ampbench.speed.ahead``): the sides a run's compiled cells are timed with, each compiled
cold in a process of its own into the run's cache; the cell's own first step then reads that cache, and
reports the cold compile measured ahead. A side that is not read whole from the cache keeps its own time."""

from __future__ import annotations

import os

import pytest
import torch

from ampbench.speed import ahead
from ampbench.speed.ahead import AheadSide, CompileAhead, compile_threads, plan


def _never(model: str, mode: str) -> bool:
    return False


def test_a_compiled_cell_needs_its_mode_and_compiled_fp32_and_an_fp8_cell_its_compiled_versus_too():
    sides = plan([("gpt", "amp_bf16"), ("gpt", "fp8_tensorwise"), ("gpt", "fp8_rowwise")], _never)
    assert sides == [AheadSide("gpt", "fp32"), AheadSide("gpt", "amp_bf16"), AheadSide("gpt", "fp8_tensorwise"),
                     AheadSide("gpt", "fp8_rowwise")]
    # a versus side that does not compile (amp_bf16 eager, for compiled amp_bf16's compile gain) is not one
    assert AheadSide("gpt", "amp_bf16") in plan([("gpt", "fp8_rowwise")], _never)
    assert plan([("resnet50", "amp_bf16")], _never) == [AheadSide("resnet50", "fp32"),
                                                        AheadSide("resnet50", "amp_bf16")]


def test_a_cell_that_will_skip_compiles_nothing_and_the_dearest_sides_go_first():
    sides = plan([("resnet50", "fp8_tensorwise"), ("llama", "amp_bf16")],
                 lambda model, mode: model == "resnet50",
                 costs={AheadSide("llama", "amp_bf16"): 30.0, AheadSide("llama", "fp32"): 10.0})
    assert sides == [AheadSide("llama", "amp_bf16"), AheadSide("llama", "fp32")]
    # an fp32 side no entry times goes with its model's dearest side, not after every other
    sides = plan([("gpt", "amp_bf16"), ("resnet50", "amp_bf16")], _never,
                 costs={AheadSide("gpt", "amp_bf16"): 20.0, AheadSide("resnet50", "amp_bf16"): 40.0})
    assert [s.model for s in sides[:2]] == ["resnet50", "resnet50"] and sides[-1] == AheadSide("gpt", "amp_bf16")


def test_the_hosts_cores_are_shared_among_the_processes():
    assert compile_threads(4, cores=16) == 4
    assert compile_threads(8, cores=4) == 1 and compile_threads(0, cores=4) == 4


def test_a_process_that_fails_says_why_and_gives_no_time(tmp_path):
    run = CompileAhead([AheadSide("no_such_model", "amp_bf16")], device="cpu", smoke=True, workers=1,
                       cache_dir=str(tmp_path)).start()
    [(side, outcome)] = run.wait().items()
    assert outcome.seconds is None and "exit status 1" in outcome.error and "no_such_model" in outcome.error
    assert run.seconds_of("no_such_model", "amp_bf16") is None and side in run.failures()
    assert outcome.describe() == f"no time ({outcome.error})"


@pytest.fixture
def run_cache(tmp_path, monkeypatch):
    """The run's Inductor cache, as the plugin sets it, put back after the test."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(inductor_config, "force_disable_caches", inductor_config.force_disable_caches)
    monkeypatch.setattr(inductor_config, "autotune_local_cache", inductor_config.autotune_local_cache)
    monkeypatch.setenv(ahead.CACHE_ENV, os.environ.get(ahead.CACHE_ENV, str(tmp_path / "unused")))
    threads = torch.get_num_threads()  # the session's backends set it on the CPU, as the processes do
    yield str(tmp_path / "inductor")
    torch.set_num_threads(threads)


def test_a_side_compiled_ahead_is_read_whole_from_the_cache_and_reports_the_cold_compile(run_cache):
    from ampbench import models
    from ampbench.device import configure_backends
    from ampbench.modes import compiled, get_mode
    from ampbench.speed import sides

    run = CompileAhead([AheadSide("mlp", "amp_bf16")], device="cpu", smoke=True, workers=1,
                       cache_dir=run_cache).start()
    cold = run.seconds_of("mlp", "amp_bf16")
    assert cold is not None and cold > 0, run.failures()
    ahead.compile_settings(run_cache)
    import torch._inductor.config as inductor_config

    # launch configs are picked by timing on the device: never read from what a crowded process picked
    assert inductor_config.autotune_local_cache is False
    outcome = run.wait()[AheadSide("mlp", "amp_bf16")]
    assert outcome.starting_s is not None and outcome.process_s is not None
    assert outcome.process_s > outcome.starting_s + cold, outcome.describe()
    assert outcome.describe().startswith(f"first step {cold:.1f} s; ")
    torch._dynamo.reset()
    device = torch.device("cpu")
    configure_backends(device)
    side = sides.prepare_side(models.get_model("mlp"), compiled(get_mode("amp_bf16")), device, True,
                              sides.policy_for(device, 5, 0.005))
    assert side.cache_read, "the cell's first step compiled anew what the process had compiled"
    side.compiled_ahead_s = cold
    assert side.compile_seconds == cold and side.first_step_seconds < cold
