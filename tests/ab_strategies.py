"""The hypothesis strategies of ``ampbench ab``'s property tests, in one place: short histories of pairs of
one figure, each run's value near a level with its own stated sd, one run of any of them a stray."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import strategies as st

from ampbench.ab.paired import MAX_PAIRS, Pair, RunValue

LEVEL = 2.0  # the figure's value on the base side


@dataclass(frozen=True)
class PairHistory:
    """Pairs of one figure: each run's ln deviation from LEVEL (the head's moved by `drop`) and stated sd."""

    base: tuple[float, ...]  # ln deviations of the base runs
    head: tuple[float, ...]
    sds: tuple[float, ...]  # each pair's runs' stated sd of ln(value)
    drop: float  # ln of the head's factor (negative: lower)

    def pairs(self, shift: float = 0.0) -> list[Pair]:
        """The pairs, every head value moved by a further ln `shift`."""
        return [Pair(RunValue(LEVEL * math.exp(b), sd), RunValue(LEVEL * math.exp(h + self.drop + shift), sd))
                for b, h, sd in zip(self.base, self.head, self.sds)]


@st.composite
def pair_histories(draw: st.DrawFn, max_pairs: int = MAX_PAIRS) -> PairHistory:
    """1 to `max_pairs` pairs, runs spread 0-0.5% (sd of ln) about the level, stated sds 0-0.5%, a drop of
    up to 3% either way, and one run moved as a stray might be (up to 5% either way)."""
    n = draw(st.integers(1, max_pairs))
    spread = draw(st.sampled_from((0.0, 0.0002, 0.001, 0.005)))
    runs = st.lists(st.floats(-3.0, 3.0).map(lambda z: z * spread), min_size=n, max_size=n)
    base, head = draw(runs), draw(runs)
    sds = draw(st.lists(st.sampled_from((0.0, 0.0002, 0.0005, 0.001, 0.005)), min_size=n, max_size=n))
    stray = draw(st.floats(-0.05, 0.05))
    at = draw(st.integers(0, 2 * n - 1))
    if at < n:
        base[at] += stray
    else:
        head[at - n] += stray
    return PairHistory(tuple(base), tuple(head), tuple(sds), draw(st.floats(-0.03, 0.03)))
