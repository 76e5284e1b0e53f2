"""Formatting of a run's figures for people: the fmt_* helpers, verdict labels and the per-model tables
(Row, model_rows) that the Markdown and HTML pages share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from ampbench.report.run import DASH, REFERENCE_MODE, Cell, Run, order_modes
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict

VERDICT_ICONS = {
    Verdict.PASS.value: "✅",
    Verdict.IMPROVED.value: "🚀",
    Verdict.REGRESSION.value: "❌",
    Verdict.INCONCLUSIVE.value: "⚠️",
    Verdict.NO_BASELINE.value: "➖",
}
NEEDS_A_LOOK = (Verdict.REGRESSION.value, Verdict.INCONCLUSIVE.value)
# the order verdicts are listed in: what needs a look first
VERDICT_ORDER = (
    Verdict.REGRESSION.value,
    Verdict.INCONCLUSIVE.value,
    Verdict.IMPROVED.value,
    Verdict.PASS.value,
    Verdict.NO_BASELINE.value,
)


# ---------------------------------------------------------------------------------------------------
# formatting


def fmt_number(value: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return DASH if value is None else f"{value:{spec}}{suffix}"


def fmt_ms(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:.3g} ms" if value < 100 else f"{value:,.0f} ms"


def fmt_rate(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:,.0f}/s" if value >= 100 else f"{value:.3g}/s"


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return DASH
    mib = value / 2**20
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def fmt_speedup(est: SpeedupEstimate | None, value: float | None = None) -> str:
    if est is not None:
        return f"{est.speedup:.2f}x [{est.low:.2f}, {est.high:.2f}]"
    return fmt_number(value, ".2f", "x")


def fmt_pct(value: float | None) -> str:
    return DASH if value is None else f"{value:+.1%}"


def fmt_accuracy(value: float | None) -> str:
    if value is None:
        return DASH
    # the suite may write a fraction or a percentage
    return f"{value:.2%}" if value <= 1.0 else f"{value:.2f}%"


def verdict_label(verdict: str | None) -> str:
    if not verdict:
        return DASH
    return f"{VERDICT_ICONS.get(verdict, '')} {verdict}".strip()


# ---------------------------------------------------------------------------------------------------
# tables


@dataclass(frozen=True)
class Row:
    """One line of a per-model table: one precision mode of one model, all kinds merged."""

    mode: str
    step_ms: float | None
    throughput: float | None
    speedup: SpeedupEstimate | None
    speedup_value: float | None
    baseline: float | None
    verdict: str | None  # the speed verdict
    peak_mem: float | None
    memory_ratio: float | None
    max_batch: float | None
    max_batch_ratio: float | None
    tflops: float | None
    accuracy: float | None
    memory_verdict: str | None = None
    convergence: str | None = None  # the convergence verdict
    messages: tuple[str, ...] = ()
    reference_only: bool = False  # built from the fp32 figures a speed cell carries, not a cell of its own
    across: tuple[float, float] | None = None  # the speedup's interval across runs, where known

    def cells(self) -> list[str]:
        """The row as text, in the order of ROW_HEADERS."""
        speed = fmt_speedup(self.speedup, self.speedup_value)
        if self.reference_only:
            speed = "1.00x (reference)"
        elif self.across is not None:
            speed += f"; across runs [{self.across[0]:.2f}, {self.across[1]:.2f}]"
        memory = fmt_bytes(self.peak_mem)
        if self.memory_ratio is not None:
            memory = f"{memory} ({self.memory_ratio:.2f}x)" if self.peak_mem is not None else f"{self.memory_ratio:.2f}x"
        batch = fmt_number(self.max_batch, ".0f")
        if self.max_batch_ratio is not None and self.max_batch is not None:
            batch = f"{batch} ({self.max_batch_ratio:.2f}x)"
        accuracy = fmt_accuracy(self.accuracy)
        if self.convergence and self.accuracy is None:
            accuracy = self.convergence
        return [
            self.mode,
            fmt_ms(self.step_ms),
            fmt_rate(self.throughput),
            speed,
            fmt_number(self.baseline, ".2f", "x"),
            verdict_label(self.verdict),
            memory,
            batch,
            fmt_number(self.tflops, ".3g"),
            accuracy,
        ]

    def flags(self) -> dict[int, str | None]:
        """Column index -> the verdict of the test behind that figure, for figures other than speed."""
        col = ROW_HEADERS.index
        return {col("peak memory (ratio)"): self.memory_verdict, col("largest batch (ratio)"): self.memory_verdict,
                col("accuracy"): self.convergence}

    def marked_cells(self, mark: Callable[[str, str | None], str]) -> list[str]:
        cells, flags = self.cells(), self.flags()
        return [mark(c, flags[i]) if i in flags else c for i, c in enumerate(cells)]


ROW_HEADERS = [
    "mode",
    "step time",
    "throughput",
    "speedup over fp32 [interval]",
    "baseline",
    "speed verdict",
    "peak memory (ratio)",
    "largest batch (ratio)",
    "TFLOP/s",
    "accuracy",
]


def model_rows(run: Run) -> dict[str, list[Row]]:
    """Per model, one Row per mode: the seeds' table (mode, time, memory, accuracy) with the suite's
    speedup, interval and verdict beside it."""
    tables: dict[str, list[Row]] = {}
    for model in run.models():
        rows = []
        modes = order_modes(c.mode for c in run.cells if c.model == model)
        for mode in modes:
            speed = run.cell("speed", model, mode)
            mem = run.cell("memory", model, mode)
            conv = run.cell("convergence", model, mode)
            if speed is None and mem is None and conv is None:
                continue  # e.g. only an input-pipeline cell: listed in its own table
            messages = tuple(
                f"{c.kind}: {c.get('message')}" for c in (speed, mem, conv) if c is not None and c.get("message")
            )
            rows.append(
                Row(
                    mode=mode,
                    step_ms=speed.number("step_ms") if speed else None,
                    throughput=speed.number("throughput") if speed else None,
                    speedup=speed.estimate() if speed else None,
                    speedup_value=speed.number("speedup") if speed else None,
                    baseline=speed.number("baseline_speedup") if speed else None,
                    verdict=speed.verdict if speed else None,
                    peak_mem=_first(mem and mem.number("peak_mem_bytes"), speed and speed.number("peak_mem_bytes")),
                    memory_ratio=_first(mem and mem.number("memory_ratio"), speed and speed.number("memory_ratio")),
                    max_batch=mem.number("max_batch") if mem else None,
                    max_batch_ratio=mem.number("max_batch_ratio") if mem else None,
                    tflops=speed.number("tflops") if speed else None,
                    accuracy=conv.number("accuracy") if conv else None,
                    memory_verdict=mem.verdict if mem else None,
                    convergence=conv.verdict if conv else None,
                    messages=messages,
                    across=speed.across_runs() if speed else None,
                )
            )
        if rows and REFERENCE_MODE not in modes:
            ref = _reference_row(run, model)
            if ref is not None:
                rows.insert(0, ref)
        if rows:
            tables[model] = rows
    return tables


def _first(*values: float | None) -> float | None:
    for v in values:
        if v is not None and v is not False:
            return v
    return None


def _reference_row(run: Run, model: str) -> Row | None:
    """The fp32 line from the reference figures every speed cell carries, where the run has no fp32
    cell of its own (so the table still reads like the seeds': fp32 first)."""
    for c in run.of_kind("speed"):
        if c.model == model and (c.number("step_ms_ref") is not None or c.number("throughput_ref") is not None):
            return Row(
                mode=REFERENCE_MODE, step_ms=c.number("step_ms_ref"), throughput=c.number("throughput_ref"),
                speedup=None, speedup_value=None, baseline=None, verdict=None,
                peak_mem=c.number("peak_mem_ref_bytes"), memory_ratio=None, max_batch=None, max_batch_ratio=None,
                tflops=None, accuracy=None, reference_only=True,
            )
    return None


def verdict_counts(cells: Iterable[Cell]) -> dict[str, dict[str, int]]:
    """Per kind, how many cells got each verdict (in VERDICT_ORDER, then others)."""
    counts: dict[str, dict[str, int]] = {}
    for c in cells:
        per = counts.setdefault(c.kind, {})
        v = c.verdict or DASH
        per[v] = per.get(v, 0) + 1
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return {k: dict(sorted(v.items(), key=lambda kv: rank.get(kv[0], len(rank)))) for k, v in counts.items()}


def foreign_note(run: Run) -> str:
    names = ", ".join(run.foreign[:8]) + (f" and {len(run.foreign) - 8} more" if len(run.foreign) > 8 else "")
    return (f"{len(run.foreign)} benchmark(s) carry no ampbench results and are left out: {names}. "
            "An ampbench test that failed before recording its figures (e.g. out of memory) looks like this.")


def attention(run: Run) -> list[Cell]:
    """Cells whose own verdict (against this GPU's baseline) needs a look: regressions first."""
    return sorted((c for c in run.cells if c.verdict in NEEDS_A_LOOK),
                  key=lambda c: (NEEDS_A_LOOK.index(c.verdict), c.test_id))
