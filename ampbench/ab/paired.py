"""The paired statistic (contract; implemented next)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ampbench.verdict import Verdict


@dataclass(frozen=True)
class Side:
    """One run's figure of a cell: its value (> 0) and the sd of ln(value) within that run, from its own
    interval or rounds (0.0 for an exact figure, a peak of memory)."""

    value: float
    sd: float = 0.0


@dataclass(frozen=True)
class Pair:
    """A base run and a head run of one cell, taken back to back on one card."""

    base: Side
    head: Side


@dataclass(frozen=True)
class PairRule:
    """How one kind of figure is judged: its tolerance (relative), which way is worse, and the
    between-process sd of ln(value) assumed before the pairs show their own (with its prior dof)."""

    tolerance: float
    lower_is_better: bool
    prior_sd: float
    prior_dof: float


@dataclass(frozen=True)
class PairedEstimate:
    """Head over base of one figure after `pairs` pairs: the ratio exp(mean log ratio) in the figure's own
    direction (a step time's head/base), and its interval at the look's errors."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


@dataclass(frozen=True)
class PairedVerdict:
    verdict: Verdict
    estimate: PairedEstimate
    message: str

    @property
    def decided(self) -> bool:
        return self.verdict in (Verdict.REGRESSION, Verdict.PASS, Verdict.IMPROVED)


def judge_pairs(pairs: Sequence[Pair], rule: PairRule, max_pairs: int, *, model: str, mode: str, figure: str,
                source: str) -> PairedVerdict:
    raise NotImplementedError
