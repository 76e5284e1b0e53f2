"""Which cells a test runs (ampbench.plugin.parametrize), without starting pytest: the tiers, the marker's keywords
and what the user named. tests/test_options.py checks the same through real collections."""

from dataclasses import replace
from pathlib import Path

import torch

from ampbench.plugin.parametrize import cells_for
from ampbench.modes import MODES
from ampbench.settings import PerfSettings

GPU = PerfSettings(
    device=torch.device("cuda", 0), models=("resnet50", "gpt"), precisions=tuple(MODES), tier="quick",
    baseline_dir=Path("baselines"), update_baselines=False, tolerance=0.005, strict=False, min_rounds=8,
    memory_cap_gib=None, data_root=None, loader_workers=4, pin_memory=True, loss_scaler="torch.amp:GradScaler",
    block_seconds=0.1, cudnn_benchmark=False, gate="device",
)
EAGER_16BIT = ["amp_fp16", "amp_bf16", "fp16_master", "fp16", "bf16"]


def modes_of(found, model: str) -> list[str]:
    return [v[1] for v in found.values if v[0] == model]


def test_the_quick_tier_leaves_full_tier_only_modes_out_where_the_marker_asks():
    tiered = cells_for(GPU, {"modes_tiered": True}, None, None, has_axis=False)
    assert modes_of(tiered, "gpt") == EAGER_16BIT
    assert tiered.ids[0] == "resnet50-amp_fp16" and tiered.argnames == ("model_name", "mode_name")
    # named modes are run as named, fp32 and TF32 included
    named = cells_for(replace(GPU, precisions=("fp32", "tf32")), {"modes_tiered": True}, None, ("fp32", "tf32"),
                      has_axis=False)
    assert modes_of(named, "gpt") == ["fp32", "tf32"]
    # the full tier runs them
    assert "fp32" in modes_of(cells_for(replace(GPU, tier="full"), {"modes_tiered": True}, None, None, False), "gpt")


def test_a_marker_gives_a_test_its_own_models_and_its_quick_ones():
    marker = {"models": ["mnist_cnn", "wide_resnet28_10"], "quick": ["mnist_cnn"]}
    assert {v[0] for v in cells_for(GPU, marker, None, None, False).values} == {"mnist_cnn"}
    assert {v[0] for v in cells_for(replace(GPU, tier="full"), marker, None, None, False).values} == {
        "mnist_cnn", "wide_resnet28_10"}
    # --perf-models narrows a test's own models to the ones it names
    named = cells_for(replace(GPU, models=("wide_resnet28_10",)), marker, ("wide_resnet28_10",), None, False)
    assert {v[0] for v in named.values} == {"wide_resnet28_10"}


def test_fp8_runs_only_where_compiled_cells_are_asked_for_or_it_is_named():
    assert not {"fp8_tensorwise", "fp8_rowwise"} & set(modes_of(cells_for(GPU, {}, None, None, True), "gpt"))
    named = cells_for(replace(GPU, precisions=("fp8_rowwise",)), {}, None, ("fp8_rowwise",), True)
    assert named.ids == ["resnet50-fp8_rowwise", "gpt-fp8_rowwise"]


def test_the_compile_axis_puts_compiled_amp_bf16_straight_before_fp8():
    s = replace(GPU, models=("gpt",), precisions=("amp_bf16", "fp8_tensorwise", "fp8_rowwise", "amp_fp16"),
                compile=(False, True))
    found = cells_for(s, {}, None, None, has_axis=True)
    assert found.argnames == ("model_name", "mode_name", "compiled_cell")
    assert found.ids == ["gpt-amp_bf16", "gpt-amp_fp16", "gpt-amp_fp16-compiled", "gpt-amp_bf16-compiled",
                         "gpt-fp8_tensorwise", "gpt-fp8_rowwise"]


def test_the_compile_tier_runs_compiled_cells_only():
    s = replace(GPU, tier="compile", precisions=("amp_bf16", "fp8_tensorwise"), compile=(True,))
    assert cells_for(s, {}, None, None, has_axis=False).values == [], "a test without the axis sits it out"
    convergence = {"models": ["mnist_cnn", "wide_resnet28_10"], "compile": ["mnist_cnn"]}
    assert cells_for(s, convergence, None, None, has_axis=False).ids == ["mnist_cnn-fp8_tensorwise"]
    assert cells_for(s, {}, None, None, has_axis=True).ids == [
        "resnet50-amp_bf16-compiled", "resnet50-fp8_tensorwise", "gpt-amp_bf16-compiled", "gpt-fp8_tensorwise"]
