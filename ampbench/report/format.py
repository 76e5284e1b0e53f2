"""A run's figures for people: the per-model tables (Row, model_rows) that the Markdown and HTML pages
share, the verdict counts and notes they print. The fmt_* helpers and verdict labels are
``ampbench.report.figure_text``'s."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ampbench.export.figures import gating_speedups
from ampbench.modes import order_modes
from ampbench.report.figure_text import (
    DASH,
    fmt_accuracy,
    fmt_bytes,
    fmt_ms,
    fmt_number,
    fmt_rate,
    fmt_speedup,
    verdict_label,
)
from ampbench.results import (
    FP32_MODE,
    FP32_SIDE,
    MODE_SIDE,
    VERDICT_ORDER,
    ConvergenceRecord,
    MemoryRecord,
    Record,
    Run,
    SpeedRecord,
)
from ampbench.results.ratios import WALL
from ampbench.results.run import mode_of, model_of
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict

NEEDS_A_LOOK = tuple(v for v in VERDICT_ORDER if v.needs_a_look)  # failing first, then warnings
SMOKE_NOTE = ("Smoke run: figures are not comparable. A CPU run trains tiny shapes to check the code path; "
              "its speedups, step times and accuracies say nothing about a GPU, and nothing is held against baselines.")
SPEEDUP_NOTE = ("Wall-clock speedup over fp32: the centre of the rounds' paired fp32/mode step-time ratios (the "
                "mean of the medians of the two orders a round runs in), with its interval. The gated speedup is "
                "the figure the speed verdict judges, in the clock it names (device time where the cell measured "
                "it), its baseline beside it; where device time gates, the wall-clock speedup is shown, not gated. "
                "Step times and throughput: each side's median over the same rounds, fp32's beside the mode's; "
                "their ratio can differ from the speedup where rounds vary. The fp32 row times fp32 against "
                "itself: a check of the method, not a finding.")


def device_noun(run: Run) -> str:
    """What a run's cells trained on, as its pages name it: "GPU", or "device" on a CPU smoke run."""
    return "device" if run.smoke else "GPU"


# ---------------------------------------------------------------------------------------------------
# tables


@dataclass(frozen=True)
class Row:
    """One line of a per-model table: one precision mode of one model, all kinds merged."""

    mode: str
    step_ms: float | None
    step_ms_ref: float | None  # fp32's step over the same rounds (None where the row is fp32's own)
    throughput: float | None
    speedup: SpeedupEstimate | None
    speedup_value: float | None
    baseline: float | None
    verdict: Verdict | None  # the speed verdict
    peak_mem: float | None
    memory_ratio: float | None
    max_batch: float | None
    max_batch_ratio: float | None
    tflops: float | None
    accuracy: float | None
    memory_verdict: Verdict | None = None
    convergence: Verdict | None = None  # the convergence verdict
    messages: tuple[str, ...] = ()
    fp32_only: bool = False  # built from the fp32 figures a speed cell carries, not a cell of its own
    across: tuple[float, float] | None = None  # the speedup's interval across runs, where known
    max_batch_searched: bool = True  # False: the memory cell measured the default batch only (quick tier)
    # the speedups the speed verdict judges, each (its clock, its estimate, its value, its baseline):
    # the device-time one where the cell measured it; `baseline` is theirs
    gated: tuple[tuple[str, SpeedupEstimate | None, float | None, float | None], ...] = ()

    def cells(self) -> list[str]:
        """The row as text, in the order of ROW_HEADERS."""
        speed = fmt_speedup(self.speedup, self.speedup_value)
        if self.fp32_only:
            speed = "reference"
        elif self.mode == FP32_MODE and speed != DASH:
            # fp32 against itself checks the method; a "speedup" of it is no finding
            speed = f"reference (self-check {speed})"
        elif self.across is not None:
            speed += f"; across runs [{self.across[0]:.2f}, {self.across[1]:.2f}]"
        memory = fmt_bytes(self.peak_mem)
        if self.memory_ratio is not None:
            memory = (f"{memory} ({self.memory_ratio:.2f}x)" if self.peak_mem is not None
                      else f"{self.memory_ratio:.2f}x")
        batch = fmt_number(self.max_batch, ".0f")
        if self.max_batch_ratio is not None and self.max_batch is not None:
            batch = f"{batch} ({self.max_batch_ratio:.2f}x)"
        elif not self.max_batch_searched:
            batch = MemoryRecord.NOT_SEARCHED
        gated = "; ".join(f"{fmt_speedup(est, value)} ({clock})" for clock, est, value, _ in self.gated)
        if self.fp32_only:
            gated = "reference"
        elif self.mode == FP32_MODE and self.gated:
            gated = f"self-check {gated}"
        baseline = (fmt_number(self.baseline, ".2f", "x") if len(self.gated) < 2 else
                    "; ".join(f"{fmt_number(b, '.2f', 'x')} ({clock})" for clock, _, _, b in self.gated))
        accuracy = fmt_accuracy(self.accuracy)
        if self.convergence and self.accuracy is None:
            accuracy = str(self.convergence)
        return [
            self.mode,
            fmt_ms(self.step_ms),
            fmt_ms(self.step_ms_ref),
            fmt_rate(self.throughput),
            speed,
            baseline,
            gated or DASH,
            verdict_label(self.verdict),
            memory,
            batch,
            fmt_number(self.tflops, ".3g"),
            accuracy,
        ]

    def flags(self) -> dict[int, Verdict | None]:
        """Column index -> the verdict of the test behind that figure, for figures other than speed."""
        col = ROW_HEADERS.index
        return {col("peak memory (ratio)"): self.memory_verdict, col("largest batch (ratio)"): self.memory_verdict,
                col("accuracy"): self.convergence}

    def marked_cells(self, mark: Callable[[str, Verdict | None], str]) -> list[str]:
        cells, flags = self.cells(), self.flags()
        return [mark(c, flags[i]) if i in flags else c for i, c in enumerate(cells)]


ROW_HEADERS = [
    "mode",
    "step time",
    "fp32 step, same rounds",
    "throughput",
    "wall-clock speedup [interval]",
    "gated baseline",
    "gated speedup [interval]",  # beside the verdict that judges it
    "speed verdict",
    "peak memory (ratio)",
    "largest batch (ratio)",
    "TFLOP/s",
    "accuracy",
]


def model_rows(run: Run) -> dict[str, list[Row]]:
    """Per model, one Row per mode: mode, step time, memory and accuracy with the wall-clock speedup, and
    the speedup the verdict judges with its interval and baseline beside the verdict. A mode's step time
    sits beside fp32's in the same rounds, so
    the two agree with its speedup (fp32's own cell ran in other rounds)."""
    modes_of: dict[str, list[str]] = {}
    for c in run.cells:
        modes_of.setdefault(model_of(c), []).append(mode_of(c))
    references = _fp32_rows(run)
    tables: dict[str, list[Row]] = {}
    for model, met in modes_of.items():
        modes = order_modes(met)
        rows = [row for row in (_row(run, model, mode) for mode in modes) if row is not None]
        if rows and FP32_MODE not in modes and model in references:
            rows.insert(0, references[model])
        if rows:
            tables[model] = rows
    return tables


def _row(run: Run, model: str, mode: str) -> Row | None:
    """The row of one mode of one model; None where it has no speed, memory or convergence cell (e.g.
    only an input-pipeline cell: listed in its own table)."""
    speed = run.cell(SpeedRecord, model, mode)
    mem = run.cell(MemoryRecord, model, mode)
    conv = run.cell(ConvergenceRecord, model, mode)
    if speed is None and mem is None and conv is None:
        return None
    messages = tuple(f"{c.kind}: {c.message}" for c in (speed, mem, conv) if c is not None and c.message)
    wall = speed.ratio(WALL) if speed else None  # the table's speedup: the wall clock's, every run has one
    gated = tuple((kind.scope, speed.estimate(kind), speed.ratio(kind).speedup, speed.ratio(kind).baseline_speedup)
                  for kind in gating_speedups(speed)) if speed else ()
    return Row(
        mode=mode,
        step_ms=wall.side(MODE_SIDE).step_ms if wall is not None else None,
        step_ms_ref=wall.side(FP32_SIDE).step_ms if wall is not None and mode != FP32_MODE else None,
        throughput=speed.side(MODE_SIDE).throughput if speed else None,
        speedup=speed.estimate(WALL) if speed else None,
        speedup_value=wall.speedup if wall is not None else None,
        baseline=gated[0][3] if gated else None,
        verdict=speed.verdict if speed else None,
        peak_mem=_first(mem.side(MODE_SIDE).peak_mem_bytes if mem else None,
                        speed.side(MODE_SIDE).peak_mem_bytes if speed else None),
        memory_ratio=_first(mem.memory_ratio if mem else None, speed.memory_ratio if speed else None),
        max_batch=mem.side(MODE_SIDE).max_batch if mem else None,
        max_batch_ratio=mem.max_batch_ratio if mem else None,
        tflops=speed.side(MODE_SIDE).tflops if speed else None,
        accuracy=conv.accuracy if conv else None,
        memory_verdict=mem.verdict if mem else None,
        convergence=conv.verdict if conv else None,
        messages=messages,
        across=wall.across() if wall is not None else None,
        max_batch_searched=mem.batch_searched if mem else True,
        gated=gated,
    )


def _first(*values: float | None) -> float | None:
    for v in values:
        if v is not None and v is not False:
            return v
    return None


def _fp32_rows(run: Run) -> dict[str, Row]:
    """Per model, the fp32 line from the fp32 side's figures its first speed cell that has them carries,
    for a model without an fp32 cell of its own (so its table still reads fp32 first)."""
    rows: dict[str, Row] = {}
    for c in run.of_kind(SpeedRecord):
        step_ms, fp32 = c.ratio(WALL).side(FP32_SIDE).step_ms, c.side(FP32_SIDE)
        if model_of(c) not in rows and (step_ms is not None or fp32.throughput is not None):
            rows[model_of(c)] = Row(
                mode=FP32_MODE, step_ms=step_ms, step_ms_ref=None, throughput=fp32.throughput,
                speedup=None, speedup_value=None, baseline=None, verdict=None,
                peak_mem=fp32.peak_mem_bytes, memory_ratio=None, max_batch=None, max_batch_ratio=None,
                tflops=None, accuracy=None, fp32_only=True,
            )
    return rows


def verdict_counts(cells: Iterable[Record]) -> dict[str, dict[Verdict | str, int]]:
    """Per kind, how many cells got each verdict (in VERDICT_ORDER; a cell without one counts as a dash)."""
    counts: dict[str, dict[Verdict | str, int]] = {}
    for c in cells:
        per = counts.setdefault(c.kind, {})
        v = c.verdict or DASH
        per[v] = per.get(v, 0) + 1
    rank: dict[Verdict | str, int] = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return {k: dict(sorted(v.items(), key=lambda kv: rank.get(kv[0], len(rank)))) for k, v in counts.items()}


def foreign_note(run: Run) -> str:
    names = ", ".join(run.foreign[:8]) + (f" and {len(run.foreign) - 8} more" if len(run.foreign) > 8 else "")
    return (f"{len(run.foreign)} benchmark(s) carry no ampbench results and are left out: {names}. "
            "An ampbench test that failed before recording its figures (e.g. out of memory) looks like this.")


def attention(run: Run) -> list[Record]:
    """Cells whose own verdict (against this GPU's baseline) needs a look: failures first, then warnings."""
    return sorted((c for c in run.cells if c.verdict is not None and c.verdict.needs_a_look),
                  key=lambda c: (NEEDS_A_LOOK.index(c.verdict), c.test_id))
