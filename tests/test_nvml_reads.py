"""NVML read through a fake ``pynvml`` (``ampbench.nvml``): which calls a card answers and what is said where
nvidia-ml-py is missing; the reads the hold's queue takes once the card began a block and after it ended
(``ampbench.speed.held``), and the timer that keeps each side's per round."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import ampbench.speed.held as held
from ampbench import nvml
from ampbench.gate.conditions import CONDITIONS, round_flag
from ampbench.gate.measurement import Rounds
from ampbench.nvml import BlockConditions, Reading
from ampbench.speed.timing import PairedTimer
from tests.conditions_strategies import POWER_CAP
from tests.conditions_strategies import block_read as _block

# -- NVML through a fake pynvml ----------------------------------------------------------------------------

def _fake_pynvml(event_reasons: bool = True, energy: bool = True) -> types.SimpleNamespace:
    counter = iter(range(1000, 10**9, 1000))

    def no_energy(h):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0, inits=[],
        nvmlInit=lambda: fake.inits.append(1),
        nvmlDeviceGetHandleByUUID=lambda uuid: ("uuid", uuid),
        nvmlDeviceGetHandleByIndex=lambda i: ("index", i),
        nvmlDeviceGetClockInfo=lambda h, which: (1980, 2619)[which],
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: POWER_CAP,
        nvmlDeviceGetTemperature=lambda h, which: 61,
        nvmlDeviceGetPowerUsage=lambda h: 512_000,
        nvmlDeviceGetTotalEnergyConsumption=(lambda h: next(counter)) if energy else no_energy)
    if event_reasons:
        fake.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 0x1
    return fake


def test_nvml_is_read_through_the_module_given_by_the_cards_uuid():
    reader, why = nvml.reader_for("1234-abcd", 0, nvml=_fake_pynvml())
    assert why is None and reader.handle == ("uuid", "GPU-1234-abcd")
    first, second = reader.read(), reader.read()
    assert (first.sm_mhz, first.mem_mhz, first.reasons, first.temp_c, first.power_w) == (1980, 2619, 0x1, 61, 512.0)
    assert second.energy_mj > first.energy_mj


def test_an_older_nvml_gives_the_throttle_reasons_and_a_card_without_a_counter_no_energy():
    reader, _ = nvml.reader_for(None, 3, nvml=_fake_pynvml(event_reasons=False, energy=False))
    reading = reader.read()
    assert reader.handle == ("index", 3) and reading.reasons == POWER_CAP and reading.energy_mj is None


def test_without_nvidia_ml_py_nothing_is_read_and_the_reason_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an import of it fails
    monkeypatch.setattr(nvml, "_OPEN", {})
    reader, why = nvml.reader_for("x", 0)
    assert reader is None and "nvidia-ml-py is not installed" in why


# -- the reads around a held block -------------------------------------------------------------------------

class _Event:
    """A CUDA event the fake card reaches once the host has asked `waits` more times."""

    log: list[str] = []
    waits = 2

    def __init__(self, enable_timing: bool = True):
        self.asked = 0

    def record(self) -> None:
        pass

    def query(self) -> bool:
        self.asked += 1
        reached = self.asked > _Event.waits
        _Event.log.append(f"query {reached}")
        return reached

    def synchronize(self) -> None:
        _Event.log.append("synchronize")

    def elapsed_time(self, other: "_Event") -> float:
        return 100.0


class _Reader:
    def __init__(self):
        self.energy = 0.0

    def read(self) -> Reading:
        self.energy += 1000.0
        _Event.log.append("read")
        return Reading(1980.0, 2619.0, 0, 60.0, 500.0, self.energy)


def test_a_held_block_is_read_once_the_card_began_it_and_after_it_ended(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(held, "spin", lambda device, seconds: None)
    _Event.log, _Event.waits = [], 2
    queue = held.BlockQueue(torch.device("cuda"))
    queue.reader = _Reader()
    queue.replays(lambda n: _Event.log.append(f"launch {n}"), 8, lambda n: pytest.fail("no fallback"), chunk=4)
    # per chunk: launched whole, the card still holding; then waited for until it began, read, synchronized, read
    chunk = ["launch 4", "query False", "query False", "query True", "read", "synchronize", "read"]
    assert _Event.log == chunk * 2
    assert queue.last is not None and queue.last.energy_mj == 2000.0, "each chunk's own span, summed"
    queue.reader = None
    _Event.log = []
    queue.replays(lambda n: None, 4, lambda n: pytest.fail("no fallback"))
    assert "read" not in _Event.log and queue.last is None


def test_the_timer_keeps_each_sides_conditions_per_round():
    ref, mode = _block(1980.0), _block(1755.0)
    last: list[BlockConditions] = []
    timer = PairedTimer(lambda: last.append(ref) or 0.1, lambda: last.append(mode) or 0.05, 1, 1,
                        conditions=lambda: last[-1])
    timer.rounds(4)
    assert timer.ref_conditions == [ref] * 4 and timer.mode_conditions == [mode] * 4
    rounds = Rounds.of(timer)
    assert rounds.ref_conditions == (ref,) * 4 and CONDITIONS.flags([rounds]) == [round_flag(ref, mode)] * 4
