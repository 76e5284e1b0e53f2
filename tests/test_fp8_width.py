"""The fp8 width sweep: widened configs, the crossover between measured widths, a sweep's path on the
CPU (eager modes: fp8 needs a GPU of capability 8.9), and the command's bad input."""

from __future__ import annotations

import json

import pytest
import torch

from ampbench.cli import fp8_width, main
from ampbench.models import get_model
from ampbench.modes import get_mode
from ampbench.speed import sides
from ampbench.stats import SpeedupEstimate


@pytest.mark.parametrize("model", ["llama", "gpt"])
def test_widening_to_its_own_width_is_the_model(model):
    spec = get_model(model)
    rule = fp8_width.width_rule(model)
    assert fp8_width.widened(spec, rule.width_of(spec.config), smoke=False).config == spec.config
    assert rule.width_of(spec.config) in rule.widths


def test_llama_keeps_its_head_width_and_ratios():
    config = fp8_width.widened(get_model("llama"), 2048, smoke=False).config
    assert (config.dim, config.n_heads, config.n_kv_heads, config.ffn_dim) == (2048, 16, 4, 7168)
    assert (config.n_layers, config.seq_len) == (2, 1024)


def test_gpt_scales_its_heads():
    config = fp8_width.widened(get_model("gpt"), 1536, smoke=False).config
    assert (config.n_embd, config.n_head, config.n_layer) == (1536, 24, 12)


@pytest.mark.parametrize("model, width", [("llama", 1000), ("gpt", 800), ("llama", 128)])
def test_a_width_the_model_cannot_take_is_refused(model, width):
    with pytest.raises(fp8_width.WidthError, match=f"{model} width {width}"):
        fp8_width.widened(get_model(model), width, smoke=False)


def test_a_model_without_a_width_rule_is_refused():
    with pytest.raises(fp8_width.WidthError, match="no width rule for model 'resnet50'"):
        fp8_width.width_rule("resnet50")


def point(width: int, speedup: float, half: float = 0.005) -> fp8_width.WidthPoint:
    return fp8_width.WidthPoint(width, SpeedupEstimate(speedup, speedup * (1 - half), speedup * (1 + half), 8, 0.99),
                                "graph")


def test_crossover_interpolates_in_log_width_between_a_loss_and_a_gain():
    found = fp8_width.crossover([point(4096, 1.10), point(1024, 0.80), point(2048, 0.95)])
    assert (found.below.width, found.above.width) == (2048, 4096)
    # ln 0.95 -> ln 1.10 crosses 0 about a quarter of the way from 2048 to 4096 in log width
    assert 2048 < found.width < 2700
    assert "pays from width 4096" in str(found)


def test_no_crossover_where_the_points_do_not_bracket_one():
    assert fp8_width.crossover([point(1024, 0.8), point(2048, 0.9)]) is None
    assert fp8_width.crossover([point(1024, 0.8), point(2048, 1.0, half=0.02), point(4096, 1.1)]) is None
    skipped = fp8_width.WidthPoint(3072, None, None, skipped="no GPU")
    assert fp8_width.crossover([point(1024, 0.8), skipped]) is None


def test_a_width_is_measured_the_way_a_speed_cell_is():
    # on the CPU through the same calls, eager bf16 against fp32: the path, not the figure
    device = torch.device("cpu")
    policy = sides.policy_for(device, sides.DEFAULT_MIN_ROUNDS, 0.01)
    got = fp8_width.measure_width(get_model("llama"), 128, get_mode("bf16"), get_mode("fp32"), device, True, policy)
    assert got.skipped is None and got.method == "wall"
    assert got.estimate.rounds >= 8 and got.estimate.low <= got.estimate.speedup <= got.estimate.high
    assert "width   128" in fp8_width.format_point("llama", get_mode("fp8_tensorwise"), got)


def test_an_fp8_width_on_a_device_without_fp8_is_skipped_with_the_reason():
    device = torch.device("cpu")
    policy = sides.policy_for(device, sides.DEFAULT_MIN_ROUNDS, 0.01)
    got = fp8_width.measure_width(get_model("llama"), 64, get_mode("fp8_tensorwise"),
                                  get_mode("amp_bf16"), device, True, policy)
    assert got.estimate is None and "compute capability 8.9" in got.skipped
    assert "skipped: fp8_tensorwise on cpu" in fp8_width.format_point("llama", get_mode("fp8_tensorwise"), got)


@pytest.mark.parametrize("argv, says", [
    (["fp8-width", "resnet50", "--device", "cpu"], "no width rule for model 'resnet50'"),
    (["fp8-width", "nosuch", "--device", "cpu"], "unknown model 'nosuch'"),
    (["fp8-width", "llama", "--widths", "100", "--device", "cpu"], "llama width 100"),
    (["fp8-width", "llama", "--device", "cpu"], "fp8_tensorwise on cpu"),
    (["fp8-width", "llama", "--device", "tpu"], "--device tpu: not a device this suite runs on"),
])
def test_the_command_refuses_bad_input_with_the_reason(argv, says, tmp_path, capsys):
    out = tmp_path / "w.json"
    assert main(argv + ["--json", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()


def test_the_command_refuses_a_malformed_width_list(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["fp8-width", "llama", "--widths", "1024,x"])
    assert exc.value.code == 2
    assert "--widths: expects whole numbers" in capsys.readouterr().err


def test_the_json_holds_every_point(tmp_path, monkeypatch):
    points = [point(1024, 0.9), point(2048, 1.05)]
    monkeypatch.setattr(fp8_width, "sweep", lambda *a, **k: iter(points))
    monkeypatch.setattr("ampbench.device.unsupported_reason", lambda mode, device: None)
    out = tmp_path / "w.json"
    assert main(["fp8-width", "llama", "--widths", "1024,2048", "--device", "cpu", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [p["width"] for p in doc["points"]] == [1024, 2048]
    assert 1024 < doc["crossover_width"] < 2048


def test_a_width_that_runs_out_of_memory_is_skipped_and_the_sweep_goes_on(monkeypatch):
    built = []

    def prepare(spec, mode, device, smoke, policy):
        built.append(spec.smoke_config.dim)
        if spec.smoke_config.dim == 128:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.54 GiB.")
        return real(spec, mode, device, smoke, policy)

    real = sides.prepare_side
    monkeypatch.setattr(sides, "prepare_side", prepare)
    monkeypatch.setattr(fp8_width, "versus_of", lambda mode: get_mode("fp32"))
    points = list(fp8_width.sweep(get_model("llama"), (128, 64), get_mode("bf16"), torch.device("cpu"), smoke=True))
    assert points[0].estimate is None and "out of memory" in points[0].skipped and "1.54 GiB" in points[0].skipped
    assert points[1].estimate is not None and built == [128, 64, 64]
