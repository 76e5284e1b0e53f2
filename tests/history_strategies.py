"""The hypothesis strategies of the run history's property tests, in one place: short histories of one
speed cell, each a cell's noise, its unchanged runs and at most one stray run of any size among them; fleets
of a GPU model's cards, one of them under test with a short history of its fp32 step."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import strategies as st

LEVEL = 2.0  # the cell's speedup


@dataclass(frozen=True)
class ShortHistory:
    """Runs of one cell on one card: ln deviations of `noise`-sd draws, one of them moved by `stray`."""

    noise: float  # sd of ln(speedup) from run to run
    draws: tuple[float, ...]  # each run's standard normal draw
    stray_at: int | None  # the run moved by `stray`, if any
    stray: float  # ln of the stray's factor

    def values(self) -> list[float]:
        return [LEVEL * math.exp(self.noise * z + (self.stray if i == self.stray_at else 0.0))
                for i, z in enumerate(self.draws)]


@st.composite
def short_histories(draw: st.DrawFn, min_runs: int = 1, max_runs: int = 12, noise: tuple[float, float] = (5e-4, 0.01),
                    later: int = 0) -> ShortHistory:
    """A history of `min_runs` to `max_runs` runs (and `later` draws for the runs after it), at most one
    of them a stray of any size: a few sds to a factor of a thousand, either way."""
    runs = draw(st.integers(min_runs, max_runs))
    sd = draw(st.floats(*noise))
    draws = tuple(draw(st.lists(st.floats(-3.0, 3.0), min_size=runs + later, max_size=runs + later)))
    stray_at = draw(st.none() | st.integers(0, runs - 1))
    size = draw(st.one_of(st.floats(3.0, 40.0).map(lambda k: k * sd), st.floats(math.log(1.05), math.log(1000.0))))
    return ShortHistory(sd, draws, stray_at, size * draw(st.sampled_from((-1.0, 1.0))))


@dataclass(frozen=True)
class Fleet:
    """One speed cell's fp32 step over a GPU model's cards: each other card's level (ms), within `between`
    of the model's, and the card under test's short history (ms per run) at `factor` times the model's."""

    others: tuple[float, ...]
    card: ShortHistory
    factor: float

    def card_runs(self) -> list[float]:
        return [STEP_MS * self.factor * v / LEVEL for v in self.card.values()]


STEP_MS = 40.0  # the model's fp32 device ms per step


@st.composite
def fleets(draw: st.DrawFn, factor: float = 1.0, between: float = 0.005, stray_runs: int = 3) -> Fleet:
    """A fleet of 1 to 15 other cards, each `between`-sd (at most 3 sds) off the model's level, and a card
    at `factor` of it whose short history (``short_histories``, its runs' noise at most `between`) holds at
    most one stray among at least `stray_runs` runs (none in a shorter one)."""
    others = draw(st.lists(st.floats(-3.0, 3.0), min_size=1, max_size=15))
    card = draw(short_histories(max_runs=8, noise=(5e-4, between)))
    if card.stray_at is not None and len(card.draws) < stray_runs:
        card = ShortHistory(card.noise, card.draws, None, 0.0)
    return Fleet(tuple(STEP_MS * math.exp(between * z) for z in others), card, factor)
