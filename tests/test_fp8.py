"""The fp8 modes' CPU-side parts: torchao's pairing with torch, which Linear layers a mode converts,
the skip reasons, and (where torchao is installed) the Trainer's conversion. The numerics of torchao's
casts are property-tested in perf/test_fp8_numerics.py; the fp8 cells themselves need a GPU."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import tomllib
import torch
from torch import nn

from ampbench import device as devices
from ampbench import fp8, models
from ampbench.modes import MODES, compiled, get_mode, label, parity_mode_of
from ampbench.train import Trainer

ROOT = Path(__file__).parent.parent
FP8_MODES = [name for name, m in MODES.items() if m.fp8_recipe is not None]


def meta_model(name: str, smoke: bool = False) -> nn.Module:
    spec = models.get_model(name)
    with torch.device("meta"):
        return spec.build(spec.config_for(smoke))


# -- the mode rows ---------------------------------------------------------------------------------


def test_fp8_rows_name_what_the_trainer_needs():
    assert FP8_MODES == ["fp8_tensorwise", "fp8_rowwise"]
    for name in FP8_MODES:
        m = MODES[name]
        assert m.fp8_recipe == name.removeprefix("fp8_"), f"{name}: recipe {m.fp8_recipe}"
        assert m.module_filter in fp8.MODULE_FILTERS, f"{name}: filter {m.module_filter!r} is not in MODULE_FILTERS"
        assert m.compile and m.autocast_dtype == torch.bfloat16 and m.param_dtype == torch.float32
        assert set(m.needs) == {"fp8", "torchao"} and all(n in devices.CAPABILITIES for n in m.needs)
        assert m.peak_dtype in devices.PEAK_DTYPES
    # the modes before fp8 keep their behaviour: no conversion, no compile, held against fp32
    for m in MODES.values():
        if m.fp8_recipe is None:
            assert not m.compile and m.module_filter is None and m.parity_mode == "fp32", m.name


def test_parity_mode_is_compiled_like_the_mode():
    ref = parity_mode_of(get_mode("fp8_rowwise"))
    assert (ref.name, ref.compile, label(ref)) == ("amp_bf16", True, "amp_bf16 compiled")
    assert parity_mode_of(get_mode("amp_fp16")) == get_mode("fp32")
    assert label(get_mode("fp8_tensorwise")) == "fp8_tensorwise"  # compiled by its row: nothing to add
    assert label(compiled(get_mode("amp_fp16"), False)) == "amp_fp16"


# -- torchao's pairing with torch -------------------------------------------------------------------


@pytest.mark.parametrize("torch_version, needed", [
    ("2.11.0+cu130", "torchao 0.17 or newer"),
    ("2.12.1", "torchao 0.18 or newer"),
    ("2.14.1+cu130", "torchao 0.18 or newer"),
    ("2.10.0", "torchao 0.16"),
    ("2.9.1", "torchao 0.14 to 0.15"),
])
def test_torchao_range_for_torch(torch_version: str, needed: str):
    assert fp8.torchao_range_for(fp8.parse_version(torch_version)) == needed


@pytest.mark.parametrize("torchao_version, torch_version, problem", [
    ("0.17.0", "2.11.0+cu130", None),
    ("0.18.0", "2.14.1", None),
    ("0.19.2", "2.15.0", None),  # newer than the table: 0.18's rule, torch 2.11 or newer
    ("0.17.0", "2.14.1", "torchao 0.17.0 installed, torch 2.14.1 needs torchao 0.18 or newer"),
    ("0.16.0", "2.11.0+cu130", "torchao 0.16.0 installed, torch 2.11.0+cu130 needs torchao 0.17 or newer"),
    ("0.12.0", "2.11.0", "torchao 0.12.0 installed, torch 2.11.0 needs torchao 0.17 or newer"),
    (None, "2.11.0", 'torchao is not installed (pip install -e ".[fp8]"); torch 2.11.0 needs torchao 0.17 or newer'),
])
def test_version_problem_names_installed_and_needed(torchao_version, torch_version, problem):
    assert fp8.version_problem(torchao_version, torch_version) == problem


def test_parse_version_refuses_what_is_no_version():
    assert fp8.parse_version("0.18.0.dev20260301+cu130") == (0, 18)
    with pytest.raises(ValueError, match="cannot read a version from 'nightly'"):
        fp8.parse_version("nightly")


def test_fp8_extra_pairs_with_the_oldest_torch_the_project_takes():
    """pyproject's fp8 extra starts at the first torchao that runs with the oldest torch the project
    accepts, so pip's choice and the skip message agree."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_floor = next(re.fullmatch(r"torch>=([\d.]+)", d) for d in project["dependencies"] if d.startswith("torch>="))
    extra = project["optional-dependencies"]["fp8"]
    assert len(extra) == 1, extra
    torchao_floor = re.fullmatch(r"torchao>=([\d.]+)", extra[0])
    assert torch_floor and torchao_floor, (project["dependencies"], extra)
    needed = fp8.torchao_range_for(fp8.parse_version(torch_floor.group(1)))
    assert needed == f"torchao {torchao_floor.group(1)} or newer", (needed, extra)


# -- which Linear layers a mode converts -------------------------------------------------------------


def test_llama_converts_every_block_linear_and_keeps_its_head():
    names = fp8.converted_names(meta_model("llama"), get_mode("fp8_rowwise"))
    per_block = ["attention.wq", "attention.wk", "attention.wv", "attention.wo",
                 "feed_forward.w1", "feed_forward.w3", "feed_forward.w2"]
    assert names == [f"layers.{i}.{n}" for i in range(2) for n in per_block]
    assert fp8.output_head(meta_model("llama")) == "output"


def test_gpt_and_mnist_cnn_keep_their_heads():
    gpt = fp8.converted_names(meta_model("gpt"), get_mode("fp8_tensorwise"))
    assert len(gpt) == 4 * 12 and "lm_head" not in gpt
    assert fp8.converted_names(meta_model("mnist_cnn"), get_mode("fp8_tensorwise")) == ["fc1"]
    assert fp8.converted_names(meta_model("mlp"), get_mode("fp8_tensorwise")) == ["layers.0", "layers.1"]
    assert fp8.converted_names(meta_model("gpt"), get_mode("amp_bf16")) == []


class Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(24, 64)  # 24 does not divide by 16
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.proj(x))


def test_layers_not_divisible_by_16_stay_and_are_named():
    keep = fp8.inner_linears(Odd())
    assert not keep(Odd().proj, "proj") and not keep(Odd().head, "head")
    with pytest.raises(fp8.Unconvertible,
                       match=r"head is the output head, kept in bf16; proj \(24x64\) not divisible by 16"):
        fp8.convert(Odd(), get_mode("fp8_tensorwise"))


@pytest.mark.parametrize("name, head", [
    ("resnet50", "fc"), ("wide_resnet28_10", "linear"), ("dpn26", "linear"), ("lstm_lm", "decoder"),
])
def test_models_without_a_convertible_linear_skip_with_the_reason(name: str, head: str):
    spec = models.get_model(name)
    for mode_name in FP8_MODES:
        reason = fp8.unconvertible_reason(get_mode(mode_name), spec, spec.config)
        assert reason == (f"{mode_name} on {name}: no Linear layer to train in fp8 "
                          f"({head} is the output head, kept in bf16)")
    assert fp8.unconvertible_reason(get_mode("amp_bf16"), spec, spec.config) is None


class ConvOnly(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)


def test_a_model_without_linear_layers_says_so():
    spec = dataclasses.replace(models.get_model("mlp"), name="conv_only", build=ConvOnly)
    reason = fp8.unconvertible_reason(get_mode("fp8_rowwise"), spec, spec.config)
    assert reason == "fp8_rowwise on conv_only: no Linear layer to train in fp8 (it has no Linear layer)"


def test_trainer_refuses_a_model_with_nothing_to_convert():
    spec = models.get_model("resnet18")
    with pytest.raises(fp8.Unconvertible,
                       match=r"fp8_tensorwise: no Linear layer to train in fp8 \(fc is the output head"):
        Trainer(spec, compiled(get_mode("fp8_tensorwise"), False), torch.device("cpu"), smoke=True)


def test_a_compiled_trainer_keeps_autocasts_cache_off():
    """dynamo guards on autocast's cache setting: a compiled model traced with the cache on would be
    compiled again inside CUDA graph capture (which turns it off), where Inductor cannot compile."""
    spec = models.get_model("mlp")
    for mode, outside in ((compiled(get_mode("amp_bf16")), False), (get_mode("amp_bf16"), True)):
        trainer = Trainer(spec, mode, torch.device("cpu"), smoke=True)
        assert trainer.autocast_cache is outside, mode
        with trainer.capturing():
            assert trainer.autocast_cache is False
        assert trainer.autocast_cache is outside, f"{label(mode)}: capturing() did not restore the cache setting"


# -- device capabilities ---------------------------------------------------------------------------


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CUDA device of a chosen compute capability, on a machine without one."""

    def with_capability(cap: tuple[int, int]) -> torch.device:
        monkeypatch.setattr(devices, "_capability", lambda d: cap)
        monkeypatch.setattr(devices, "device_name", lambda d: "Fake GPU")
        return torch.device("cuda", 0)

    return with_capability


def test_fp8_skip_names_the_capability_found(fake_cuda, monkeypatch):
    monkeypatch.setattr(fp8, "torchao_problem", lambda: None)
    ampere = fake_cuda((8, 0))
    reason = devices.unsupported_reason(get_mode("fp8_rowwise"), ampere)
    assert reason == ("fp8_rowwise on Fake GPU: fp8 tensor cores need an NVIDIA GPU of compute capability 8.9 "
                      "(Ada, Hopper) or newer: found compute capability 8.0")
    assert devices.unsupported_reason(get_mode("fp8_rowwise"), fake_cuda((9, 0))) is None


def test_fp8_skip_names_the_torchao_installed_and_needed(fake_cuda, monkeypatch):
    monkeypatch.setattr(fp8, "torchao_problem",
                        lambda: "torchao 0.16.0 installed, torch 2.14.1 needs torchao 0.18 or newer")
    reason = devices.unsupported_reason(get_mode("fp8_tensorwise"), fake_cuda((9, 0)))
    assert reason == ("fp8_tensorwise on Fake GPU: fp8 training runs through torchao's float8: torchao 0.16.0 "
                      "installed, torch 2.14.1 needs torchao 0.18 or newer")


def test_on_the_cpu_fp8_skips_whatever_torchao_is():
    reason = devices.unsupported_reason(get_mode("fp8_tensorwise"), torch.device("cpu"))
    assert reason is not None and "found no CUDA device (cpu)" in reason
    assert devices.unsupported_reason(get_mode("amp_bf16"), torch.device("cpu")) is None


def test_software_record_names_compiler_and_torchao():
    info = devices.machine_info(torch.device("cpu"))
    assert info["inductor"] == torch.__version__
    assert info["torchao"] == fp8.installed_torchao()
    assert "triton" in info


# -- the conversion itself, where torchao is installed ---------------------------------------------

needs_torchao = pytest.mark.skipif(fp8.torchao_problem() is not None, reason=f"{fp8.torchao_problem()}")


def cpu_matmul_problem(recipe: str) -> str | None:
    """Why this torch's CPU fp8 matmul cannot take `recipe`'s scales, or None: torch 2.11's CPU
    torch._scaled_mm takes per-tensor scales only (2.14's takes per-row ones too), and the rowwise
    recipe scales per row."""
    from torchao.float8 import Float8LinearConfig, ScalingGranularity

    if (Float8LinearConfig.from_recipe_name(recipe).cast_config_input.scaling_granularity
        is ScalingGranularity.TENSORWISE):
        return None
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16)
    except RuntimeError as exc:
        return f"torch {torch.__version__}'s CPU fp8 matmul refuses per-row scales: {str(exc).splitlines()[0][:160]}"
    return None


@needs_torchao
@pytest.mark.parametrize("mode_name", FP8_MODES)
def test_trainer_converts_the_filtered_layers(mode_name: str):
    """The Trainer swaps exactly the filtered layers for torchao's Float8Linear; the head stays."""
    from torchao.float8.float8_linear import Float8Linear

    trainer = Trainer(models.get_model("llama"), compiled(get_mode(mode_name), False), torch.device("cpu"), smoke=True)
    swapped = [name for name, m in trainer.model.named_modules() if isinstance(m, Float8Linear)]
    assert swapped == trainer.fp8_layers == fp8.converted_names(meta_model("llama", smoke=True), get_mode(mode_name))
    assert type(trainer.model.output) is nn.Linear, "the output head must stay a plain Linear"
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert all(id(p) in optimized for p in trainer.model.parameters()), ("a converted layer's weight escaped the "
                                                                         "optimizer")


@needs_torchao
@pytest.mark.parametrize("mode_name", FP8_MODES)
def test_trainer_trains_converted_layers(mode_name: str):
    """Two eager training steps move a converted layer's weight (compiling on a CPU runner would take
    minutes; fp8 matmuls run on the CPU through torch._scaled_mm)."""
    problem = cpu_matmul_problem(get_mode(mode_name).fp8_recipe)
    if problem:
        pytest.skip(problem)
    trainer = Trainer(models.get_model("llama"), compiled(get_mode(mode_name), False), torch.device("cpu"), smoke=True)
    before = trainer.model.layers[0].feed_forward.w1.weight.detach().clone()
    loss = trainer.run(2)
    assert torch.isfinite(loss), f"llama {mode_name}: loss {loss.item()} after two steps"
    assert not torch.equal(before, trainer.model.layers[0].feed_forward.w1.weight), (
        f"llama {mode_name}: the optimizer did not move a converted layer's weight")
