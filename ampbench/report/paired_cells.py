"""The paired cells of an A/B run (``ampbench ab``) that summary.md and index.html both show, as data: one
row per figure of each cell (a speed cell's speedup and step time, a memory cell's peak memory), each side's
value, head's change over base with its interval, and the figure's verdict. Each page only formats the rows
chosen here, so the two never disagree on a figure or its verdict."""

from __future__ import annotations

from dataclasses import dataclass

from ampbench.report.figure_text import DASH, fmt_change, fmt_value
from ampbench.results import PairedRecord, Run
from ampbench.verdict import Verdict

PAIRED_TITLE = "Head over base"
PAIRED_HEADERS = ["cell", "figure", "base", "head", "change [interval]", "verdict"]


@dataclass(frozen=True)
class PairedRow:
    """One figure of one paired cell, as text, and its verdict."""

    test_id: str
    figure: str
    base: str
    head: str
    change: str  # head / base - 1 with its interval
    verdict: Verdict | None

    def cells(self) -> list[str]:
        """The row as text, in the order of PAIRED_HEADERS but the verdict (each page marks it its way)."""
        return [self.test_id, self.figure, self.base, self.head, self.change]


def paired_rows(run: Run) -> list[PairedRow]:
    """A row per figure of each paired cell, in run order; a cell without figures (its test stopped before
    any) is one row of dashes under the cell's own verdict."""
    rows = []
    for cell in run.of_kind(PairedRecord):
        named = cell.named_figures()
        if not named:
            rows.append(PairedRow(cell.test_id, DASH, DASH, DASH, DASH, cell.verdict))
        for name, f in named:
            rows.append(PairedRow(cell.test_id, f.label or name, fmt_value(f.base, f.unit), fmt_value(f.head, f.unit),
                                  fmt_change(f.change, f.change_low, f.change_high), f.verdict))
    return rows


def trees(run: Run) -> str | None:
    """Which trees the run held against each other, as its paired cells name them: "head (working tree) over
    base (1a2b3c4d5e6f (main))"; None where it holds no paired cell."""
    cells = run.of_kind(PairedRecord)
    heads = ", ".join(dict.fromkeys(c.head or DASH for c in cells))
    bases = ", ".join(dict.fromkeys(c.base or DASH for c in cells))
    return f"head ({heads}) over base ({bases})" if cells else None
