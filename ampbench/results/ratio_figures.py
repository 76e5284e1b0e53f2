"""One ratio of a timed cell as its record holds it (``RatioFigures``): the estimate with its interval,
what it was judged against, how it was measured, and each side's step and round times (``StepFigures``),
with the names a record of schema 1 or 2 gave those times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ampbench.results.base import FigureGroup, checked, encode, number, part, raw, read_fields, reading, text
from ampbench.results.ratios import RatioKind
from ampbench.results.schema import (
    CONFIDENCE,
    COUNT,
    FP32_SIDE,
    MODE_SIDE,
    NON_NEGATIVE,
    POSITIVE,
    SIDES_KEY,
    VERDICT,
    VERSUS_SIDE,
)
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


@dataclass(frozen=True)
class StepFigures(FigureGroup):
    """One side's times in a ratio: the median of its per-step times over the rounds (the ratio is the
    centre of the rounds' paired ratios, so the two sides' need not agree exactly), and its per-step
    milliseconds of every round, in order."""

    step_ms: float | None = number()
    round_ms: list | None = raw()


# the names a ratio of schema 1 or 2 gave its sides' step times (schema 1: under its ratio's prefix), by
# side: the mode's, and the side the ratio is over (fp32's; a compiled cell's versus side)
OVER = "over"
LEGACY_STEPS: dict[str, dict[str, str]] = {MODE_SIDE: {"step_ms": "step_ms", "round_ms": "round_ms"},
                                           OVER: {"step_ms": "step_ms_ref", "round_ms": "ref_round_ms"}}


def over_side(kind: RatioKind) -> str:
    """The side a ratio of `kind` is over: a compiled cell's versus side, or fp32's."""
    return VERSUS_SIDE if kind.over else FP32_SIDE


@dataclass(frozen=True)
class RatioFigures:
    """One ratio of a timed cell, as its record holds it: the estimate with its interval, what it was held
    against and its verdict, how it was measured, its step and round times, and its interval across
    runs where its baseline learned a between-run spread. A ratio holds the figures it measured."""

    speedup: float | None = checked(POSITIVE)  # the ratio: a speedup, or a scaling efficiency
    speedup_low: float | None = checked(POSITIVE)
    speedup_high: float | None = checked(POSITIVE)
    rounds: int | None = checked(COUNT)
    # 99% where the figure gates the cell, speed.LOOK_CONFIDENCE where it is only reported
    confidence: float | None = checked(CONFIDENCE)
    baseline_speedup: float | None = checked(POSITIVE)
    tolerance: float | None = checked(NON_NEGATIVE)
    line: float | None = number()
    drop: float | None = number()
    confirm_speedup: float | None = number()  # the confirming batch's, where one ran
    verdict: Verdict | None = checked(VERDICT)
    method: str | None = text()  # how device time was measured: graph, kernels or wall
    fallback: str | None = text()  # why not by graph replay, where that was wanted
    speedup_across_low: float | None = checked(POSITIVE)  # the interval across runs, where a spread was learned
    speedup_across_high: float | None = checked(POSITIVE)
    between_run_sd: float | None = number()
    between_run_count: int | None = number()
    # each side's step and round times, by side: the mode's, and the side the ratio is over (``over_side``)
    sides: Mapping[str, StepFigures] = part()

    # checked figures that must be ascending where all are present (an interval holds its estimate)
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = (("speedup_low", "speedup", "speedup_high"),
                                                      ("speedup_across_low", "speedup_across_high"))

    @classmethod
    def read(cls, info: Mapping[str, Any], key: Any = None, over: str = FP32_SIDE) -> "RatioFigures":
        """The ratio `info` holds, each figure under its name or ``key(name)``; `over`: the side it is over,
        whose step times a record of schema 1 or 2 held flat beside the mode's (``LEGACY_STEPS``)."""
        stored = info.get(SIDES_KEY) if key is None else None
        if isinstance(stored, dict):
            sides = {side: StepFigures.read(figures) for side, figures in stored.items() if isinstance(figures, dict)}
        else:
            named = key or (lambda name: name)
            sides = {side: StepFigures.read(info, lambda name, flat=flat: named(flat[name]))
                     for side, flat in ((MODE_SIDE, LEGACY_STEPS[MODE_SIDE]), (over, LEGACY_STEPS[OVER]))}
        return cls(**read_fields(RATIO_FIELDS, info, key)[0], sides={side: f for side, f in sides.items() if f})

    def to_info(self) -> dict[str, Any]:
        """The figures it holds, under their names."""
        info = {name: encode(value) for name, _, _ in RATIO_FIELDS if (value := getattr(self, name)) is not None}
        sides = {side: figures.to_info() for side, figures in self.sides.items() if figures}
        return {**info, SIDES_KEY: sides} if sides else info

    def side(self, name: str) -> StepFigures:
        """The step and round times of one side of the ratio; none where it holds none."""
        return self.sides.get(name) or StepFigures()

    def estimate(self, confidence: float | None = None) -> SpeedupEstimate | None:
        """The ratio with its interval; None where incomplete. `confidence`: the record's, where the ratio
        names none (a record of schema 1 named one for all its figures)."""
        value, low, high = self.speedup, self.speedup_low, self.speedup_high
        if value is None or low is None or high is None or min(value, low, high) <= 0:
            return None
        level = self.confidence if self.confidence is not None else confidence if confidence is not None else 0.99
        return SpeedupEstimate(value, low, high, int(self.rounds) if self.rounds is not None else 0, level)

    def across(self) -> tuple[float, float] | None:
        """Its interval across runs (low, high), where the baseline had a between-run spread."""
        lo, hi = self.speedup_across_low, self.speedup_across_high
        return (lo, hi) if lo is not None and hi is not None else None


RATIO_FIELDS = reading(RatioFigures)
NOTHING = RatioFigures()
