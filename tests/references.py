"""What a cell's figure is judged against where a baseline file's entry alone is the source, for the tests
that check a ratio without a store."""

from __future__ import annotations

from ampbench.baselines.entries import FlatEntry, entry_reference
from ampbench.gate.judge import ratio_check
from ampbench.results import RatioKind
from ampbench.speed.ratio import Ratio
from ampbench.tolerance import Reference
from ampbench.verdict import SpeedupCheck

SOURCE = "the baseline file"


def file_reference(kind: RatioKind, floor: float, entry: FlatEntry | None) -> Reference | None:
    return entry_reference(kind, floor, entry.ratio(kind) if entry is not None else None, SOURCE)


def entry_check(ratio: Ratio, model: str, mode: str, entry: FlatEntry | None,
                floor: float) -> tuple[SpeedupCheck | None, str]:
    """`ratio`'s check against `entry` under `floor`, its kind, figure, side and method read from it."""
    return ratio_check(ratio.kind, model, mode, entry, file_reference(ratio.kind, floor, entry), figure=ratio.figure,
                       over=ratio.over, method=ratio.method)


def against_entry(ratio: Ratio, model: str, mode: str, entry: FlatEntry | None, floor: float) -> Ratio:
    """`ratio` checked against `entry` under `floor`, as a cell without a history judges it."""
    return ratio.judge_against(model, mode, entry, file_reference(ratio.kind, floor, entry))
