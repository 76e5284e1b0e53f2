""""Needs a look": one line per cell whose own verdict fails or warns, saying what decided it (the figure,
how far it moved, the line it was held to) and the kernel whose time per step moved most, by a short
name; the cell's whole message, its kernel changes and its kernel table are the details behind the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ampbench.report.figure_text import fmt_change, fmt_value
from ampbench.report.format import attention
from ampbench.results import (
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PairedRecord,
    Record,
    Run,
    SpeedRecord,
)
from ampbench.results.ratios import ratio_label
from ampbench.verdict import Verdict

SHORT_CHARS = 40  # a kernel's short name past this is cut; its full name is in the details
OTHER_CHARS = 140  # the line of a cell without a figure: the start of its message


@dataclass(frozen=True)
class MovedKernel:
    """The kernel whose device time per step moved most against the baseline."""

    name: str  # as the run records it
    change_ms: float  # + slower, - faster; a new kernel's whole time, a vanished one's minus its time
    how: str  # "new", "vanished" or "changed"

    @property
    def short(self) -> str:
        return short_kernel(self.name)


@dataclass(frozen=True)
class Flagged:
    cell: Record
    figure: str | None  # "device speedup 5.226x" (its interval is in the message)
    change: str | None  # "-4.7% vs 5.483x": against the baseline
    line: str | None  # "line 5.455x": below it (a speedup), above it (a memory ratio) the cell fails
    kernel: MovedKernel | None
    kernel_changes: list[str] = field(default_factory=list)  # the run's own list, one change per item
    kernels: list[tuple[str, float]] = field(default_factory=list)  # the mode's kernels: (name, ms per step)

    @property
    def summary(self) -> str:
        """The line itself, as text (what the page's line and the markdown summary show)."""
        if self.figure is None:
            message = self.cell.message or ""
            return message if len(message) <= OTHER_CHARS else message[:OTHER_CHARS - 1] + "…"
        text = self.figure + (f" ({self.change})" if self.change else "") + (f", {self.line}" if self.line else "")
        if self.kernel is not None:
            text += f"; kernel {self.kernel.short} {self.kernel.change_ms:+.3f} ms ({self.kernel.how})"
        return text


def short_kernel(name: str) -> str:
    """A kernel's name without its namespaces and template arguments; a CUTLASS wrapper's is the kernel it
    wraps ('cutlass::Kernel2<cutlass_80_tensorop_..._align8>' -> 'cutlass_80_tensorop_..._align8')."""
    wrapped = re.fullmatch(r"(?:\w+::)*Kernel2?<(\w+)>", name)
    short = wrapped.group(1) if wrapped else re.sub(r"<.*>", "", name).split("::")[-1].strip() or name
    return short if len(short) <= SHORT_CHARS else short[:SHORT_CHARS - 1] + "…"


_ITEM = re.compile(r"(?P<name>.+?) (?P<ms>-?\d+(?:\.\d+)?) ms$")
_MOVED = re.compile(r"(?P<name>.+?) (?P<a>\d+(?:\.\d+)?)->(?P<b>\d+(?:\.\d+)?) ms \((?P<d>[+-]\d+(?:\.\d+)?)\)$")


def parse_changes(text: str | None) -> list[MovedKernel]:
    """The kernels of a cell's ``kernel_changes`` (``kernel_diff.kernel_changes``' text: 'new: A 1.3 ms, ...;
    vanished: ...; changed: B 3.6->4.2 ms (+0.6)'; normalised names hold no ', ' nor '; '); the lump of
    kernels below the profile's cut, '(other kernels)', is none of them."""
    found = []
    for part in (text or "").split("; "):
        how, _, items = part.partition(": ")
        if how not in ("new", "vanished", "changed"):
            continue
        for item in items.split(", "):
            m = (_MOVED if how == "changed" else _ITEM).match(item)
            if m is None or m["name"].startswith("("):
                continue
            delta = float(m["d"]) if how == "changed" else float(m["ms"]) * (-1 if how == "vanished" else 1)
            found.append(MovedKernel(m["name"], delta, how))
    return found


def _speedup_line(label: str, value: float,
                  baseline: float | None, line: float | None) -> tuple[str, str | None, str | None]:
    change = f"{value / baseline - 1:+.1%} vs {baseline:.3f}x" if baseline else None
    return f"{label} {value:.3f}x", change, f"line {line:.3f}x" if line else None


def _speed(cell: SpeedRecord | DistributedRecord) -> tuple[str, str | None, str | None] | None:
    """The speedup that decided the cell: the first of its speedups (its kinds of ratio but the scaling
    efficiencies, device time first) whose verdict needs a look (else the first measured)."""
    options = [(ratio_label(kind, cell), r.speedup, r.baseline_speedup, r.line, cell.verdict_of(kind))
               for kind in cell.RATIOS.values() if not kind.share and (r := cell.ratio(kind))]
    measured = [o for o in options if o[1] is not None]
    if not measured:
        return None
    chosen = next((o for o in measured if isinstance(o[4], Verdict) and o[4].needs_a_look), measured[0])
    label, value, baseline, line = chosen[:4]
    assert value is not None, "measured holds the options with a speedup"
    return _speedup_line(label, value, baseline, line)


def _memory(cell: MemoryRecord) -> tuple[str, str | None, str | None] | None:
    if cell.memory_ratio is None:
        return None
    base = cell.baseline_memory_ratio
    change = f"{cell.memory_ratio / base - 1:+.1%} vs {base:.3f}x" if base else None
    line = f"line {base * (1 + cell.tolerance):.3f}x" if base and cell.tolerance is not None else None
    return f"memory ratio {cell.memory_ratio:.3f}x", change, line


def _convergence(cell: ConvergenceRecord) -> tuple[str, str | None, str | None] | None:
    if cell.accuracy is None or cell.accuracy_ref is None:
        return None
    scale = 100.0 if max(cell.accuracy, cell.accuracy_ref) <= 1 else 1.0
    parity = cell.reference or "fp32"
    change = f"{(cell.accuracy - cell.accuracy_ref) * scale:+.1f} pts vs {parity}'s {cell.accuracy_ref * scale:.1f}%"
    line = f"line {(cell.accuracy_ref - cell.margin) * scale:.1f}%" if cell.margin is not None else None
    return f"accuracy {cell.accuracy * scale:.1f}%", change, line


def _paired(cell: PairedRecord) -> tuple[str, str | None, str | None] | None:
    """The figure that decided a paired cell (``PairedRecord.deciding``): head's value, its change over base
    with the interval, and the tolerance it was held to."""
    deciding = cell.deciding()
    if deciding is None:
        return None
    name, f = deciding
    change = f"{fmt_change(f.change, f.change_low, f.change_high)} vs base {fmt_value(f.base, f.unit)}"
    line = f"tolerance {f.tolerance:.2%}" if f.tolerance is not None else None
    return f"{f.label or name} head {fmt_value(f.head, f.unit)}", change if f.change is not None else None, line


def flag_cell(cell: Record) -> Flagged:
    """The line of one cell that needs a look, and its details."""
    if isinstance(cell, (SpeedRecord, DistributedRecord)):
        shown = _speed(cell)
    elif isinstance(cell, MemoryRecord):
        shown = _memory(cell)
    elif isinstance(cell, ConvergenceRecord):
        shown = _convergence(cell)
    elif isinstance(cell, PairedRecord):
        shown = _paired(cell)
    else:
        shown = None
    text = getattr(cell, "kernel_changes", None)
    moved = parse_changes(text)
    kernels = [(k["name"], float(k["ms"])) for k in getattr(cell, "kernels", None) or ()
               if isinstance(k, dict) and isinstance(k.get("name"), str) and isinstance(k.get("ms"), (int, float))]
    figure, change, line = shown if shown is not None else (None, None, None)
    return Flagged(cell, figure, change, line, max(moved, key=lambda k: abs(k.change_ms)) if moved else None,
                   text.split("; ") if text else [], kernels)


def needs_a_look(run: Run) -> list[Flagged]:
    """Every cell of `run` whose own verdict fails or warns: failures first."""
    return [flag_cell(c) for c in attention(run)]
