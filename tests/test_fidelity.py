"""`ampbench fidelity` on the CPU: the cells it accepts, the plain loop it times, and its exit status."""

from __future__ import annotations

import re

import pytest
import torch

from ampbench.cli import fidelity, main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from ampbench.models import get_model
from ampbench.stats import SpeedupEstimate

CPU = torch.device("cpu")


def test_cells_parse_and_the_default_cells_are_valid():
    assert fidelity.parse_cell("gpt:amp_fp16") == ("gpt", "amp_fp16")
    assert all(fidelity.parse_cell(f"{m}:{p}") == (m, p) for m, p in fidelity.DEFAULT_CELLS)
    assert set(fidelity.AUTOCAST_MODES) == {"amp_fp16", "amp_bf16"}


@pytest.mark.parametrize("text, expected", [
    ("resnet50", "is not MODEL:MODE"),
    ("resnet51:amp_bf16", "unknown model 'resnet51'"),
    ("resnet50:fp16", "the plain loop runs the autocast modes only (amp_fp16, amp_bf16)"),
])
def test_bad_cells_say_what_is_wrong(text, expected, capsys):
    with pytest.raises(fidelity.FidelityError, match=re.escape(expected)):
        fidelity.parse_cell(text)
    assert main(["fidelity", "--device", "cpu", text]) == EXIT_BAD_INPUT
    assert expected in capsys.readouterr().err


def test_plain_loop_really_trains_in_fp16():
    loop = fidelity._PlainLoop(get_model("mlp"), CPU, True, torch.float16, good_practice=True)
    before = [p.detach().clone() for p in loop.model.parameters()]
    for _ in range(6):
        loop.step()
    assert all(not torch.equal(a, p) for a, p in zip(before, loop.model.parameters())), "a step left weights alone"
    assert loop.scaler.is_enabled() and 0 < loop.scaler.get_scale() < float("inf")
    assert loop.block() > 0 and loop.steps == 6 + fidelity.PLAIN_STEPS


def _row(difference: float) -> fidelity.FidelityRow:
    est = SpeedupEstimate(2.0 * (1 + difference), 1.9, 2.2, 12, 0.99)
    return fidelity.FidelityRow("resnet50", "amp_bf16", (est,), (2.0,))


@pytest.mark.parametrize("difference, target, status", [(0.02, 0.03, EXIT_OK), (-0.05, 0.03, EXIT_REGRESSION),
                                                        (0.05, 0.1, EXIT_OK)])
def test_exit_status_on_a_gpu_follows_the_worst_difference(monkeypatch, capsys, difference, target, status):
    # the check's figures are made up; the device is a GPU by name only, so that the target is held
    monkeypatch.setattr(fidelity, "resolve", lambda name, flag: torch.device("cuda"))
    monkeypatch.setattr(fidelity, "configure_backends", lambda dev, cudnn_benchmark=False: None)
    monkeypatch.setattr(fidelity, "fidelity_rows", lambda cells, device, smoke, repeats: iter([_row(difference)]))
    assert main(["fidelity", "--target", str(target)]) == status
    out = capsys.readouterr().out
    assert f"difference {difference:+.2%}" in out and f"worst |difference| {abs(difference):.2%}" in out
    assert f"(target: within {target:.0%})" in out and "smoke" not in out


def test_a_smoke_run_says_its_differences_are_no_finding_and_exits_0(monkeypatch, capsys):
    monkeypatch.setattr(fidelity, "fidelity_rows", lambda cells, device, smoke, repeats: iter([_row(-0.25)]))
    assert main(["fidelity", "--device", "cpu", "--force"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "say nothing about a GPU and no difference fails the check" in out
    assert "worst |difference| 25.00% (not checked on a smoke run)" in out


def test_a_real_check_on_the_cpu(capsys):
    status = main(["fidelity", "--device", "cpu", "--force", "--repeats", "1", "--naive", "mlp:amp_bf16"])
    out = capsys.readouterr().out
    assert "smoke shapes" in out
    row = re.search(r"fidelity mlp +amp_bf16 +harness ([\d.]+)x \(.*intervals \[([\d.]+), ([\d.]+)\]\) "
                    r"plain ([\d.]+)x .* difference ([+-][\d.]+)%", out)
    assert row, out
    harness, low, high, plain, difference = map(float, row.groups())
    assert low <= harness <= high and plain > 0
    # both speedups are printed to 3 decimals: a ratio far from 1 (a loaded CPU) carries their rounding
    rounding = 100 * (harness / plain) * (0.0005 / harness + 0.0005 / plain)
    assert difference == pytest.approx(100 * (harness / plain - 1), abs=0.1 + rounding)
    assert status == EXIT_OK  # whatever the difference: the smoke shapes' figures are no finding
    assert re.search(r"practice mlp +amp_bf16 +good practice [\d.]+x, naive loop [\d.]+x", out), out



def test_without_cuda_it_stops_at_once_unless_forced(monkeypatch, capsys):
    def measured(*args):
        raise AssertionError("nothing is measured without --force")

    monkeypatch.setattr(fidelity, "fidelity_rows", measured)
    assert main(["fidelity", "--device", "cpu"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("ampbench fidelity: no CUDA device (cpu): on it the models run their smoke shapes, whose "
                          "figures say nothing about the harness on a GPU; nothing measured. --force runs")
    assert out.count("\n") == 1


def test_help_describes_the_check_and_its_exit_status(capsys):
    with pytest.raises(SystemExit) as info:
        main(["fidelity", "--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0 and "plain, hand-written training loop" in out and "--naive" in out
    assert "Exit status: 0 every difference within --target, 1 one beyond it" in " ".join(out.split())
    assert "0 without a CUDA device, where nothing is measured" in " ".join(out.split())
