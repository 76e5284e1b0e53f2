"""The hypothesis strategies of the clock-conditions property tests (``ampbench.gate.conditions``), in one
place: a card's state at a block's start and end, and two blocks of one round."""

from __future__ import annotations

from hypothesis import strategies as st

from ampbench.nvml import THROTTLES, BlockConditions, Reading

# NVML's clock-event reason bits that are no power or thermal throttle: idle, an application clock setting,
# sync boost, the display clock
HARMLESS_REASONS = (0x1, 0x2, 0x10, 0x100)


def reasons(throttled: bool | None = None) -> st.SearchStrategy[int]:
    """A mask of reason bits: any (`throttled` None), at least one throttle (True), or none (False)."""
    harmless = st.lists(st.sampled_from(HARMLESS_REASONS)).map(lambda bits: sum(set(bits)))
    throttles = st.lists(st.sampled_from(tuple(THROTTLES)), min_size=1).map(lambda bits: sum(set(bits)))
    if throttled is None:
        return st.one_of(harmless, st.tuples(harmless, throttles).map(sum))
    return st.tuples(harmless, throttles).map(sum) if throttled else harmless


@st.composite
def readings(draw: st.DrawFn, sm_mhz: st.SearchStrategy[float] = st.floats(300.0, 2100.0),
             reason: st.SearchStrategy[int] | None = None) -> Reading:
    return Reading(draw(sm_mhz), draw(st.floats(1000.0, 3300.0)), draw(reason if reason is not None else reasons()),
                   draw(st.floats(20.0, 95.0)), draw(st.floats(50.0, 700.0)), draw(st.floats(0.0, 1e12)))


@st.composite
def blocks(draw: st.DrawFn, reason: st.SearchStrategy[int] | None = None) -> BlockConditions:
    """One block's conditions: a start and an end read, and its energy."""
    return BlockConditions(draw(readings(reason=reason)), draw(readings(reason=reason)),
                           draw(st.none() | st.floats(0.0, 1e6)))


POWER_CAP = 0x4  # NVML's SW power cap reason bit


def block_read(sm_mhz: float, reasons: int = 0, energy_mj: float | None = None) -> BlockConditions:
    reading = Reading(sm_mhz, 2619.0, reasons, 60.0, 500.0, None)
    return BlockConditions(reading, reading, energy_mj)
