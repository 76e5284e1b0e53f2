"""A step's answer to ``git bisect run`` from its cells' verdicts, in the suite's one vocabulary
(``ampbench.verdict.Verdict``): bad (1) where any cell regressed, good (0) where every cell passed or
improved, skip (125) otherwise; and how a step held to the history's level (``bisect --history``: no good
tree to pair with) judges each cell's figure against that level (`Level`).

The level is the geometric mean of the history's speedups, and its line lies below it by the tolerance of
the range rule (``tolerance.range_rule``): the user's floor, or the spread of the history's own values where
that is wider. A level is judged against as every figure is, through its ``tolerance.Reference`` and the
gate's judge (``gate.judge.verdict_of``): a step's cell regresses where its whole interval lies below the
line; it holds where its interval lies wholly above the line; between, it is inconclusive.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from ampbench.bisect.measure import Measurement, StepFigure
from ampbench.gate.judge import verdict_of
from ampbench.tolerance import BY_RANGE, Reference, range_rule
from ampbench.verdict import SpeedupCheck, Verdict

GOOD, BAD, SKIP = 0, 1, 125  # git bisect run's exit statuses
ANSWERS = {GOOD: "good", BAD: "bad", SKIP: "skip"}


@dataclass(frozen=True)
class Level:
    """A cell's level in the history: its speedup, the tolerance of its line, the values behind it and where
    they came from, and the kernels of its latest run (where the history holds them)."""

    cell: str
    speedup: float
    tolerance: float
    values: tuple[float, ...]
    source: str  # "history: 8 runs on NVIDIA H100 80GB HBM3"
    kernels: list | None = None

    @property
    def line(self) -> float:
        return self.speedup * (1.0 - self.tolerance)

    @property
    def reference(self) -> Reference:
        """What a step's figure of the cell is judged against: the level, by the range rule."""
        return Reference(self.speedup, self.tolerance, BY_RANGE, self.source)

    def check(self) -> SpeedupCheck:
        return self.reference.check(self.cell, "", figure="speedup against the good side")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "values": list(self.values), "line": self.line}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Level":
        fields = {k: v for k, v in data.items() if k != "line"}
        return cls(**{**fields, "values": tuple(fields["values"])})

    def __str__(self) -> str:
        return (f"{self.cell}: level {self.speedup:.3f}x ({self.source}), line {self.line:.3f}x "
                f"(tolerance {self.tolerance:.1%})")


def level_of(cell: str, figures: Sequence[StepFigure], floor: float, source: str) -> Level:
    """The level of `cell` from the history's figures of it; ValueError where there are none."""
    values = tuple(f.speedup for f in figures)
    if not values:
        raise ValueError(f"{cell}: no figure to set its level")
    speedup = math.exp(sum(math.log(v) for v in values) / len(values))
    kernels = next((f.kernels for f in figures if f.kernels), None)
    return Level(cell, speedup, range_rule(floor, values, speedup)[0], values, source, kernels)


def judge_cell(figure: StepFigure | None, level: Level) -> Verdict:
    """One cell of a step: ERROR where it has no figure."""
    if figure is None:
        return Verdict.ERROR
    return verdict_of(level.check(), figure.estimate())


def answer(verdicts: Mapping[str, Verdict]) -> int:
    """The step's answer: bad where any cell regressed, good where every cell held, skip otherwise."""
    if any(v is Verdict.REGRESSION for v in verdicts.values()):
        return BAD
    if verdicts and all(v in (Verdict.PASS, Verdict.IMPROVED) for v in verdicts.values()):
        return GOOD
    return SKIP


def judge_step(measurement: Measurement, levels: Mapping[str, Level]) -> tuple[int, dict[str, Verdict]]:
    verdicts = {cell: judge_cell(measurement.figures.get(cell), level) for cell, level in levels.items()}
    return answer(verdicts), verdicts


def describe_cells(measurement: Measurement, verdicts: Mapping[str, Verdict], levels: Mapping[str, Level]) -> str:
    """One progress line's cells: 'test_speed[gpt-amp_fp16] 0.982x [0.979, 0.985] (-1.8%) against line 0.995x:
    regression'."""
    parts = []
    for cell, verdict in verdicts.items():
        figure, level = measurement.figures.get(cell), levels[cell]
        shown = f"{figure} ({figure.speedup / level.speedup - 1:+.1%})" if figure is not None else "no figure"
        parts.append(f"{cell} {shown} against line {level.line:.3f}x: {verdict}")
    return "; ".join(parts)
