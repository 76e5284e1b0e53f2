"""Which precision modes run on the GPUs users' CI runs on, and what a skip says where one cannot: each
card's compute capability mocked on a machine without CUDA (``device.CAPABILITIES``), as docs/design.md's
table of GPUs and README.md's state it."""

from __future__ import annotations

import re

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


def _readme_gpu_rows() -> list[tuple[list[tuple[int, int]], set[str]]]:
    """README.md's table of GPUs: each row's capabilities and the modes it says skip."""
    from pathlib import Path

    text = (Path(__file__).parent.parent / "README.md").read_text()
    table = text.split("### GPUs", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in table.splitlines()[2:]:
        _, _, memory, skips, _, _ = line.split("|")
        caps = [tuple(int(n) for n in c.split(".")) for c in re.findall(r"\b(\d\.\d)\b,", memory)]
        named = set(re.findall(r"[a-z0-9_]+", skips.split(";")[0]))
        skipped = {m for m in MODES if m in named or (m.startswith("fp8_") and "fp8" in named)}
        rows.append((caps, skipped))
    return rows


def test_the_readmes_table_of_gpus_says_what_each_capability_skips(card, monkeypatch):
    rows = _readme_gpu_rows()
    assert len(rows) >= 4 and {c for caps, _ in rows for c in caps} >= {(7, 5), (8, 0), (8, 6), (8, 9), (9, 0)}
    for caps, skipped in rows:
        for cap in caps:
            device = card("H100")
            monkeypatch.setattr(devices, "_capability", lambda d, cap=cap: cap)
            found = {mode.name for mode in MODES.values() if devices.unsupported_reason(mode, device)}
            assert found == skipped, f"README.md's row for {cap}: says {sorted(skipped)} skip, the code {sorted(found)}"
