"""A bisect step paired against the good side, as ``ampbench ab`` compares two trees (and as Chromium's
Pinpoint bisects): the commit under test and the good side (a worktree of its own at the good commit, or
the good version's environment) each measured in a fresh process, a pair at a time on the same card, in
balanced random order (``ab.runner.balanced_orders``: each two pairs ABBA or BAAB, so that what a process
inherits from the one before, a warm card or a cooled one, falls on both sides alike). Each cell's pairs
are judged by ``ab.paired.judge_pairs`` under the speedup's rule (`pair_rule`), and only the cells still
undecided take another pair, `max_pairs` at most; a cell that regresses answers the step at once (bad).

Why pairs and not a level measured once: the card drifts between the good side's runs and a step's
(clocks, warmth, a neighbour's load), and a level cannot see it; measured back to back, both sides carry
the same drift, and the pairs' own spread, not a level's, sets the interval.

A pair that left no figure of a cell on one side adds nothing to it; `LOST_PAIRS` such pairs, or one
measurement past the step timeout, and the cell is given up: an error, and the step is skipped. Each pair's
order, both sides' figures and the cells' verdicts at its look are kept in the step's record.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from ampbench.ab.paired import SPEEDUP_RULE, Pair, PairedVerdict, PairRule, RunValue, judge_pairs
from ampbench.ab.runner import balanced_orders
from ampbench.bisect.cells import named_cell
from ampbench.bisect.judge import answer
from ampbench.bisect.levels import keys_of
from ampbench.bisect.measure import COMMAND_CELL, CommandMeasurer, Measurement, StepFigure, SuiteMeasurer
from ampbench.stats import geometric_mean
from ampbench.verdict import Verdict

LOST_PAIRS = 2  # pairs without a figure of a cell that give it up: one may be a stray crash, two are the commit's
_FIGURE = "speedup against the good side"
_GOOD, _HEAD = "good", "head"  # the sides' keys in a pair's record
_SIDE_WORDS = {_GOOD: "the good side", _HEAD: "this commit"}


@dataclass(frozen=True)
class GoodSide:
    """Where the good side is measured in every pair: its tree, the interpreter that runs it (None: the
    measurer's own), and what it is in words (a sha, ``torch==2.11.0``)."""

    tree: str
    python: str | None
    label: str


def pair_rule(tolerance: float) -> PairRule:
    """The speedup's rule at the user's tolerance, where that is wider than the rule's own: a bisect is
    asked for the commit that crossed the user's line, not for any change the pairs can tell."""
    return replace(SPEEDUP_RULE, tolerance=max(tolerance, SPEEDUP_RULE.tolerance))


def run_value(figure: StepFigure) -> RunValue:
    """One run's figure as the paired statistic reads it: its speedup and the sd of ln(speedup) its own
    interval implies (as ``ab.figures`` reads a run's record)."""
    return RunValue.of_interval(figure.speedup, figure.low, figure.high, figure.confidence)


@dataclass
class StepCell:
    """One cell's pairs in a step, their verdict at the last look, and why it was given up (where it was)."""

    name: str
    pairs: list[Pair] = field(default_factory=list)
    good: list[StepFigure] = field(default_factory=list)  # the figures of its pairs, side by side
    head: list[StepFigure] = field(default_factory=list)
    judged: PairedVerdict | None = None
    lost: int = 0
    problem: str | None = None

    @property
    def verdict(self) -> Verdict:
        if self.problem is not None:
            return Verdict.ERROR
        return self.judged.verdict if self.judged is not None else Verdict.INCONCLUSIVE

    @property
    def decided(self) -> bool:
        return self.problem is not None or (self.judged is not None and self.judged.decided)

    def to_json(self) -> dict[str, Any]:
        """The step record's cell: its verdict and, once it has pairs, head over the good side (`ratio`, its
        interval, `drop`), both sides' speedups (geometric means over the pairs) and kernel lists."""
        out: dict[str, Any] = {"verdict": str(self.verdict), "pairs": len(self.pairs)}
        if self.problem is not None:
            out["problem"] = self.problem
        if self.judged is not None:
            est = self.judged.estimate
            out.update(ratio=est.ratio, ratio_low=est.low, ratio_high=est.high, confidence=est.confidence,
                       drop=est.ratio - 1, speedup=geometric_mean([f.speedup for f in self.head]),
                       good_speedup=geometric_mean([f.speedup for f in self.good]),
                       kernels=next((f.kernels for f in reversed(self.head) if f.kernels), None),
                       good_kernels=next((f.kernels for f in reversed(self.good) if f.kernels), None),
                       message=self.judged.message)
        return out

    def described(self) -> str:
        """The cell in a progress line: 'command 0.335x [0.331, 0.339] of the good side (-66.5%): regression'."""
        if self.problem is not None:
            return f"{self.name}: {self.problem.splitlines()[0]}"
        if self.judged is None:
            return f"{self.name}: no pair yet"
        est = self.judged.estimate
        return (f"{self.name} {est.ratio:.3f}x [{est.low:.3f}, {est.high:.3f}] of the good side "
                f"({est.ratio - 1:+.1%}): {self.verdict}")


@dataclass
class PairedStep:
    """What a paired step found: its answer to ``git bisect run``, its cells, each pair's record, its seconds
    and the problem of its last measurement that left no figure (None where every one left its figures)."""

    code: int
    cells: dict[str, StepCell]
    pairs: list[dict[str, Any]]
    seconds: float
    problem: str | None


def _only(measurer: SuiteMeasurer | CommandMeasurer, names: list[str]) -> SuiteMeasurer | CommandMeasurer:
    """The measurer of the cells still undecided (a step command measures its one figure whatever)."""
    if not isinstance(measurer, SuiteMeasurer):
        return measurer
    by_id = {named_cell(c).test_id: c for c in measurer.cells}
    return replace(measurer, cells=[by_id[n] for n in names if n in by_id])


def _shown(figures: Mapping[str, StepFigure]) -> dict[str, dict[str, Any]]:
    return {name: {"speedup": f.speedup, "low": f.low, "high": f.high, "kernels": f.kernels}
            for name, f in figures.items()}


def _add_pair(cell: StepCell, found: Mapping[str, Measurement], index: int) -> None:
    figures = {side: found[side].figures.get(cell.name) if side in found else None for side in (_GOOD, _HEAD)}
    good, head = figures[_GOOD], figures[_HEAD]
    if good is not None and head is not None:
        cell.pairs.append(Pair(run_value(good), run_value(head)))
        cell.good.append(good)
        cell.head.append(head)
        return
    cell.lost += 1
    why = "; ".join(f"{_SIDE_WORDS[side]}: " + (found[side].problem or f"no figure of {cell.name}").splitlines()[0]
                    for side in (_GOOD, _HEAD) if side in found and figures[side] is None)
    if cell.lost >= LOST_PAIRS or any(m.timed_out for m in found.values()):
        cell.problem = f"pair {index} left no figure: {why}"


def paired_step(measurer: SuiteMeasurer | CommandMeasurer, good: GoodSide, tree: Path, label: str,
                rule: PairRule, max_pairs: int, say: Callable[[str], None],
                rng: random.Random | None = None) -> PairedStep:
    """Pairs of the good side and this commit (checked out in `tree`, or installed where `measurer` runs)
    until every cell is decided, one regresses, or `max_pairs` pairs are taken; `label` names the step's
    logs, `say` takes a progress line per pair."""
    orders = balanced_orders(max_pairs, rng or random.Random())
    sides = {"A": (_GOOD, measurer if good.python is None else replace(measurer, python=good.python), Path(good.tree)),
             "B": (_HEAD, measurer, tree)}
    cells = {name: StepCell(name) for name in (keys_of(measurer) if isinstance(measurer, SuiteMeasurer) else [])}
    pairs: list[dict[str, Any]] = []
    problem, t0 = None, time.perf_counter()
    for index, order in enumerate(orders, start=1):
        todo = [c.name for c in cells.values() if not c.decided]
        if index > 1 and (not todo or any(c.verdict is Verdict.REGRESSION for c in cells.values())):
            break
        started = time.perf_counter()
        found: dict[str, Measurement] = {}
        for letter in order:
            side, side_measurer, where = sides[letter]
            found[side] = (side_measurer if index == 1 else _only(side_measurer, todo))(
                where, f"{label}-pair{index}-{side}")
            if found[side].problem:
                problem = (found[side].problem if side == _HEAD
                           else f"the good side {good.label}: {found[side].problem}")
            if found[side].timed_out:  # the other side needs no measurement: this pair can no longer be whole
                break
        if index == 1:
            for measurement in found.values():
                for name in measurement.figures:
                    cells.setdefault(name, StepCell(name))
            if not cells:  # a step command that printed nothing on either side: its one figure, lost
                cells[COMMAND_CELL] = StepCell(COMMAND_CELL)
            todo = list(cells)
        for name in todo:
            cell = cells[name]
            _add_pair(cell, found, index)
            if cell.problem is None and cell.pairs:
                cell.judged = judge_pairs(cell.pairs, rule, max_pairs, model=name, mode=label, figure=_FIGURE,
                                          source=f"the good side's {len(cell.pairs)} runs")
        pairs.append({"pair": index, "order": order, "seconds": time.perf_counter() - started,
                      "good": _shown(found[_GOOD].figures) if _GOOD in found else {},
                      "head": _shown(found[_HEAD].figures) if _HEAD in found else {},
                      "problems": {side: m.problem for side, m in found.items() if m.problem},
                      "verdicts": {name: str(cells[name].verdict) for name in todo}})  # at this look
        first = " then ".join(_SIDE_WORDS[sides[letter][0]] for letter in order)
        say(f"pair {index} of at most {max_pairs} ({first}, {time.perf_counter() - started:.1f} s): "
            + "; ".join(cells[name].described() for name in todo))
        if any(m.timed_out for m in found.values()):
            break
    verdicts = {name: cell.verdict for name, cell in cells.items()}
    return PairedStep(answer(verdicts), cells, pairs, time.perf_counter() - t0, problem)
