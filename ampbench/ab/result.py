"""What an A/B run leaves: a run JSON of paired cells (``results.PairedRecord``, one per cell: its figures'
base, head, change with its interval and verdict), which ``ampbench report``, ``compare`` and ``export`` read
as they read any run; and the table it prints, one line per figure of each cell."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

from ampbench.ab.figures import PAIRED_FIGURES
from ampbench.ab.paired import PairedVerdict
from ampbench.ab.runner import AbOutcome, CellPairs
from ampbench.ab.trees import Tree
from ampbench.results import PairedFigure, PairedRecord
from ampbench.results.paired_run import write_paired_run


def _geomean(values: list[float]) -> float:
    """A side's level: the geometric mean of its runs, the level its pairs' log ratios are about."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def paired_figure(name: str, cell: CellPairs, judged: PairedVerdict) -> PairedFigure:
    kind, pairs, est = PAIRED_FIGURES[name], cell.pairs[name], judged.estimate
    base, head = [p.base.value for p in pairs], [p.head.value for p in pairs]
    return PairedFigure(label=kind.label, unit=kind.unit, lower_is_better=kind.rule.lower_is_better,
                        base=_geomean(base), head=_geomean(head), change=est.ratio - 1, change_low=est.low - 1,
                        change_high=est.high - 1, confidence=est.confidence, tolerance=kind.rule.tolerance,
                        pairs=est.pairs, verdict=judged.verdict, message=judged.message, base_runs=base,
                        head_runs=head)


def paired_record(cell: CellPairs, outcome: AbOutcome, trees: Mapping[str, Tree]) -> PairedRecord:
    """One cell's record: who it is, its verdict, and each figure it was judged on."""
    pairs = max((len(p) for p in cell.pairs.values()), default=0)
    return PairedRecord.build(
        test_id=cell.name, model=cell.model, mode=cell.mode, device=outcome.device, verdict=cell.verdict,
        message=cell.problem or "; ".join(v.message for v in cell.verdicts.values()), cell=cell.name,
        base=trees["base"].described, head=trees["head"].described, pairs=pairs,
        order="".join(outcome.orders[:pairs]),
        figures={name: paired_figure(name, cell, judged) for name, judged in cell.verdicts.items()})


def write(path: Path, outcome: AbOutcome, trees: Mapping[str, Tree], commit_info: Mapping[str, Any]) -> Path:
    records = [paired_record(cell, outcome, trees) for cell in outcome.cells.values()]
    return write_paired_run(path, records, outcome.machine_info, commit_info)


def result_lines(outcome: AbOutcome) -> list[str]:
    """One line per figure of each cell: base, head, change with its interval, pairs, verdict."""
    rows = [("cell", "figure", "base", "head", "change [interval]", "pairs", "verdict")]
    for cell in outcome.cells.values():
        if cell.problem is not None:
            rows.append((cell.name, "-", "-", "-", "-", "-", f"{cell.verdict}: {cell.problem.splitlines()[0]}"))
            continue
        for name, judged in cell.verdicts.items():
            kind, fig = PAIRED_FIGURES[name], paired_figure(name, cell, judged)
            rows.append((cell.name, kind.label, kind.shown(fig.base or 0.0), kind.shown(fig.head or 0.0),
                         f"{fig.change:+.2%} [{fig.change_low:+.2%}, {fig.change_high:+.2%}]",
                         str(fig.pairs), judged.verdict.value))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
