"""What an A/B run leaves: its cells as paired records (``results.PairedRecord``, one per cell: its figures'
base, head, change with its interval and verdict), which the command writes as a run JSON that ``ampbench
report``, ``compare`` and ``export`` read as they read any run; and the table it prints from them, one line
per figure of each cell."""

from __future__ import annotations

from typing import Mapping, Sequence

from ampbench.ab.figures import PAIRED_FIGURES
from ampbench.ab.paired import PairedVerdict
from ampbench.ab.runner import AbOutcome, CellPairs
from ampbench.ab.trees import Tree
from ampbench.report.figure_text import fmt_change, fmt_value
from ampbench.results import PairedFigure, PairedRecord
from ampbench.stats import geometric_mean
from ampbench.verdict import Verdict


def paired_figure(name: str, cell: CellPairs, judged: PairedVerdict) -> PairedFigure:
    """One figure of a cell: each side's level (the geometric mean of its runs, which its pairs' log ratios are
    about) and runs, head over base with its interval, and the verdict."""
    kind, pairs, est = PAIRED_FIGURES[name], cell.pairs[name], judged.estimate
    base, head = [p.base.value for p in pairs], [p.head.value for p in pairs]
    return PairedFigure(label=kind.label, unit=kind.unit, lower_is_better=kind.rule.lower_is_better,
                        base=geometric_mean(base), head=geometric_mean(head), change=est.ratio - 1,
                        change_low=est.low - 1, change_high=est.high - 1, confidence=est.confidence,
                        tolerance=kind.rule.tolerance, pairs=est.pairs, verdict=judged.verdict,
                        message=judged.message, base_runs=base, head_runs=head,
                        base_sds=[p.base.sd for p in pairs], head_sds=[p.head.sd for p in pairs])


def paired_record(cell: CellPairs, outcome: AbOutcome, trees: Mapping[str, Tree]) -> PairedRecord:
    """One cell's record: who it is, its verdict, and each figure it was judged on."""
    pairs = max((len(p) for p in cell.pairs.values()), default=0)
    return PairedRecord.build(
        test_id=cell.name, model=cell.model, mode=cell.mode, device=outcome.device, verdict=cell.verdict,
        message=cell.problem or "; ".join(v.message for v in cell.verdicts.values()), cell=cell.name,
        base=trees["base"].described, head=trees["head"].described, pairs=pairs,
        order="".join(outcome.orders[:pairs]),
        figures={name: paired_figure(name, cell, judged) for name, judged in cell.verdicts.items()})


def paired_records(outcome: AbOutcome, trees: Mapping[str, Tree]) -> list[PairedRecord]:
    return [paired_record(cell, outcome, trees) for cell in outcome.cells.values()]


def result_lines(records: Sequence[PairedRecord]) -> list[str]:
    """One line per figure of each cell, its figures shown as the report shows them (``report.figure_text``):
    base, head, change with its interval, pairs, verdict; a cell that
    failed to run (an error: a run left no record of it) gets one line with its verdict and why."""
    rows = [("cell", "figure", "base", "head", "change [interval]", "pairs", "verdict")]
    for record in records:
        if record.verdict is Verdict.ERROR or not record.figures:
            why = (record.message or "").splitlines()[0] if record.message else ""
            rows.append((record.test_id, "-", "-", "-", "-", "-", f"{record.verdict}: {why}"))
            continue
        for name, fig in record.figures.items():
            rows.append((record.test_id, PAIRED_FIGURES[name].label, fmt_value(fig.base, fig.unit),
                         fmt_value(fig.head, fig.unit), fmt_change(fig.change, fig.change_low, fig.change_high),
                         str(fig.pairs), str(fig.verdict)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
