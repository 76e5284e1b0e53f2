"""Bad input on the command line: usage errors that name the flag and list what is valid, the cells a
run collects, and each option's validator."""

import argparse
import subprocess
import sys
import weakref

import pytest
import torch

from ampbench.device import catch_oom
from perf_options import ROOT, option_parser, run_pytest, usage_error


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
        (["--benchmark-disable", "--benchmark-json", "out.json"],
         ["--benchmark-disable with --benchmark-json out.json"]),
        (["--perf-world-size", "0"], ["--perf-world-size: must lie in [1, 1024]"]),
        (["--perf-world-size", "two"], ["--perf-world-size: expects an int"]),
        # on the CPU no more gloo processes than cores: more take turns on them and time out
        (["--perf-world-size", "1024"], ["--perf-world-size 1024: only ", "CPU"]),
        # a name given twice would run its cells twice, under ids ending _0 and _1 that match no baseline
        (["--perf-models", "mlp,gpt,mlp"], ["--perf-models: model 'mlp' named more than once"]),
        (["--perf-precisions", "fp32,bf16,bf16"], ["--perf-precisions: precision mode 'bf16' named more than once"]),
        # found when the run starts, not as a collection error of the loss-scaling tests
        (["--loss-scaler", "nosuch.module:Foo"],
         ["--loss-scaler: loss scaler 'nosuch.module:Foo': cannot import module"]),
        (["--loss-scaler", "torch.amp:NoSuchScaler"],
         ["--loss-scaler: loss scaler", "has no attribute 'NoSuchScaler'"]),
        # a callable that is no scaler: said with what a scaler must be, not as a TypeError in each test
        (["--loss-scaler", "os:getcwd"],
         ["--loss-scaler: loss scaler 'os:getcwd': calling it as the tests do failed (TypeError",
          "a loss scaler is a callable that takes torch.amp.GradScaler's keyword arguments"]),
        (["--loss-scaler", "builtins:dict"],
         ["--loss-scaler: loss scaler 'builtins:dict': it returns a dict, without scale, unscale_, step, state_dict",
          "e.g. torch.amp:GradScaler or ampbench.loss_scaler:LossScaler"]),
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
        "test_speed[mlp-fp32]", "test_speed[mlp-amp_bf16]", "test_speed[resnet50-fp32]",
        "test_speed[resnet50-amp_bf16]",
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




def parse_error(*args: str) -> str:
    parser, _ = option_parser()
    with pytest.raises(argparse.ArgumentError) as info:
        parser.parse_args(list(args))
    return str(info.value)


def float_options() -> list[str]:
    _, options = option_parser()
    return [flag for flag, kw in options.items() if getattr(kw.get("type"), "kind", None) is float]


def test_the_float_options_are_found():
    assert set(float_options()) == {"--perf-tolerance", "--perf-block-seconds", "--perf-memory-cap",
                                   "--perf-memory-limit", "--perf-time-budget"}


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
