"""An A/B run: the cells' pytest processes for base and head, in pairs, on one card. Each pair runs the cells
still undecided, one fresh process per side, in balanced random order (each two pairs are ABBA or BAAB, so
that whatever a process inherits from the one before, a warm card or a cooled one, falls on both sides
alike). Each process writes its run with ``--benchmark-json``, and the figures of the table
(``ab.figures.PAIRED_FIGURES``) are read from it as the report reads any run. After each pair every
undecided figure is judged on its pairs so far (``ab.paired.judge_pairs``); a cell is decided when all its
figures are, and is not run again. Both sides judge nothing themselves: each runs with
``--perf-history off`` and an empty baseline folder, so that its cells time their rounds until their own
interval is tight, and a baseline or a history never enters an A/B verdict.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ampbench.ab.figures import PAIRED_FIGURES, sides_of
from ampbench.ab.paired import MAX_PAIRS, Pair, PairedVerdict, RunValue, judge_pairs
from ampbench.ab.trees import Tree
from ampbench.children import Child, run_pytest
from ampbench.results import Record
from ampbench.results.run import RunError, mode_of, model_of
from ampbench.verdict import Verdict, combined

BASE, HEAD = "base", "head"


class AbError(RuntimeError):
    """An A/B run that cannot go on: the message says why."""


def balanced_orders(pairs: int, rng: random.Random) -> list[str]:
    """The order of each pair's two runs, "AB" (base first) or "BA": every two pairs ABBA or BAAB at random."""
    orders: list[str] = []
    while len(orders) < pairs:
        orders += rng.choice([["AB", "BA"], ["BA", "AB"]])
    return orders[:pairs]


@dataclass
class CellPairs:
    """One cell's pairs so far, by figure, their verdicts at the last look, and why it has none (a run that
    left no record of it, a run that timed out)."""

    name: str  # its test id, as the run JSON names it
    node: str  # its pytest node id, which runs it again
    model: str
    mode: str
    pairs: dict[str, list[Pair]] = field(default_factory=dict)
    verdicts: dict[str, PairedVerdict] = field(default_factory=dict)
    problem: str | None = None

    @property
    def decided(self) -> bool:
        return self.problem is not None or (bool(self.verdicts) and all(v.decided for v in self.verdicts.values()))

    @property
    def verdict(self) -> Verdict:
        if self.problem is not None:
            return Verdict.ERROR
        return combined([v.verdict for v in self.verdicts.values()])


@dataclass
class AbPlan:
    """What an A/B run runs: the pytest arguments that select its cells at the first pair, the user's
    further pytest arguments, how many pairs a cell may take, and where its runs and logs go."""

    selection: list[str]
    pytest_args: list[str]
    work: Path  # the runs' JSON files, logs and the empty baseline folder
    max_pairs: int = MAX_PAIRS
    seed: int | None = None
    timeout: float | None = None  # seconds one process may take; None: no limit


@dataclass
class AbOutcome:
    cells: dict[str, CellPairs]
    orders: list[str]
    device: str | None
    machine_info: dict[str, Any]
    seconds: float
    runs: int


def run_side(tree: Tree, args: Sequence[str], plan: AbPlan, label: str) -> tuple[dict | None, str]:
    """One process of one side: its run JSON as a document (None where it wrote none) and, where it wrote
    none or failed, why."""
    run_json, log = plan.work / f"{label}.json", plan.work / f"{label}.log"
    empty = plan.work / "no-baselines"
    empty.mkdir(parents=True, exist_ok=True)
    ran = run_pytest(Child(plan.timeout, flag="--run-timeout"), tree.python, tree.path, args,
                     ["--perf-baseline-dir", str(empty), *plan.pytest_args], run_json, log)
    if ran.problem is not None:
        return None, ran.problem
    said = "" if ran.status == 0 else f"pytest exited with status {ran.status} ({log})"
    return json.loads(run_json.read_text(encoding="utf-8")), said


def _records(document: dict, path: Path) -> tuple[dict[str, tuple[Record, str]], str | None]:
    """The run's records of the kinds the table reads, by test id, with each cell's node id; its device."""
    from ampbench.results.run import parse_run

    run = parse_run(document, path)
    nodes = {b.get("name"): b.get("fullname") or b.get("name") for b in document.get("benchmarks", [])
             if isinstance(b, dict)}
    kinds = tuple({k.record for k in PAIRED_FIGURES.values()})
    found = {r.test_id: (r, str(nodes.get(r.test_id) or r.test_id)) for r in run.cells if isinstance(r, kinds)}
    return found, run.gpu


@dataclass
class _Runs:
    """What the processes of an A/B run have told so far: the card they ran on, the head's machine, how many."""

    device: str | None = None
    machine_info: dict[str, Any] = field(default_factory=dict)
    count: int = 0


def _run_pair(trees: Mapping[str, Tree], args: Sequence[str], plan: AbPlan, index: int, order: str,
              runs: _Runs) -> tuple[dict[str, dict[str, tuple[Record, str]]], dict[str, str]]:
    """One pair's two processes, in `order`: each side's records by test id, and why a side has none."""
    found: dict[str, dict[str, tuple[Record, str]]] = {}
    problems: dict[str, str] = {}
    for letter in order:
        side = BASE if letter == "A" else HEAD
        label = f"pair{index}-{side}"
        document, problem = run_side(trees[side], args, plan, label)
        runs.count += 1
        if document is None:
            problems[side] = problem
            continue
        try:
            found[side], device = _records(document, plan.work / f"{label}.json")
        except RunError as exc:
            problems[side] = str(exc)
            continue
        if runs.device is not None and device != runs.device:
            raise AbError(f"the {side}'s run of pair {index} ran on {device}, the run before on {runs.device}: "
                          "an A/B run compares two trees on one card")
        runs.device = device
        if side == HEAD:
            runs.machine_info = dict(document.get("machine_info") or {})
    return found, problems


def _first_cells(found: Mapping[str, Mapping[str, tuple[Record, str]]],
                 problems: Mapping[str, str]) -> dict[str, CellPairs]:
    """The cells the first pair measured, on either side (a cell one side lost is an error, not left out)."""
    cells = {}
    for name in dict.fromkeys([*found.get(BASE, {}), *found.get(HEAD, {})]):
        record, node = found.get(HEAD, {}).get(name) or found[BASE][name]
        cells[name] = CellPairs(name, node, model_of(record), mode_of(record))
    if not cells:
        said = "; ".join(f"{side}: {problem}" for side, problem in problems.items())
        raise AbError(f"the first pair measured no cell: {said}" if said else
                      "the first pair measured no cell the A/B run gates (speed or memory cells)")
    return cells


def _judge(cell: CellPairs, max_pairs: int) -> None:
    """Each figure of the cell judged on its pairs so far."""
    cell.verdicts = {name: judge_pairs(pairs, PAIRED_FIGURES[name].rule, max_pairs, model=cell.model, mode=cell.mode,
                                       figure=PAIRED_FIGURES[name].label, source=f"the base's {len(pairs)} runs")
                     for name, pairs in cell.pairs.items()}


def _leave_out_ungated(cells: dict[str, CellPairs], say: Callable[[str], None]) -> None:
    """Drop the cells whose runs hold no figure the table gates (a memory cell on the CPU: no allocator to read
    a peak from); AbError where none is left."""
    ungated = [name for name, cell in cells.items() if cell.problem is None and not cell.pairs]
    for name in ungated:
        del cells[name]
    if ungated:
        say(f"{len(ungated)} cells hold no figure the A/B run gates, left out: {', '.join(ungated)}")
    if not cells:
        raise AbError("the first pair measured no figure the A/B run gates (a speed cell's device time, a memory "
                      "cell's peak)")


def run_pairs(trees: Mapping[str, Tree], plan: AbPlan, say: Callable[[str], None]) -> AbOutcome:
    """Pairs of base and head runs until every cell is decided or has taken `plan.max_pairs` pairs."""
    orders = balanced_orders(plan.max_pairs, random.Random(plan.seed))
    cells: dict[str, CellPairs] = {}
    runs, taken, t0 = _Runs(), 0, time.perf_counter()
    for index, order in enumerate(orders, start=1):
        todo = [c for c in cells.values() if not c.decided]
        if index > 1 and not todo:
            break
        started = time.perf_counter()
        found, problems = _run_pair(trees, plan.selection if index == 1 else [c.node for c in todo], plan, index,
                                    order, runs)
        if index == 1:
            cells = _first_cells(found, problems)
            todo = list(cells.values())
        for cell in todo:
            _add_pair(cell, found, problems, index)
            if cell.problem is None:
                _judge(cell, plan.max_pairs)
        if index == 1:
            _leave_out_ungated(cells, say)
        taken = index
        say(_progress(index, order, cells, time.perf_counter() - started, plan.max_pairs))
    return AbOutcome(cells, orders[:taken], runs.device, runs.machine_info, time.perf_counter() - t0, runs.count)


def _add_pair(cell: CellPairs, found: Mapping[str, Mapping[str, tuple[Record, str]]], problems: Mapping[str, str],
              index: int) -> None:
    sides: dict[str, Mapping[str, RunValue]] = {}
    for side in (BASE, HEAD):
        entry = found.get(side, {}).get(cell.name)
        if entry is None:
            cell.problem = (f"the {side}'s run of pair {index} left no record of {cell.name}"
                            + (f": {problems[side]}" if side in problems else ""))
            return
        record = entry[0]
        if record.verdict is not None and record.verdict.failing:
            cell.problem = f"the {side}'s run of pair {index}: {cell.name} {record.verdict}: {record.message}"
            return
        sides[side] = sides_of(record)
    for name in PAIRED_FIGURES:
        if name in sides[BASE] and name in sides[HEAD]:
            cell.pairs.setdefault(name, []).append(Pair(sides[BASE][name], sides[HEAD][name]))
    if not cell.pairs and any(sides.values()):
        cell.problem = f"pair {index}: the base's and the head's runs of {cell.name} hold no figure in common"


def _progress(index: int, order: str, cells: Mapping[str, CellPairs], seconds: float, max_pairs: int) -> str:
    decided = [c for c in cells.values() if c.decided]
    left = [c.name for c in cells.values() if not c.decided]
    text = (f"pair {index} of at most {max_pairs} ({'base, head' if order == 'AB' else 'head, base'}, "
            f"{seconds:.0f} s): {len(decided)} of {len(cells)} cells decided")
    failing = [f"{c.name} {c.verdict}" for c in decided if c.verdict.failing]
    if failing:
        text += "; " + ", ".join(failing)
    if left and index < max_pairs:
        text += f"; {len(left)} run again"
    return text
