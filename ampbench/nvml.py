"""What the card was doing while a timed block ran, read from NVML (``pynvml``, the ``nvml`` extra): its SM
and memory clocks, its clock-event (throttle) reasons, temperature and power at the block's start and end,
and its total-energy counter at both, whose difference is the block's energy.

A `Reader` gives one `Reading` at a time; `reader_for` opens NVML's on a card, or says why there is none
(nvidia-ml-py not installed, no CUDA device, NVML refused), and a test hands a fake one in its place. The
reads are the host's: NVML asks the driver, never the stream, so a read taken while the card runs a
queued block adds nothing to the block's device time (``speed.held.BlockQueue`` says when they are taken).
Nothing here imports torch: the gate reads these figures too (``gate.conditions``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

# NVML's clock-event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*) that mean the
# card held its clock down for power or heat: a block run under one ran slower for the card's sake, not the
# code's. The others (idle, an application clock setting, sync boost, the display clock) say nothing of that.
THROTTLES: dict[int, str] = {
    0x0000000000000004: "power cap",  # SW power cap
    0x0000000000000008: "hardware slowdown",  # HW slowdown (power brake or temperature)
    0x0000000000000020: "thermal",  # SW thermal slowdown
    0x0000000000000040: "hardware thermal",  # HW thermal slowdown
    0x0000000000000080: "power brake",  # HW power brake slowdown
}


def throttles_of(reasons: int) -> tuple[str, ...]:
    """The power and thermal throttles `reasons` (a bit mask of NVML's) holds, by name."""
    return tuple(name for bit, name in THROTTLES.items() if reasons & bit)


@dataclass(frozen=True)
class Reading:
    """One read of a card's state."""

    sm_mhz: float
    mem_mhz: float
    reasons: int  # NVML's clock-event reason bits (`THROTTLES` names the ones that matter)
    temp_c: float
    power_w: float
    energy_mj: float | None  # the total-energy counter since the driver loaded; None where the card has none


class Reader(Protocol):
    """Reads a card's state now."""

    def read(self) -> Reading: ...


@dataclass(frozen=True)
class BlockConditions:
    """The card's state at a timed block's start (once the card began it) and end, and the energy it used over
    the block: the counter's differences summed over the block's held chunks (None without a counter)."""

    start: Reading
    end: Reading
    energy_mj: float | None

    @classmethod
    def of(cls, reads: Sequence[tuple[Reading, Reading]]) -> "BlockConditions | None":
        """One block from the (start, end) reads of each held chunk of it; None where none was read."""
        if not reads:
            return None
        spans = [(e.energy_mj - s.energy_mj) for s, e in reads
                 if s.energy_mj is not None and e.energy_mj is not None]
        return cls(reads[0][0], reads[-1][1], sum(spans) if len(spans) == len(reads) else None)

    @property
    def sm_mhz(self) -> float:
        """The block's SM clock: the mean of its start and end reads."""
        return (self.start.sm_mhz + self.end.sm_mhz) / 2.0

    @property
    def throttles(self) -> tuple[str, ...]:
        """The power and thermal throttles read at its start or end."""
        return throttles_of(self.start.reasons | self.end.reasons)

    def to_info(self) -> dict[str, Any]:
        """As a record holds it: each figure as [start, end]."""
        def pair(name: str) -> list[Any]:
            return [getattr(self.start, name), getattr(self.end, name)]

        return {"sm_mhz": pair("sm_mhz"), "mem_mhz": pair("mem_mhz"), "reasons": pair("reasons"),
                "temp_c": pair("temp_c"), "power_w": pair("power_w"), "energy_mj": self.energy_mj}

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> "BlockConditions":
        def reading(i: int) -> Reading:
            return Reading(float(info["sm_mhz"][i]), float(info["mem_mhz"][i]), int(info["reasons"][i]),
                           float(info["temp_c"][i]), float(info["power_w"][i]), None)

        energy = info.get("energy_mj")
        return cls(reading(0), reading(1), float(energy) if energy is not None else None)


class NvmlReader:
    """NVML's reads of one card (`handle`), through `nvml` (the ``pynvml`` module, or a fake)."""

    def __init__(self, nvml: Any, handle: Any):
        self.nvml, self.handle = nvml, handle
        # the clock-event reasons replaced the throttle reasons in NVML 12; the older name reads the same bits
        self._reasons: Callable[[Any], int] = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) \
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        self._has_energy = True

    def _energy(self) -> float | None:
        if not self._has_energy:
            return None
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except Exception:  # noqa: BLE001 - a card before Volta has no counter: asked once, then never again
            self._has_energy = False
            return None

    def read(self) -> Reading:
        n, h = self.nvml, self.handle
        return Reading(float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                       float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)), int(self._reasons(h)),
                       float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                       n.nvmlDeviceGetPowerUsage(h) / 1000.0, self._energy())


_OPEN: dict[str, tuple[Reader | None, str | None]] = {}  # a card's reader (or why none), opened once per process


def reader_for(card: str | None, index: int, nvml: Any = None) -> tuple[Reader | None, str | None]:
    """NVML's reader of the card whose UUID is `card` (else the `index`-th NVML sees), or None and why not.
    `nvml`: the module to read through (a test's fake); ``pynvml`` where None."""
    key = card or f"#{index}"
    if nvml is not None:
        return _open(nvml, card, index)
    if key not in _OPEN:
        try:
            import pynvml
        except ImportError:
            _OPEN[key] = (None, "nvidia-ml-py is not installed (the nvml extra)")
        else:
            _OPEN[key] = _open(pynvml, card, index)
    return _OPEN[key]


def _open(nvml: Any, card: str | None, index: int) -> tuple[Reader | None, str | None]:
    try:
        nvml.nvmlInit()
        uuid = card if card is None or card.startswith("GPU-") else f"GPU-{card}"
        handle = nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else nvml.nvmlDeviceGetHandleByIndex(index)
        reader = NvmlReader(nvml, handle)
        reader.read()  # a card that refuses a read says so here, once
        return reader, None
    except Exception as e:  # noqa: BLE001 - NVML refused: the run goes on without its reads
        return None, f"NVML gave no reads: {e}"


@dataclass(frozen=True)
class Energy:
    """A cell's energy per training step on each side, from the total-energy counter's differences over the
    rounds where both sides' blocks were read (the sides take turns going first, so the rounds kept are
    balanced in order as every round is): each side's joules over all of its blocks over its steps, so a
    counter that updates about every 100 ms is read over many updates, not one block's few."""

    fp32_j: float  # joules per training step of the side the ratio is over (fp32's)
    mode_j: float
    rounds: int  # rounds behind both

    @property
    def ratio(self) -> float:
        """The mode's energy per step over fp32's: below 1 where the mode saves energy."""
        return self.mode_j / self.fp32_j

    def to_info(self) -> dict[str, Any]:
        return {"fp32_j_per_step": self.fp32_j, "mode_j_per_step": self.mode_j, "ratio": self.ratio,
                "rounds": self.rounds}

    @classmethod
    def from_info(cls, info: Any) -> "Energy | None":
        """As a record holds it; None where it holds none or a figure that is no positive number."""
        if not isinstance(info, Mapping):
            return None
        fp32, mode, rounds = info.get("fp32_j_per_step"), info.get("mode_j_per_step"), info.get("rounds")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf")
                   for v in (fp32, mode, rounds)):
            return None
        return cls(float(fp32), float(mode), int(rounds))  # type: ignore[arg-type]
