"""The record of an A/B cell (``ampbench ab``): one cell of the suite measured for a base tree and a head
tree in pairs on one card, each of its figures head over base with its interval and verdict. A speed cell
(``test_speed[...]``) carries its device-time speedup over fp32 and its device time per step, a memory cell
(``test_memory[...]``) its peak memory; each figure is a `PairedFigure` under its name in ``figures``:

``{"kind": "paired", "cell": "test_speed[gpt-amp_fp16]", "base": "1a2b3c4d5e6f (main)", "head": "working
tree", "pairs": 3, "order": "ABBAAB", "figures": {"speedup": {...}, "step_time": {...}}, ...}``

A figure's `change` is head / base - 1 of its raw value, whichever way is worse (a step time's +1% is
worse, a speedup's -1%); the cell's verdict is the worst of its figures' (``verdict.combined``). The run
JSON an A/B run writes around such records is ``results.paired_run``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ampbench.results.base import FigureGroup, Group, Record, checked, number, part, raw, text
from ampbench.results.schema import BOOLEAN, CONFIDENCE, NON_NEGATIVE, VERDICT, Field, check_order
from ampbench.verdict import COMBINED_ORDER, Verdict

# the key of a paired record that holds its figures by name, and the names of those an A/B run measures, in
# the order every reader lists them: a speed cell's two, then a memory cell's (``ab.figures.PAIRED_FIGURES``
# rows them in this order)
FIGURES_KEY = "figures"
FIGURE_ORDER = ("speedup", "step_time", "peak_memory")
# head / base - 1 of a figure that is a positive value on both sides lies above -1
CHANGE = Field("number", above=-1)


@dataclass(frozen=True)
class PairedFigure(FigureGroup):
    """One figure of a paired cell: each side's value (the geometric mean of its runs) and its runs, head's
    change over base with its interval at `confidence` after `pairs` pairs, the tolerance it was held to,
    its verdict and what the verdict says. What reaches the verdict is `checked`; the rest is shown."""

    label: str | None = text()  # "device-time speedup over fp32"
    unit: str | None = text()  # "x", "ms", "bytes"
    lower_is_better: bool | None = checked(BOOLEAN)  # which way of `change` is worse
    base: float | None = number()
    head: float | None = number()
    change: float | None = checked(CHANGE)
    change_low: float | None = checked(CHANGE)
    change_high: float | None = checked(CHANGE)
    confidence: float | None = checked(CONFIDENCE)
    tolerance: float | None = checked(NON_NEGATIVE)  # relative: a change worse than it is a regression
    pairs: int | None = number()
    verdict: Verdict | None = checked(VERDICT)
    message: str | None = text()
    base_runs: list | None = raw()  # each base run's value, in the order the pairs ran
    head_runs: list | None = raw()
    # each run's own sd of ln(value) (from its interval; 0 for an exact figure), in the same order: with the
    # runs, what an A/A comparison teaches the between-process prior (``ab.paired.PairRule.prior_sd``)
    base_sds: list | None = raw()
    head_sds: list | None = raw()

    # an interval holds its estimate
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = (("change_low", "change", "change_high"),)

    @property
    def worsening(self) -> float | None:
        """`change` signed so that > 0 is worse (a slower step, a smaller speedup, more memory)."""
        if self.change is None:
            return None
        return self.change if self.lower_is_better else -self.change


@dataclass(frozen=True)
class PairedRecord(Record):
    """One cell of an A/B run: the cell it measured (its test id), the trees it held against each other, how
    many pairs ran and in which order (A: base, B: head), and its figures by name (`PairedFigure`)."""

    KIND: ClassVar[str] = "paired"

    cell: str | None = text()  # the suite's test id of the cell measured: the entry's name
    base: str | None = text()  # the base tree: "1a2b3c4d5e6f (main)"
    head: str | None = text()  # the head tree: "working tree", or a commit
    pairs: int | None = number()
    order: str | None = text()  # the runs in the order they ran: "ABBAAB"
    figures: Mapping[str, PairedFigure] = part()

    # its figures by name, as a record by side holds its sides (no schema held them flat)
    GROUPS: ClassVar[Mapping[str, Group]] = {FIGURES_KEY: Group(PairedFigure, flat={}, by_side=True, flat_schemas=())}

    @classmethod
    def _part_problems(cls, info: Mapping[str, Any], where: str) -> list[str]:
        problems = super()._part_problems(info, where)
        held = info.get(FIGURES_KEY)
        if problems or not isinstance(held, dict):
            return problems
        return [p for name, figure in held.items() for names in PairedFigure.ORDERED
                for p in check_order(figure, names, f"{where}.{FIGURES_KEY}.{name}")]

    def named_figures(self) -> list[tuple[str, PairedFigure]]:
        """(name, figure) of each figure the cell holds: those of FIGURE_ORDER in their order, then any other
        (a newer writer's) in the record's."""
        known = [(name, self.figures[name]) for name in FIGURE_ORDER if name in self.figures]
        return known + [(name, f) for name, f in self.figures.items() if name not in FIGURE_ORDER]

    def deciding(self) -> tuple[str, PairedFigure] | None:
        """The figure whose verdict decided the cell's (the worst, ``verdict.combined``'s order; of two alike,
        the first); the first figure where none has a verdict of that order; None without figures."""
        named = self.named_figures()
        rank = {v: i for i, v in enumerate(COMBINED_ORDER)}
        judged = [item for item in named if item[1].verdict in rank]
        if judged:
            return min(judged, key=lambda item: rank[item[1].verdict])  # type: ignore[index]
        return named[0] if named else None
