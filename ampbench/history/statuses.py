"""What the history's replay (``replay.Replay``) makes of each run of a series: its state (counted,
accepted, suspect, failed, excluded) with the reason in words (``Status``), and a run that fails with the
runs held back before it (``GroupFailure``)."""

from __future__ import annotations

from dataclasses import dataclass

from ampbench.history.series import Point

COUNTED, ACCEPTED, SUSPECT, FAILED, EXCLUDED = "counted", "accepted", "suspect", "failed", "excluded"


@dataclass
class Status:
    """What the replay made of one run of the series."""

    index: int
    segment: int  # the level segment it lies in (accepted changes cut them)
    state: str  # COUNTED, ACCEPTED, SUSPECT, FAILED or EXCLUDED
    reason: str  # why, in words
    deviation: float | None = None  # ln(value / its card's level) when it came; None while learning
    sd: float | None = None  # the predictive sd it was held against
    alone: bool = False  # held back by itself (its verdict, or its value beyond its noise), not by others

    @property
    def counts(self) -> bool:
        return self.state in (COUNTED, ACCEPTED)

    @property
    def is_held_back(self) -> bool:
        return self.state in (SUSPECT, FAILED)


@dataclass(frozen=True)
class GroupFailure:
    """A run that fails with the runs held back before it: together they lie below the line."""

    runs: tuple[int, ...]  # indices of the held-back runs, then the new one (-1)
    drop: float  # their mean relative drop against the level (negative)
    line: float  # the relative drop the tolerance allows (negative)

    def describe(self, points: list[Point]) -> str:
        held = [points[i].run_id for i in self.runs if i >= 0]
        return (f"with the {len(held)} run{'s' * (len(held) != 1)} held back before it ({', '.join(held)}) it lies "
                f"{self.drop:+.2%} below the level, a drop not shown within the tolerance ({self.line:+.2%}): "
                "the level moved")
