"""Which precision modes run on the GPUs users' CI runs on, and what a skip says where one cannot: each
card's compute capability mocked on a machine without CUDA (``device.CAPABILITIES``), as docs/design.md's
table of GPUs states it."""

from __future__ import annotations

import pytest
import torch

from ampbench import device as devices
from ampbench import fp8
from ampbench.modes import MODES

# design.md's table: a card of each capability, and the modes that skip on it (torchao installed)
CARDS = {
    "Tesla T4": ((7, 5), {"tf32", "amp_bf16", "bf16", "fp8_tensorwise", "fp8_rowwise"}),
    "A100": ((8, 0), {"fp8_tensorwise", "fp8_rowwise"}),
    "A10G": ((8, 6), {"fp8_tensorwise", "fp8_rowwise"}),
    "L4": ((8, 9), set()),
    "H100": ((9, 0), set()),
}
# what a skip names, by the need the card lacks
NEEDS = {"tf32": "TF32 needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer",
         "bf16": "bf16 needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer",
         "fp8": "fp8 tensor cores need an NVIDIA GPU of compute capability 8.9 (Ada, Hopper) or newer"}


@pytest.fixture
def card(monkeypatch):
    """A CUDA device of the named card's capability, torchao usable."""

    def of(name: str) -> torch.device:
        monkeypatch.setattr(devices, "_capability", lambda d: CARDS[name][0])
        monkeypatch.setattr(devices, "device_name", lambda d: name)
        monkeypatch.setattr(fp8, "torchao_problem", lambda: None)
        return torch.device("cuda", 0)

    return of


@pytest.mark.parametrize("name", list(CARDS))
def test_each_card_runs_the_modes_its_capability_allows(card, name):
    device = card(name)
    skipped = {mode.name for mode in MODES.values() if devices.unsupported_reason(mode, device)}
    assert skipped == CARDS[name][1]


@pytest.mark.parametrize("name", list(CARDS))
def test_a_skip_names_the_mode_the_card_what_it_needs_and_what_was_found(card, name):
    device = card(name)
    major, minor = CARDS[name][0]
    for mode_name in CARDS[name][1]:
        mode = MODES[mode_name]
        reason = devices.unsupported_reason(mode, device)
        assert reason is not None and reason.startswith(f"{mode_name} on {name}: ")
        for need in mode.needs:
            if need in NEEDS and not devices.CAPABILITIES[need].check(device):
                assert NEEDS[need] in reason
        if "fp8" in mode.needs:
            assert f"found compute capability {major}.{minor}" in reason


def test_fp16_runs_on_every_card_of_the_table_and_fp32_needs_nothing(card):
    for name in CARDS:
        device = card(name)
        assert devices.unsupported_reason(MODES["amp_fp16"], device) is None
        assert devices.unsupported_reason(MODES["fp32"], device) is None
