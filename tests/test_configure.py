"""The session's settings made at configure time, in-process on a stand-in config with CUDA faked where
it matters: the device, the tiers, the baseline files checked before the first cell, and the CPU smoke
pass said to be one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ampbench.files import write as outputs
from ampbench.plugin import session as plugin_session
from perf_options import ROOT, configure, run_pytest


@pytest.fixture
def fake_gpus(monkeypatch):
    """torch sees two CUDA devices, named as an H100 (nothing reaches a real device)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")


def test_a_device_index_past_the_last_gpu_is_a_usage_error(fake_gpus):
    with pytest.raises(pytest.UsageError) as info:
        configure("--perf-device", "cuda:7")
    assert str(info.value).startswith("--perf-device cuda:7: there is no CUDA device 7; torch sees 2")
    assert plugin_session.perf_settings_of(configure("--perf-device", "cuda:1")).device == torch.device("cuda", 1)


def test_quick_tier_is_the_default_on_a_gpu_and_the_cpu_leaves_out_the_resnets(fake_gpus):
    quick = ("mlp", "wide_resnet28_10", "resnet50", "lstm_lm", "gpt")
    assert plugin_session.perf_settings_of(configure("--perf-device", "cuda:0")).models == quick
    assert (plugin_session.perf_settings_of(configure("--perf-device", "cpu")).models
            == tuple(m for m in quick if m != "resnet50"))
    full = plugin_session.perf_settings_of(configure("--perf-device", "cpu", "--perf-tier", "full")).models
    assert "dpn92" in full and not any(m.startswith("resnet") for m in full)
    assert plugin_session.perf_settings_of(configure("--perf-device",
                                                     "cpu", "--perf-models", "resnet152")).models == ("resnet152",)


def test_the_compile_tier_selects_its_models_modes_and_compiled_cells_from_its_row(fake_gpus):
    from ampbench import models
    from ampbench.settings import TIERS

    s = plugin_session.perf_settings_of(configure("--perf-device", "cuda:0", "--perf-tier", "compile"))
    assert (s.models == ("resnet50", "gpt", "llama") == tuple(models.model_names("compile"))
            and TIERS["compile"].models is None)
    assert s.precisions == ("amp_bf16", "fp8_tensorwise", "fp8_rowwise") and s.compile == (True,)
    s = plugin_session.perf_settings_of(configure("--perf-device", "cuda:0", "--perf-tier", "compile", "--perf-compile",
                                                  "both",
                                            "--perf-models", "gpt", "--perf-precisions", "fp8_rowwise"))
    assert (s.models, s.precisions, s.compile) == (("gpt",), ("fp8_rowwise",), (False, True))
    # the other tiers still run eager cells unless told
    assert plugin_session.perf_settings_of(configure("--perf-device", "cuda:0")).compile == (False,)


def test_cuda_without_a_gpu_is_still_a_usage_error():
    with pytest.raises(pytest.UsageError, match="--perf-device cuda: no CUDA device is visible"):
        configure("--perf-device", "cuda")


def test_require_gpu(fake_gpus, monkeypatch):
    assert configure("--perf-device", "cuda:0", "--perf-require-gpu")
    with pytest.raises(pytest.UsageError, match="--perf-require-gpu: --perf-device cpu"):
        configure("--perf-device", "cpu", "--perf-require-gpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(pytest.UsageError, match="--perf-require-gpu: no CUDA device is visible"):
        configure("--perf-require-gpu")


def test_benchmark_disable_with_json_is_a_usage_error():
    with pytest.raises(pytest.UsageError, match="--benchmark-disable with --benchmark-json out.json"):
        configure(benchmark_disable=True, benchmark_json=Path("out.json"))
    configure(benchmark_disable=True)
    configure(benchmark_json=Path("out.json"))


def _doc(entries) -> str:
    return json.dumps({"schema_version": 1, "gpu": "NVIDIA H100 80GB HBM3", "entries": entries})


BROKEN_FILES = {
    "malformed": ('[1, 2]', "<top level>"),
    "truncated": ('{"schema_version": 1, "gpu": "g", "entr', "<file>"),
    "schema 2": ('{"schema_version": 2, "gpu": "g", "entries": {}}', "schema_version"),
    "schema 99": ('{"schema_version": 99, "gpu": "g", "entries": {}}', "schema_version"),
    "empty": ("", "<file>"),
    "nan speedup": (_doc({"test_speed[mlp-fp16]": {"figures": {"speedup": float("nan")}}}),
                    "entries.test_speed[mlp-fp16].figures.speedup"),
    "missing speedup": (_doc({"test_speed[mlp-fp16]": {"figures": {"noise": 0.01}}}),
                        "entries.test_speed[mlp-fp16].figures.speedup"),
    "null recorded": (_doc({"test_speed[mlp-fp16]": {"figures": {"speedup": 2.0}, "recorded": None}}),
                      "entries.test_speed[mlp-fp16].recorded"),
    "key twice": ('{"schema_version": 1, "gpu": "g", "entries": {}, "entries": {}}', "entries"),
}


@pytest.mark.parametrize("kind", list(BROKEN_FILES))
@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "cuda"])
def test_a_broken_baseline_file_stops_the_run_on_every_device(tmp_path, kind, gpu, request):
    if gpu:
        request.getfixturevalue("fake_gpus")
    text, field = BROKEN_FILES[kind]
    # on CUDA another GPU's file too: no file may sit broken until a card of its kind comes along
    path = tmp_path / "tesla-t4.json"
    path.write_text(text)
    with pytest.raises(pytest.UsageError) as info:
        configure("--perf-baseline-dir", str(tmp_path))
    assert f"baseline file {path}: field {field!r}" in str(info.value)
    assert path.read_text() == text, "a broken file must never be rewritten"


def test_the_committed_baselines_pass_the_configure_check(fake_gpus):
    configure()
    configure("--perf-device", "cpu")


def test_recording_on_the_cpu_is_a_usage_error(tmp_path):
    with pytest.raises(pytest.UsageError, match="--perf-update-baselines: the CPU smoke pass records nothing"):
        configure("--perf-update-baselines", "--perf-baseline-dir", str(tmp_path))


def test_recording_into_a_folder_that_cannot_be_written_fails_before_measuring(tmp_path, fake_gpus, monkeypatch):
    configure("--perf-device", "cuda:0", "--perf-update-baselines", "--perf-baseline-dir", str(tmp_path / "new"))
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(outputs, "unwritable_reason",
                        lambda path: f"cannot create a file in {path.parent}: Permission denied")
    with pytest.raises(pytest.UsageError) as info:
        configure("--perf-device", "cuda:0", "--perf-update-baselines", "--perf-baseline-dir", str(locked))
    assert str(info.value) == (f"--perf-update-baselines: cannot create a file in {locked}: Permission denied; "
                               "nothing was measured")


def test_the_cpu_smoke_pass_says_so(fake_gpus, monkeypatch):
    class Reporter:
        def __init__(self):
            self.lines: list[str] = []

        def write_line(self, line, **markup):
            self.lines.append(line)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    config = configure()
    expected = "ampbench: CPU smoke pass: nothing is held against baselines (no CUDA device visible)"
    assert plugin_session.pytest_report_header(config) == [expected]
    reporter = Reporter()
    plugin_session.pytest_terminal_summary(reporter, 0, config)
    assert reporter.lines == [expected]

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    config = configure("--perf-device", "cuda:0")
    assert plugin_session.pytest_report_header(config) == []
    reporter = Reporter()
    plugin_session.pytest_terminal_summary(reporter, 0, config)
    assert reporter.lines == []


def test_the_smoke_pass_is_announced_in_a_real_run():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_speed.py", "--collect-only", "-p", "no:cacheprovider",
         "--perf-models", "mlp", "--perf-precisions", "fp32"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # once in the header, once in the summary
    assert result.stdout.count("CPU smoke pass: nothing is held against baselines") == 2, result.stdout


def test_a_broken_baseline_stops_a_real_cpu_run(tmp_path):
    (tmp_path / "nvidia-h100-80gb-hbm3.json").write_text(
        _doc({"test_speed[mlp-amp_fp16]": {"figures": {"speedup": float("nan")}}}))
    result = run_pytest("--perf-baseline-dir", str(tmp_path))
    assert result.returncode == 4, result.stdout + result.stderr
    assert ("field 'entries.test_speed[mlp-amp_fp16].figures.speedup': NaN is not a finite positive number"
            in result.stderr), result.stderr
