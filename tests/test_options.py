"""Bad input on the command line: usage errors that name the flag and list what is valid."""

import argparse
import json
import subprocess
import sys
import weakref
from pathlib import Path

import pytest
import pytest_benchmark.plugin
import torch

from ampbench.files import write as outputs
from ampbench.plugin import checks as plugin_checks
from ampbench.plugin import distributed as plugin_distributed
from ampbench.plugin import options as plugin_options
from ampbench.plugin import session as plugin_session
from ampbench.device import catch_oom

ROOT = Path(__file__).parent.parent


def run_pytest(*args):
    return subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_speed.py", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--perf-models", "resnet51"], ["--perf-models: unknown model 'resnet51'", "valid models: mlp,", "resnet50"]),
        (["--perf-precisions", "fp8"], ["--perf-precisions: unknown precision mode 'fp8'", "amp_bf16"]),
        (["--perf-tolerance", "2"], ["--perf-tolerance: must lie in (0.0, 0.9]"]),
        (["--perf-tolerance", "nan"], ["--perf-tolerance: must be a finite number, got nan"]),
        (["--perf-rounds", "4"], ["--perf-rounds: must lie in [5, 1000]"]),
        (["--perf-tier", "huge"], ["--perf-tier", "invalid choice", "quick"]),
        (["--perf-gate", "gpu"], ["--perf-gate", "invalid choice", "'device'"]),
        (["--perf-device", "tpu"], ["--perf-device"]),
        (["--loss-scaler", "torch.amp.GradScaler"], ["--loss-scaler: expects MODULE:CALLABLE"]),
        (["--perf-block-seconds", "0"], ["--perf-block-seconds: must lie in (0.0, 10.0]"]),
        (["--perf-block-seconds", "fast"], ["--perf-block-seconds: expects a float"]),
        (["--perf-cudnn-benchmark", "maybe"], ["--perf-cudnn-benchmark", "invalid choice", "'on'"]),
        (["--perf-require-gpu"], ["--perf-require-gpu: no CUDA device is visible"]),
        (["--perf-update-baselines"], ["--perf-update-baselines: the CPU smoke pass records nothing"]),
        (["--benchmark-disable", "--benchmark-json", "out.json"], ["--benchmark-disable with --benchmark-json out.json"]),
        (["--perf-world-size", "0"], ["--perf-world-size: must lie in [1, 1024]"]),
        (["--perf-world-size", "two"], ["--perf-world-size: expects an int"]),
        # on the CPU no more gloo processes than cores: more take turns on them and time out
        (["--perf-world-size", "1024"], ["--perf-world-size 1024: only ", "CPU"]),
        # a name given twice would run its cells twice, under ids ending _0 and _1 that match no baseline
        (["--perf-models", "mlp,gpt,mlp"], ["--perf-models: model 'mlp' named more than once"]),
        (["--perf-precisions", "fp32,bf16,bf16"], ["--perf-precisions: precision mode 'bf16' named more than once"]),
        # found when the run starts, not as a collection error of the loss-scaling tests
        (["--loss-scaler", "nosuch.module:Foo"], ["--loss-scaler: loss scaler 'nosuch.module:Foo': cannot import module"]),
        (["--loss-scaler", "torch.amp:NoSuchScaler"], ["--loss-scaler: loss scaler", "has no attribute 'NoSuchScaler'"]),
    ],
)
def test_usage_errors(args, expected):
    message = usage_error(*args)
    for part in expected:
        assert part in message, message
    assert message.count(args[0]) == 1, f"{args[0]} named more than once: {message}"


# one of each way a usage error reaches pytest (a type= function's message after argparse's own prefix,
# argparse's choices, a check at configure time, pytest-benchmark's options): each start of pytest
# imports torch, so the in-process messages above stand for the rest
@pytest.mark.parametrize("args", [
    ["--perf-models", "resnet51"],
    ["--perf-tier", "huge"],
    ["--perf-update-baselines"],
    ["--benchmark-disable", "--benchmark-json", "out.json"],
    ["--loss-scaler", "nosuch.module:Foo"],
], ids=["validator", "choices", "configure", "benchmark", "loss scaler"])
def test_pytest_prints_the_usage_error_once_and_exits_4(args):
    result = run_pytest(*args)
    assert result.returncode == 4, result.stdout + result.stderr
    assert usage_error(*args) in result.stderr, result.stderr
    assert result.stderr.count(args[0]) == 1, f"{args[0]} named more than once: {result.stderr}"


def test_cells_are_model_major_with_readable_ids():
    result = run_pytest("--perf-models", "mlp,resnet50", "--perf-precisions", "fp32,amp_bf16")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line]
    assert ids == [
        "test_speed[mlp-fp32]", "test_speed[mlp-amp_bf16]", "test_speed[resnet50-fp32]", "test_speed[resnet50-amp_bf16]",
    ]


@pytest.mark.parametrize("compile_, expected", [
    ("on", ["test_speed[mlp-amp_bf16-compiled]", "test_speed[mlp-fp8_rowwise]"]),
    # eager cells first, then compiled ones, so each model's fp32 reference is built once of each kind;
    # the fp8 rows always compile, keep their own ids, and run only with the compiled cells
    ("both", ["test_speed[mlp-amp_bf16]", "test_speed[mlp-amp_bf16-compiled]", "test_speed[mlp-fp8_rowwise]"]),
])
def test_the_compile_axis_adds_compiled_cells_and_holds_the_fp8_modes_to_it(compile_, expected):
    result = run_pytest("--perf-models", "mlp", "--perf-precisions", "amp_bf16,fp8_rowwise", "--perf-compile", compile_)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line] == expected


def test_among_the_compiled_cells_amp_bf16_comes_straight_before_the_fp8_modes_timed_against_it():
    result = run_pytest("--perf-models", "mlp", "--perf-precisions", "amp_fp16,amp_bf16,bf16,fp8_tensorwise",
                        "--perf-compile", "both")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line] == [
        "test_speed[mlp-amp_fp16]", "test_speed[mlp-amp_bf16]", "test_speed[mlp-bf16]",
        "test_speed[mlp-amp_fp16-compiled]", "test_speed[mlp-bf16-compiled]", "test_speed[mlp-amp_bf16-compiled]",
        "test_speed[mlp-fp8_tensorwise]"]


def collected(*args: str) -> list[str]:
    """Every test id `pytest perf/ --collect-only` collects on the CPU with `args`."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/", "--collect-only", "-q", "-p", "no:cacheprovider",
         "--perf-device", "cpu", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_the_compile_tier_collects_compiled_cells_only():
    # on the CPU resnet50 leaves the default selection, as in every tier (a GPU run's models: below)
    assert collected("--perf-tier", "compile") == [
        "perf/test_convergence.py::test_convergence[mnist_cnn-fp8_tensorwise]",
        "perf/test_convergence.py::test_convergence[mnist_cnn-fp8_rowwise]",
        *(f"perf/test_speed.py::test_speed[{model}-{cell}]" for model in ("gpt", "llama")
          for cell in ("amp_bf16-compiled", "fp8_tensorwise", "fp8_rowwise")),
    ]
    # --perf-precisions and --perf-compile narrow or widen it as in the other tiers
    assert collected("--perf-tier", "compile", "--perf-precisions", "amp_bf16", "--perf-compile", "both") == [
        "perf/test_speed.py::test_speed[gpt-amp_bf16]", "perf/test_speed.py::test_speed[gpt-amp_bf16-compiled]",
        "perf/test_speed.py::test_speed[llama-amp_bf16]", "perf/test_speed.py::test_speed[llama-amp_bf16-compiled]",
    ]


def collected_models(*args: str) -> dict[str, list[str]]:
    """test name -> models of its fp32 cells, as `pytest perf/test_speed.py perf/test_convergence.py
    --collect-only` on the CPU collects them."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_speed.py", "perf/test_convergence.py", "--collect-only", "-q",
         "-p", "no:cacheprovider", "--perf-device", "cpu", "--perf-precisions", "fp32", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        if "::" in line and "[" in line:
            name, cell = line.split("::")[1].split("[")
            found.setdefault(name, []).append(cell.split("-")[0])
    return found


def test_the_cpu_smoke_pass_runs_a_smaller_selection_and_any_named_cell():
    assert collected_models() == {"test_speed": ["mlp", "wide_resnet28_10", "lstm_lm", "gpt"],
                                  "test_convergence": ["mnist_cnn"]}
    assert collected_models("--perf-models", "resnet50,wide_resnet28_10") == {
        "test_speed": ["resnet50", "wide_resnet28_10"], "test_convergence": ["wide_resnet28_10"]}


def test_a_test_without_cells_in_the_run_skips_saying_why_in_plain_words():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_convergence.py", "perf/test_input_pipeline.py", "-rs", "-k",
         "test_convergence or test_input_pipeline", "-p", "no:cacheprovider", "--perf-device", "cpu",
         "--perf-models", "mlp"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("no convergence cell: none of the models --perf-models names (mlp) takes part in convergence tests "
            "(those that do: mnist_cnn, wide_resnet28_10)") in result.stdout, result.stdout
    assert "no input-pipeline cell: none of the models --perf-models names (mlp)" in result.stdout
    assert "empty parameter set" not in result.stdout


def test_out_of_memory_is_described_and_its_tensors_freed():
    holder = {}

    def cell():
        big = torch.empty(1024)
        holder["ref"] = weakref.ref(big)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB\nmore detail")

    result, oom = catch_oom(cell)
    assert result is None
    assert "Tried to allocate 9.00 GiB" in oom and "more detail" not in oom and "peak memory" in oom
    assert holder["ref"]() is None, "the failed cell's tensors are still referenced after the OOM"


# ---------------------------------------------------------------------------------------------------
# the option group in-process: the plugin's own options on a bare argparse parser, each bad value at once


def option_parser() -> tuple[argparse.ArgumentParser, dict[str, dict]]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    options: dict[str, dict] = {}

    class Group:
        @staticmethod
        def addoption(*names, **kwargs):
            options[names[0]] = kwargs
            parser.add_argument(*names, **kwargs)

    class Parser:
        @staticmethod
        def getgroup(*args, **kwargs):
            return Group

    plugin_options.pytest_addoption(Parser, None)
    return parser, options


def parse_error(*args: str) -> str:
    parser, _ = option_parser()
    with pytest.raises(argparse.ArgumentError) as info:
        parser.parse_args(list(args))
    return str(info.value)


def float_options() -> list[str]:
    _, options = option_parser()
    return [flag for flag, kw in options.items() if getattr(kw.get("type"), "kind", None) is float]


def test_the_float_options_are_found():
    assert set(float_options()) == {"--perf-tolerance", "--perf-block-seconds", "--perf-memory-cap"}


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity"])
@pytest.mark.parametrize("flag", float_options())
def test_no_float_option_takes_a_non_finite_number(flag, value):
    message = parse_error(f"{flag}={value}")  # "=": argparse takes a bare "-inf" for an option
    assert message == f"argument {flag}: must be a finite number, got {value}"


@pytest.mark.parametrize("flag", ["--perf-rounds", "--perf-loader-workers"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_integer_options_refuse_non_finite_too(flag, value):
    assert parse_error(flag, value) == f"argument {flag}: expects an int, got {value!r}"


def test_every_validator_names_its_flag_once():
    _, options = option_parser()
    bad = {"int": "x", "float": "x"}
    for flag, kw in options.items():
        if kw.get("type") is None:
            continue
        kind = getattr(kw["type"], "kind", None)
        value = bad.get(kind.__name__, "x") if kind else {"--perf-device": "tpu", "--perf-models": ",",
                                                           "--perf-precisions": ",", "--perf-loss-scaler": "x",
                                                           "--perf-baseline-dir": __file__,
                                                           "--perf-data-root": "/nonexistent",
                                                           "--perf-rdzv-id": "a b"}.get(flag, "x")
        message = parse_error(flag, value)
        assert message.count(flag) == 1, message


def test_the_tier_option_names_every_tier():
    parser, options = option_parser()
    kw = options["--perf-tier"]
    assert kw["metavar"] == "QUICK|FULL|COMPILE" and kw["help"].endswith("(default: quick)")
    assert "compile: compiled cells only" in kw["help"] and "resnet50, gpt, llama" in kw["help"]
    assert parser.parse_args(["--perf-tier", "compile"]).perf_tier == "compile"
    assert "invalid choice" in parse_error("--perf-tier", "compiled")
    assert options["--perf-compile"]["help"].endswith("(default: off; on in the compile tier)")


def test_the_gate_option():
    parser, options = option_parser()
    kw = options["--perf-gate"]
    assert kw["metavar"] == "DEVICE|WALL|BOTH" and kw["help"].endswith("(default: device)")
    assert parser.parse_args([]).perf_gate == "device"
    assert parser.parse_args(["--perf-gate", "both"]).perf_gate == "both"
    assert "invalid choice" in parse_error("--perf-gate", "gpu")


@pytest.mark.parametrize("flag, value", [("--perf-tier", "QUICK"), ("--perf-gate", "Both"), ("--perf-compile", "ON"),
                                         ("--perf-cudnn-benchmark", "Off"), ("--perf-pin-memory", "OFF")])
def test_choices_are_taken_in_any_case_as_the_metavars_show_them(flag, value):
    parser, options = option_parser()
    assert value.upper() in options[flag]["metavar"].split("|")
    assert getattr(parser.parse_args([flag, value]), flag[2:].replace("-", "_")) == value.lower()


def test_every_option_has_a_metavar_or_is_a_switch_and_tells_its_default():
    _, options = option_parser()
    for flag, kw in options.items():
        assert kw.get("action") == "store_true" or kw.get("metavar"), flag
        assert kw["help"].rstrip(")").split("(default: ")[-1] != kw["help"], f"{flag}: help tells no default"


# ---------------------------------------------------------------------------------------------------
# configure time, in-process: pytest_configure on a stand-in config, with CUDA faked where it matters


class FakeConfig:
    def __init__(self, *args: str, **extra):
        parser, _ = option_parser()
        self.option = parser.parse_args(list(args))
        self.option.help = False
        self.option.benchmark_disable = extra.get("benchmark_disable", False)
        self.option.benchmark_json = extra.get("benchmark_json")
        self.stash = pytest.Stash()
        self.pluginmanager = pytest.PytestPluginManager()  # where the summary plugin registers
        self.pluginmanager.register(pytest_benchmark.plugin, "benchmark")  # as its entry point loads it
        self.rootpath = ROOT  # where the default baselines/ is


def configure(*args: str, **extra) -> FakeConfig:
    config = FakeConfig(*args, **extra)
    plugin_checks.check_run(config)  # first, as pytest calls it (tryfirst)
    plugin_session.configure(config)
    plugin_distributed.configure_world_size(config)  # its own pytest_configure, after the settings (trylast)
    return config


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
    assert plugin_session.perf_settings_of(configure("--perf-device", "cpu")).models == tuple(m for m in quick if m != "resnet50")
    full = plugin_session.perf_settings_of(configure("--perf-device", "cpu", "--perf-tier", "full")).models
    assert "dpn92" in full and not any(m.startswith("resnet") for m in full)
    assert plugin_session.perf_settings_of(configure("--perf-device", "cpu", "--perf-models", "resnet152")).models == ("resnet152",)


def test_the_compile_tier_selects_its_models_modes_and_compiled_cells_from_its_row(fake_gpus):
    from ampbench import models
    from ampbench.settings import TIERS

    s = plugin_session.perf_settings_of(configure("--perf-device", "cuda:0", "--perf-tier", "compile"))
    assert s.models == ("resnet50", "gpt", "llama") == tuple(models.model_names("compile")) and TIERS["compile"].models is None
    assert s.precisions == ("amp_bf16", "fp8_tensorwise", "fp8_rowwise") and s.compile == (True,)
    s = plugin_session.perf_settings_of(configure("--perf-device", "cuda:0", "--perf-tier", "compile", "--perf-compile", "both",
                                            "--perf-models", "gpt", "--perf-precisions", "fp8_rowwise"))
    assert (s.models, s.precisions, s.compile) == (("gpt",), ("fp8_rowwise",), (False, True))
    # the other tiers still run eager cells unless told
    assert plugin_session.perf_settings_of(configure("--perf-device", "cuda:0")).compile == (False,)


def usage_error(*args: str) -> str:
    """What pytest reports for these arguments, found in-process: argparse's message for a bad value of
    one of the suite's options, else the UsageError that pytest_configure raises."""
    parser, _ = option_parser()
    try:
        _, unknown = parser.parse_known_args(list(args))
    except argparse.ArgumentError as exc:
        return str(exc)
    benchmark = argparse.ArgumentParser(exit_on_error=False)  # the two pytest-benchmark options checked here
    benchmark.add_argument("--benchmark-disable", action="store_true")
    benchmark.add_argument("--benchmark-json", type=Path)
    with pytest.raises(pytest.UsageError) as info:
        configure(*[a for a in args if a not in unknown], **vars(benchmark.parse_args(unknown)))
    return str(info.value)


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
