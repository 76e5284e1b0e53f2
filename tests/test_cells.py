"""Which cells a test runs (ampbench.plugin.parametrize), without starting pytest: the tiers, the marker's keywords
and what the user named. tests/test_options.py checks the same through real collections."""

from dataclasses import replace
from pathlib import Path

import torch

from ampbench.modes import MODES
from ampbench.plugin.options import tier_models
from ampbench.plugin.parametrize import cells_for
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


def test_a_marker_gives_a_test_the_models_of_its_kind_and_its_quick_ones():
    marker = {"kind": "convergence"}
    assert {v[0] for v in cells_for(GPU, marker, None, None, False).values} == {"mnist_cnn"}
    assert {v[0] for v in cells_for(replace(GPU, tier="full"), marker, None, None, False).values} == {
        "mnist_cnn", "wide_resnet28_10"}
    # --perf-models narrows a test's own models to the ones it names
    named = cells_for(replace(GPU, models=("wide_resnet28_10",)), marker, ("wide_resnet28_10",), None, False)
    assert {v[0] for v in named.values} == {"wide_resnet28_10"}


def own_models(marker: dict, tier: str, device: str) -> list[str]:
    """The models of a test with `marker` in `tier` on `device`, where --perf-models names none."""
    from ampbench.settings import COMPILE_CHOICES, TIERS

    row = TIERS[tier]
    s = replace(GPU, device=torch.device(device), tier=tier, models=tier_models(row, device == "cpu"),
                precisions=row.modes or tuple(MODES), compile=COMPILE_CHOICES[row.compile])
    return list(dict.fromkeys(v[0] for v in cells_for(s, marker, None, None, False).values))


# (tier, device) -> models, as the tests' own model lists selected them before ModelSpec held them
CONVERGENCE = {("quick", "cuda"): ["mnist_cnn"], ("full", "cuda"): ["mnist_cnn", "wide_resnet28_10"],
               ("compile", "cuda"): ["mnist_cnn"], ("quick", "cpu"): ["mnist_cnn"], ("full", "cpu"): ["mnist_cnn"],
               ("compile", "cpu"): ["mnist_cnn"]}
INPUT_PIPELINE = {("quick", "cuda"): ["wide_resnet28_10"], ("full", "cuda"): ["wide_resnet28_10", "dpn26", "dpn92"],
                  ("compile", "cuda"): [], ("quick", "cpu"): ["wide_resnet28_10"],
                  ("full", "cpu"): ["wide_resnet28_10", "dpn26", "dpn92"], ("compile", "cpu"): []}


def test_the_kinds_select_the_models_of_each_tier_and_device():
    for (tier, device), expected in CONVERGENCE.items():
        assert own_models({"kind": "convergence"}, tier, device) == expected, (tier, device)
    for (tier, device), expected in INPUT_PIPELINE.items():
        assert own_models({"kind": "input_pipeline", "tiered": True}, tier, device) == expected, (tier, device)


def test_a_model_registered_from_outside_joins_the_tests_of_its_kinds(monkeypatch):
    from dataclasses import replace as copy

    from ampbench import models

    extra = copy(models.get_model("wide_resnet28_10"), name="wrn_extra", tier="full", convergence=("full", "cpu_smoke"),
                 input_pipeline=("full",), in_compile_tier=True)
    monkeypatch.setitem(models.REGISTRY, extra.name, extra)
    assert own_models({"kind": "convergence"}, "quick", "cpu") == ["mnist_cnn", "wrn_extra"]
    assert own_models({"kind": "convergence"}, "quick", "cuda") == ["mnist_cnn"]
    assert own_models({"kind": "input_pipeline", "tiered": True}, "full", "cuda") == [
        "wide_resnet28_10", "dpn26", "dpn92", "wrn_extra"]
    assert (own_models({"kind": "input_pipeline", "tiered": True}, "full", "cpu")
            == ["wide_resnet28_10", "dpn26", "dpn92"])
    assert own_models({}, "compile", "cuda") == []  # no compile axis: speed's cells are test_speed's
    assert models.model_names("compile") == ["resnet50", "gpt", "llama", "wrn_extra"]  # the registry's order
    assert "wrn_extra" not in models.model_names("quick")


def test_a_kind_names_only_known_runs_and_fields():
    from dataclasses import replace as copy

    import pytest

    from ampbench import models
    from ampbench.models.spec import RUNS
    from ampbench.settings import TIERS

    assert RUNS == (*TIERS, "cpu_smoke"), "a run per tier, and the CPU smoke pass"
    with pytest.raises(ValueError, match="convergence names unknown runs \\['nightly'\\]"):
        copy(models.get_model("mlp"), convergence=("nightly",))
    with pytest.raises(KeyError, match="unknown cell kind 'memory'"):
        cells_for(GPU, {"kind": "memory"}, None, None, False)


def test_the_distributed_fields_select_the_distributed_default_models():
    from ampbench import models
    from ampbench.distributed.variants import default_cells

    assert models.kind_models("distributed", "quick") == ["resnet50", "gpt"]
    assert models.kind_models("distributed", "full") == ["resnet50", "gpt", "llama"]
    assert models.kind_models("distributed", "cpu_smoke") == ["mlp"]
    for tier in ("quick", "full"):
        assert tuple(models.kind_models("distributed", tier)) == default_cells(torch.device("cuda"), tier)[0]
        assert tuple(models.kind_models("distributed", "cpu_smoke")) == default_cells(torch.device("cpu"), tier)[0]
    assert default_cells(torch.device("cuda"), "compile")[0] == ("resnet50", "gpt"), "collected as the quick tier"


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
    convergence = {"kind": "convergence"}
    assert cells_for(s, convergence, None, None, has_axis=False).ids == ["mnist_cnn-fp8_tensorwise"]
    assert cells_for(s, {}, None, None, has_axis=True).ids == [
        "resnet50-amp_bf16-compiled", "resnet50-fp8_tensorwise", "gpt-amp_bf16-compiled", "gpt-fp8_tensorwise"]


def test_a_new_always_compiled_row_joins_the_compile_tier_by_its_fields(monkeypatch):
    """Adding a mode takes its row: the compile tier's modes are the rows that always compile and the
    modes they are timed against, read off the table, not a list of names."""
    from dataclasses import replace as changed

    from ampbench import settings
    from ampbench.modes import MODES as ROWS

    assert settings.TIERS["compile"].modes == ("amp_bf16", "fp8_tensorwise", "fp8_rowwise")
    monkeypatch.setitem(ROWS, "fp8_blockwise", changed(ROWS["fp8_rowwise"], name="fp8_blockwise"))
    assert settings._always_compiled_and_their_versus() == ("amp_bf16", "fp8_tensorwise",
                                                            "fp8_rowwise", "fp8_blockwise")
