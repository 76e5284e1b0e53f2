"""What an A/B run leaves: a run JSON of paired cells, one per cell (kind "paired": its figures' base, head,
change with its interval and verdict), which ``ampbench report``, ``compare`` and ``export`` read as they read
any run; and the table it prints, one line per figure of each cell."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from ampbench.ab.figures import PAIRED_FIGURES
from ampbench.ab.paired import PairedVerdict
from ampbench.ab.runner import AbOutcome, CellPairs
from ampbench.ab.trees import Tree
from ampbench.files.write import write_atomic
from ampbench.results.schema import KIND_KEY, SCHEMA_KEY, SCHEMA_VERSION

PAIRED_KIND = "paired"


def _figure(name: str, cell: CellPairs, judged: PairedVerdict) -> dict[str, Any]:
    kind, pairs, est = PAIRED_FIGURES[name], cell.pairs[name], judged.estimate
    base = [p.base.value for p in pairs]
    head = [p.head.value for p in pairs]
    return {"label": kind.label, "unit": kind.unit, "lower_is_better": kind.rule.lower_is_better,
            "base": _middle(base), "head": _middle(head), "change": est.ratio - 1, "change_low": est.low - 1,
            "change_high": est.high - 1, "confidence": est.confidence, "tolerance": kind.rule.tolerance,
            "pairs": est.pairs, "verdict": judged.verdict.value, "message": judged.message,
            "base_runs": base, "head_runs": head}


def _middle(values: list[float]) -> float:
    """The geometric mean of a side's runs: the level its pairs' log ratios are about."""
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values))


def cell_info(cell: CellPairs, outcome: AbOutcome, trees: dict[str, Tree]) -> dict[str, Any]:
    """One cell's extra_info: who it is, its verdict, and each figure it was judged on."""
    figures = {name: _figure(name, cell, judged) for name, judged in cell.verdicts.items()}
    message = cell.problem or "; ".join(v.message for v in cell.verdicts.values())
    pairs = max((len(p) for p in cell.pairs.values()), default=0)
    return {SCHEMA_KEY: SCHEMA_VERSION, KIND_KEY: PAIRED_KIND, "model": cell.model, "mode": cell.mode,
            "device": outcome.device, "verdict": cell.verdict.value, "message": message, "cell": cell.node,
            "base": trees["base"].described, "head": trees["head"].described, "pairs": pairs,
            "order": "".join(outcome.orders[:pairs]), "figures": figures}


def document(outcome: AbOutcome, trees: dict[str, Tree], commit_info: dict[str, Any]) -> dict[str, Any]:
    """The A/B run as a run JSON: the head's machine, the head's commit, one benchmark per cell."""
    benchmarks = [{"name": cell.name, "fullname": cell.node, "params": {"model_name": cell.model,
                                                                        "mode_name": cell.mode},
                   "extra_info": cell_info(cell, outcome, trees)} for cell in outcome.cells.values()]
    return {"machine_info": outcome.machine_info, "commit_info": commit_info,
            "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(), "benchmarks": benchmarks}


def write(path: Path, outcome: AbOutcome, trees: dict[str, Tree], commit_info: dict[str, Any]) -> None:
    write_atomic(path, document(outcome, trees, commit_info))


def _shown(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 2 ** 20:.1f} MiB"
    return f"{value:.4g} {unit}" if unit != "x" else f"{value:.3f}x"


def table(outcome: AbOutcome) -> list[str]:
    """One line per figure of each cell: base, head, change with its interval, verdict."""
    rows = [("cell", "figure", "base", "head", "change [interval]", "pairs", "verdict")]
    for cell in outcome.cells.values():
        if cell.problem is not None:
            rows.append((cell.name, "-", "-", "-", "-", "-", f"{cell.verdict}: {cell.problem.splitlines()[0]}"))
            continue
        for name, judged in cell.verdicts.items():
            kind, fig = PAIRED_FIGURES[name], _figure(name, cell, judged)
            rows.append((cell.name, kind.label, _shown(fig["base"], kind.unit), _shown(fig["head"], kind.unit),
                         f"{fig['change']:+.2%} [{fig['change_low']:+.2%}, {fig['change_high']:+.2%}]",
                         str(fig["pairs"]), judged.verdict.value))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return ["  ".join(v.ljust(w) for v, w in zip(r[:-1], widths)) + "  " + r[-1] for r in rows]
