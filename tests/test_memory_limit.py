"""--perf-memory-limit on a machine without CUDA: the option and its usage errors, what the limit sets on a
mocked card (the allocator's fraction, cuDNN's workspace variable), the record of it in the
run's machine info, and the cells that do not fit it: skipped with their need and the limit, before they
build anything or where they run out of memory."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ampbench.baselines.entries import entry_of
from ampbench.memory import fit, limit, peak, probe
from ampbench.modes import get_mode
from ampbench.plugin import fitting
from ampbench.plugin.fixtures import out_of_memory
from ampbench.plugin.session import LIMIT_NOTE_KEY, SETTINGS_KEY, run_limits
from perf_options import configure, usage_error

GIB = 2**30


@pytest.mark.parametrize("value", ["0", "-3", "nan", "lots"])
def test_a_bad_limit_is_a_usage_error_naming_the_flag(value):
    assert "--perf-memory-limit" in usage_error("--perf-memory-limit", value)


def test_the_search_cap_cannot_exceed_the_limit():
    error = usage_error("--perf-memory-limit", "15", "--perf-memory-cap", "20")
    assert "--perf-memory-cap 20" in error and "--perf-memory-limit 15" in error


def test_a_limited_run_records_no_baselines():
    assert "--perf-memory-limit" in usage_error("--perf-memory-limit", "15", "--perf-update-baselines")


def test_on_the_cpu_the_limit_is_recorded_and_said_to_do_nothing():
    config = configure("--perf-device", "cpu", "--perf-memory-limit", "15", "--perf-time-budget", "600")
    settings = config.stash[SETTINGS_KEY]
    assert settings.memory_limit_gib == 15.0 and settings.time_budget_s == 600.0
    assert config.stash[LIMIT_NOTE_KEY] == limit.CPU_NOTE
    assert run_limits(settings) == {"limits": {"memory_limit_gib": 15.0, "time_budget_s": 600.0}}


def test_an_unlimited_run_says_nothing_of_limits():
    config = configure("--perf-device", "cpu")
    assert config.stash[LIMIT_NOTE_KEY] is None and run_limits(config.stash[SETTINGS_KEY]) == {}


@pytest.fixture
def card(monkeypatch):
    """A mocked 80 GiB CUDA card: the fractions set on it are kept in the returned list."""
    fractions: list[tuple[float, int]] = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=None: (79 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, index=None: fractions.append((fraction, index)))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda index=None: 1.0, raising=False)
    monkeypatch.setattr(limit, "_fractions", {})
    return fractions


def test_the_limit_caps_the_allocator_and_cudnns_workspace_and_leaves_cublas_at_torchs_size(card):
    env: dict[str, str] = {}
    note = limit.apply(torch.device("cuda", 0), 15.0, env)
    assert card == [(15 / 80, 0)]
    assert env == {"CUDNN_CONV_WSCAP_DBG": str(15 * 1024 // 16)}
    assert note is not None and "15 of 80.0 GiB" in note
    assert limit.fraction_of(torch.device("cuda", 0)) == 15 / 80


def test_a_workspace_variable_the_user_set_is_left_alone(card):
    env = {"CUDNN_CONV_WSCAP_DBG": "64"}
    note = limit.apply(torch.device("cuda", 0), 22.0, env)
    assert env == {"CUDNN_CONV_WSCAP_DBG": "64"}
    assert note is not None and "CUDNN_CONV_WSCAP_DBG left as set" in note


def test_a_limit_above_the_cards_memory_names_the_flag_and_the_memory(card):
    with pytest.raises(limit.LimitError, match=r"--perf-memory-limit 96: .* has 80\.0 GiB"):
        limit.apply(torch.device("cuda", 0), 96.0, {})
    assert card == []


def test_the_searchs_cap_inside_the_run_never_lifts_the_limit(card):
    device = torch.device("cuda", 0)
    limit.apply(device, 15.0, {})
    with probe.process_memory_limit(device, 40 * GIB) as fraction:
        assert fraction == 15 / 80  # the search asked for half the card; the limit holds
    assert card[-1] == (15 / 80, 0)  # restored to the limit, not to the whole card


# -- cells that do not fit ---------------------------------------------------------------------------


def test_a_speed_cells_need_is_both_sides_recorded_peaks():
    entries = {"test_speed[resnet50-amp_bf16]": entry_of(
        "test_speed[resnet50-amp_bf16]", {"peak_mem_bytes": 6 * GIB, "memory_ratio": 0.5, "batch_size": 128})}
    sides = fitting.cell_sides("test_speed", "resnet50", get_mode("amp_bf16"))
    need = fit.recorded_need(entries.get, "test_speed[resnet50-amp_bf16]", [s for _, s in sides], 128)
    assert need is not None and need.peaks == (12 * GIB, 6 * GIB)
    assert not need.fits(15 * GIB) and need.fits(20 * GIB)
    text = fit.message("resnet50 amp_bf16 with its fp32 side", 128, need, 15 * GIB)
    assert text == ("resnet50 amp_bf16 with its fp32 side at batch 128 needs 18.90 GiB (recorded); the limit is "
                    "15.00 GiB")


def test_a_recorded_peak_at_another_batch_says_nothing():
    entries = {"test_memory[gpt-fp32]": entry_of("test_memory[gpt-fp32]",
                                                 {"peak_mem_bytes": 9 * GIB, "memory_ratio": 1.0, "batch_size": 16})}
    assert fit.recorded_need(entries.get, None, [fit.KeptSide("fp32", "test_memory[gpt-fp32]")], 8) is None
    need = fit.recorded_need(entries.get, None, [fit.KeptSide("fp32", "test_memory[gpt-fp32]")], 16)
    assert need is not None and need.peaks == (9 * GIB,)


class _Spec:
    name = "gpt"

    @staticmethod
    def batch_size_for(smoke):
        return 8


class _Settings:
    smoke = False

    def __init__(self, limit_gib):
        self.memory_limit_gib = limit_gib


def test_without_a_record_each_eager_side_is_probed_once(monkeypatch, card):
    calls = []

    def fake_probe(spec, mode, device, smoke=False, **trains):
        calls.append(mode.name)
        return (10 * GIB if mode.name == "fp32" else 7 * GIB), False

    monkeypatch.setattr(peak, "probe_peak", fake_probe)
    monkeypatch.setattr(fitting, "_probed", {})
    cuda = torch.device("cuda", 0)
    why = fitting.cell_misfit("test_speed[gpt-amp_fp16]", "test_speed", _Settings(15.0), cuda, None, _Spec(),
                              get_mode("amp_fp16"))
    assert why == "gpt amp_fp16 with its fp32 side at batch 8 needs 17.85 GiB (probed); the limit is 15.00 GiB"
    assert fitting.cell_misfit("test_speed[gpt-amp_bf16]", "test_speed", _Settings(22.0), cuda, None, _Spec(),
                               get_mode("amp_bf16")) is None
    assert calls == ["fp32", "amp_fp16", "amp_bf16"]  # fp32 probed once for both cells


def test_a_probe_that_runs_out_says_the_need_is_more(monkeypatch, card):
    monkeypatch.setattr(peak, "probe_peak", lambda spec, mode, device, smoke=False, **trains: (14 * GIB, True))
    monkeypatch.setattr(fitting, "_probed", {})
    why = fitting.cell_misfit("test_memory[gpt-fp32]", "test_memory", _Settings(15.0), torch.device("cuda", 0),
                              None, _Spec(), get_mode("fp32"))
    assert why is not None and "needs more than 14.70 GiB (probed, out of memory); the limit is 15.00 GiB" in why


def test_without_a_limit_nothing_is_probed_and_only_a_need_past_the_card_skips(monkeypatch, card):
    monkeypatch.setattr(peak, "probe_peak", lambda *a, **k: pytest.fail("probed without a limit"))
    cuda = torch.device("cuda", 0)
    assert fitting.cell_misfit("test_speed[gpt-fp16]", "test_speed", _Settings(None), cuda, None, _Spec(),
                               get_mode("fp16")) is None

    class Source:
        @staticmethod
        def entry(test_id):
            return entry_of(test_id, {"peak_mem_bytes": 60 * GIB, "memory_ratio": 0.75, "batch_size": 8})

    why = fitting.cell_misfit("test_speed[gpt-fp16]", "test_speed", _Settings(None), cuda, Source(), _Spec(),
                              get_mode("fp16"))
    assert why is not None and "the card's memory is 80.00 GiB" in why


def test_a_cell_of_another_kind_or_on_the_cpu_is_not_checked():
    assert fitting.cell_sides("test_convergence", "gpt", get_mode("fp16")) == []
    assert fitting.cell_misfit("test_speed[gpt-fp16]", "test_speed", _Settings(1.0), torch.device("cpu"), None,
                               _Spec(), get_mode("fp16")) is None


def test_a_compiled_cell_keeps_three_sides_and_is_never_probed(monkeypatch, card):
    from ampbench.modes import FP32_MODE, compiled, label, versus_of

    fp8 = get_mode("fp8_tensorwise")
    sides = fitting.cell_sides("test_speed", "gpt", fp8)
    assert [s.label for _, s in sides] == [label(compiled(get_mode(FP32_MODE), True)), label(fp8),
                                           label(versus_of(fp8))]
    assert all(s.memory_test_id is None for _, s in sides)
    assert fitting.probed_need(_Spec(), [compiled(get_mode("amp_bf16"))], torch.device("cuda", 0), False) is None


def test_an_out_of_memory_under_a_limit_reads_as_a_need_and_fails_without_one():
    failure = "gpt fp32 side: out of memory at batch 8: peak memory 10.05 GiB; CUDA out of memory"
    with pytest.raises(pytest.skip.Exception) as skipped:
        out_of_memory(failure, 15.0)
    assert str(skipped.value) == failure + "; it needs more than the limit of 15.00 GiB"
    with pytest.raises(pytest.fail.Exception) as failed:
        out_of_memory(failure, None)
    assert str(failed.value) == failure


def test_an_out_of_memory_on_a_card_no_baseline_of_this_gpu_has_is_the_cards_size():
    failure = "gpt fp32 side: out of memory at batch 8: peak memory 14.60 GiB; CUDA out of memory"
    with pytest.raises(pytest.skip.Exception) as skipped:
        out_of_memory(failure, None, 14.58)
    assert str(skipped.value) == (failure + "; it needs more than this card's 14.58 GiB, and no baseline of this "
                                  "GPU has it")
    with pytest.raises(pytest.skip.Exception) as limited:  # a limit names itself, not the card
        out_of_memory(failure, 12.0, 14.58)
    assert "the limit of 12.00 GiB" in str(limited.value)


@pytest.mark.parametrize("oom", [True, False])
def test_a_memory_cell_skips_under_a_limit_only_where_it_ran_out_of_memory(oom):
    from ampbench.memory import MemoryMeasurementError
    from ampbench.suite.memory import _fail

    settings = SimpleNamespace(memory_limit_gib=15.0)
    error = MemoryMeasurementError("gpt fp32: the search failed", out_of_memory=oom)
    with pytest.raises(pytest.skip.Exception if oom else pytest.fail.Exception):
        _fail(error, settings, str(error))


def test_a_convergence_cell_is_probed_at_the_batch_and_config_it_trains_at(monkeypatch, card):
    from ampbench.convergence import training
    from ampbench.models import get_model

    asked = []

    def fake_probe(spec, mode, device, smoke=False, config=None, batch_size=None):
        asked.append((mode.name, config, batch_size))
        return 16 * GIB, True

    monkeypatch.setattr(peak, "probe_peak", fake_probe)
    monkeypatch.setattr(fitting, "_probed", {})
    spec, cuda = get_model("mnist_cnn"), torch.device("cuda", 0)
    why = fitting.cell_misfit("test_convergence[mnist_cnn-fp16]", "test_convergence", _Settings(15.0), cuda, None,
                              spec, get_mode("fp16"))
    batch = training.budget_for("mnist_cnn", cuda).batch_size
    assert asked == [("fp16", training.image_config(spec, False, num_classes=10)[0], batch)]
    assert why is not None and why.startswith(f"mnist_cnn fp16 at batch {batch} needs more than")
    assert fitting.cell_misfit("test_convergence[mnist_cnn-fp16]", "test_convergence", _Settings(None), cuda, None,
                               spec, get_mode("fp16")) is None


def test_a_limited_run_appends_to_no_history_unless_one_is_named(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from ampbench.plugin import history

    monkeypatch.setattr(history, "_device", lambda config: torch.device("cuda", 0))
    config = SimpleNamespace(option=SimpleNamespace(perf_history=None, perf_memory_limit=15.0, perf_device="auto"),
                             rootpath=tmp_path)
    assert history._open(config) is None
    config.option.perf_history = str(tmp_path / "named.sqlite")
    opened = history._open(config)
    assert opened is not None and (tmp_path / "named.sqlite").exists()


OOM_CELL = '''
import torch


def test_speed(model_name, mode_name, fail_on_oom):
    def step():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    fail_on_oom(step, f"{model_name} fp32 side", 512)
'''


@pytest.mark.parametrize("limited", [False, True])
def test_an_out_of_memory_in_a_cell_skips_under_a_limit_and_fails_as_before_without(tmp_path, limited):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n')
    (tmp_path / "test_cells.py").write_text(OOM_CELL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "--perf-device", "cpu",
                          "--perf-models", "mlp", "--perf-precisions", "bf16", "--perf-history", "off",
                          *(["--perf-memory-limit", "15"] if limited else [])],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    if limited:
        assert run.returncode == 0 and "1 skipped" in out, out
        assert "mlp fp32 side: out of memory at batch 512" in out and "needs more than the limit of 15.00 GiB" in out
        assert out.count(limit.CPU_NOTE) == 1  # said once, in the header
    else:
        assert run.returncode == 1 and "mlp fp32 side: out of memory at batch 512" in out, out


OOM_IN_ROUNDS = '''
import pytest
import torch

from ampbench.speed import cell


@pytest.fixture(autouse=True)
def rounds_run_out(monkeypatch):
    def measure_speed(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 392.00 MiB")
    monkeypatch.setattr(cell, "measure_speed", measure_speed)
'''


def test_a_speed_cell_that_runs_out_in_its_rounds_skips_under_a_limit(tmp_path):
    """Both sides built, then an eager step of the rounds runs out beside their graph pools: the suite's own
    speed cell takes the one out-of-memory outcome, not torch's error."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n')
    (tmp_path / "conftest.py").write_text(OOM_IN_ROUNDS)
    (tmp_path / "test_cells.py").write_text("from ampbench.suite import *  # noqa: F403\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "--perf-device", "cpu",
                          "--perf-models", "mlp", "--perf-precisions", "bf16", "--perf-history", "off",
                          "--perf-memory-limit", "15", "-k", "test_speed"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0 and "1 skipped" in out, out
    assert "mlp bf16 beside its fp32 side: out of memory at batch" in out and "limit of 15.00 GiB" in out, out
