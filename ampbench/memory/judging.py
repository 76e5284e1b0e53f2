"""The verdict of a memory cell: its figures (``memory_figures``), where the search starts from a baseline
(``search_start``), and ``judge``, which judges the figures against the baseline entry. A cell that did
not search its largest batch (the quick tier) has the default batch's figures only, and is judged on
those."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from ampbench.baselines.entries import MemoryEntry
from ampbench.baselines.file import CARRIED_FIGURES
from ampbench.memory.search import gib
from ampbench.results import MemoryRecord
from ampbench.stats import median
from ampbench.verdict import RatioCheck, Verdict

if TYPE_CHECKING:
    from ampbench.memory.probe import CellMemory


# Two caps this close (relative) give comparable largest batches; farther apart the batch is not judged
# against the baseline (the ratios still are).
CAP_MATCH = 0.01


def allocator_config() -> str | None:
    """PYTORCH_CUDA_ALLOC_CONF (e.g. expandable_segments) changes fragmentation, so the largest batch."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or None


# What a cell says in place of its largest batch where it did not search it.
NOT_SEARCHED = ("largest batch not searched (the quick tier measures the default batch only; "
                "--perf-tier full searches it)")


def searched(figures: dict) -> bool:
    """Whether a cell's figures hold a largest batch."""
    return figures.get("max_batch") is not None


@dataclass(frozen=True)
class MemoryJudgement:
    verdict: Verdict
    message: str
    failures: tuple[str, ...]  # one message per figure beyond its tolerance


def summary(model: str, mode: str, f: dict) -> str:
    """One line of what a memory cell measured, from its figures (``memory_figures``)."""
    head = f"{model} {mode}: peak {gib(f['peak_mem_bytes'])} at batch {f['batch_size']} ({f['memory_ratio']:.3f}x fp32)"
    if not searched(f):
        return f"{head}; {NOT_SEARCHED}"
    plus = "+" if f.get("max_batch_limited") else ""
    ref_plus = "+" if f.get("max_batch_ref_limited") else ""
    return (
        f"{head}; largest batch {f['max_batch']}{plus} "
        f"({f['max_batch_ratio']:.2f}x fp32's {f['max_batch_ref']}{ref_plus}) under a cap of {gib(f['cap_bytes'])}; "
        f"{f['max_batch_throughput']:,.0f} samples/s there ({f['max_batch_throughput_ratio']:.2f}x fp32 at its largest)"
    )


def same_budget(baseline: MemoryEntry, cap_bytes: float, alloc_conf: str | None) -> bool:
    """Whether a baseline entry's largest batch was found under this cap and these allocator settings."""
    base_cap = baseline.cap_bytes
    return (isinstance(base_cap, (int, float)) and base_cap > 0 and abs(cap_bytes / base_cap - 1.0) <= CAP_MATCH
            and baseline.alloc_conf == alloc_conf)


def search_start(baseline: MemoryEntry | None, cap_bytes: float) -> tuple[int, int] | None:
    """(largest batch, grid step) of a baseline entry found under this cap and this process's allocator
    settings, where the search starts; None where there is none, and the search goes blind."""
    if not baseline or not same_budget(baseline, cap_bytes, allocator_config()):
        return None
    batch, step = baseline.max_batch, baseline.max_batch_step
    if not (_positive_int(batch) and _positive_int(step)):
        return None
    return batch, step


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def judge(model: str, mode: str, figures: dict, baseline: MemoryEntry | None, tolerance: float) -> MemoryJudgement:
    """Judge a memory cell's figures against its baseline entry.

    Peak memory and its ratio to fp32 must not grow by more than `tolerance`; the largest batch and its
    ratio must not shrink by more than `tolerance` plus the search's grid step, and are compared only
    when this cell searched it, the baseline was recorded under the same cap and allocator settings and
    neither side stopped at the batch limit. Throughput at the largest batch is reported against the
    baseline, not judged: it is timed in one to three steps.
    """
    head = summary(model, mode, figures)
    if baseline is None:
        return MemoryJudgement(Verdict.NO_BASELINE, f"{head}; no baseline for this GPU", ())

    checks: list[tuple[RatioCheck, float]] = []
    notes: list[str] = []

    def check_figure(expected: object, name: str, figure: str, worse: str, slack: float = 0.0) -> None:
        """Check the cell's figure `name` against the entry's `expected` value of it."""
        if isinstance(expected, (int, float)) and not isinstance(expected, bool) and expected > 0:
            checks.append((RatioCheck(model, mode, figure,
                                      float(expected), tolerance + slack, worse), float(figures[name])))

    check_figure(baseline.peak_mem_bytes, "peak_mem_bytes", "peak memory (bytes)", "higher")
    check_figure(baseline.memory_ratio, "memory_ratio", "memory ratio to fp32", "higher")
    base_cap = baseline.cap_bytes
    if not searched(figures):
        pass  # the head says so; a baseline's largest batch waits for a run that searches
    elif not same_budget(baseline, figures["cap_bytes"], figures.get("alloc_conf")):
        notes.append(
            "largest batch not compared: baseline recorded under a cap of "
            f"{gib(base_cap) if isinstance(base_cap, (int, float)) else 'n/a'} "
            f"and allocator settings {baseline.alloc_conf!r}, this run {gib(figures['cap_bytes'])} and "
            f"{figures.get('alloc_conf')!r}"
        )
    elif figures.get("max_batch_limited") or baseline.max_batch_limited:
        notes.append("largest batch not compared: the search stopped at the batch limit")
    else:
        own = figures["max_batch_step"] / figures["max_batch"]
        check_figure(baseline.max_batch, "max_batch", "largest batch", "lower", own)
        if not figures.get("max_batch_ref_limited"):
            check_figure(baseline.max_batch_ratio, "max_batch_ratio", "largest batch ratio to fp32", "lower",
                         own + figures["max_batch_ref_step"] / figures["max_batch_ref"])

    failures = tuple(msg for check, value in checks if (msg := check.failure(value)) is not None)
    improved = [c for c, v in checks if c.improved(v)]
    compared = "; ".join(f"{c.figure} {v:.4g} vs baseline {c.expected:.4g} ({v / c.expected - 1:+.1%})"
                         for c, v in checks)
    expected_tput = baseline.max_batch_throughput_ratio
    if isinstance(expected_tput, (int, float)) and expected_tput > 0 and figures.get("max_batch_throughput_ratio"):
        notes.append(f"max-batch throughput ratio {figures['max_batch_throughput_ratio']:.3f}x vs baseline "
                     f"{expected_tput:.3f}x (reported, not held)")
    if failures:
        verdict = Verdict.REGRESSION
    elif improved:
        verdict = Verdict.IMPROVED
    else:
        verdict = Verdict.PASS
    parts = [head, f"against baseline (tolerance {tolerance:.1%}): {compared or 'no comparable figures'}"] + notes
    return MemoryJudgement(verdict, "; ".join(parts), failures)


def memory_figures(cell: CellMemory, fp32: CellMemory) -> dict:
    """The figures of a memory cell, named flat as baselines store them (scalars only; the probe log is
    added by the test): its record nests a side's and the search's (``MemoryRecord.of_figures``). Without
    a search the largest batch's figures are left out, not zeroed: ``max_batch_searched`` says why they
    are missing."""
    if cell.searched != fp32.searched:
        raise ValueError(
            f"{cell.model} {cell.mode}: the cell {'searched' if cell.searched else 'did not search'} its largest "
            f"batch and fp32's reference {'did' if fp32.searched else 'did not'}; both must be measured alike")
    figures: dict[str, Any] = {
        "batch_size": cell.breakdown.batch_size,
        "peak_mem_bytes": cell.peak_bytes,
        "peak_mem_ref_bytes": fp32.peak_bytes,
        "memory_ratio": cell.peak_bytes / fp32.peak_bytes,
        "max_batch_searched": cell.searched,
    }
    if cell.searched:
        figures.update(_search_figures(cell, fp32))
    figures.update({
        "cell_seconds": cell.seconds,
        "warmup_steps": cell.warmup_steps,
        "cudnn_benchmark": False,
        **{f"allocator_{k}": v for k, v in cell.allocator_events.items()},
        **cell.breakdown.figures(),
    })
    return figures


def _search_figures(cell: CellMemory, fp32: CellMemory) -> dict:
    """The largest batch's figures of a cell whose search ran, and fp32's beside them."""
    s, r = cell.search, fp32.search
    throughput, throughput_ref = cell.throughput, fp32.throughput
    assert s is not None and r is not None, "called where both cells searched"
    assert throughput is not None and throughput_ref is not None, "a search is followed by steps timed at its batch"
    return {
        "max_batch": s.max_batch,
        "max_batch_ref": r.max_batch,
        "max_batch_ratio": s.max_batch / r.max_batch,
        "max_batch_step": s.granularity,
        "max_batch_ref_step": r.granularity,
        "max_batch_limited": s.limited,
        "max_batch_ref_limited": r.limited,
        "max_batch_limit": s.limit,
        "max_batch_confirmed": s.confirmed,
        "max_batch_next_failing": s.next_failing,
        "max_batch_predicted": s.predicted,
        "max_batch_search_start": s.started_at,
        "max_batch_peak_bytes": s.peak_at(s.max_batch),
        "max_batch_throughput": throughput,
        "max_batch_throughput_ref": throughput_ref,
        "max_batch_throughput_ratio": throughput / throughput_ref,
        "max_batch_step_ms": median(cell.step_seconds) * 1e3,
        "search_steps": s.steps,
        "search_seconds": cell.search_seconds,
        "cap_bytes": cell.cap_bytes,
        "alloc_conf": allocator_config(),
        "max_batch_timed_alloc_retries": cell.timed_alloc_retries,
    }


# what a baseline entry of test_memory keeps: the default batch's figures, and the largest batch's with
# the budget it was found under, where the cell searched it (a recording without them keeps the old
# entry's: baselines.CARRIED_FIGURES)
DEFAULT_BATCH_FIGURES = ("batch_size", "peak_mem_bytes", "memory_ratio")
SEARCH_FIGURES = CARRIED_FIGURES["test_memory"]
BASELINE_FIGURES = DEFAULT_BATCH_FIGURES + SEARCH_FIGURES


def memory_record(cell: CellMemory, fp32: CellMemory, device: str, baseline: MemoryEntry | None,
                  tolerance: float) -> tuple[MemoryRecord, MemoryJudgement]:
    """The record of a memory cell, judged against its baseline entry, and the judgement it carries
    (whose failures name each figure beyond its tolerance)."""
    figures = memory_figures(cell, fp32)
    judgement = judge(cell.model, cell.mode, figures, baseline, tolerance)
    record = MemoryRecord.of_figures(
        model=cell.model, mode=cell.mode, device=device, **figures,
        search_probes=[[p["batch"], p["peak_bytes"], p["reserved_peak_bytes"], p["seconds"], p["alloc_retries"]]
                       for p in cell.probe_log],
        search=cell.search.describe() if cell.search is not None else None,
        baseline_memory_ratio=baseline.memory_ratio if baseline else None,
        baseline_max_batch=baseline.max_batch if baseline else None,
        tolerance=tolerance, verdict=judgement.verdict, message=judgement.message,
    )
    return record, judgement


def baseline_figures(record: MemoryRecord) -> dict:
    """What a baseline entry of test_memory keeps of a cell's record: without a search, the default
    batch's figures only (the merge then keeps the entry's largest batch, see baselines.CARRIED_FIGURES)."""
    names = BASELINE_FIGURES if record.batch_searched else DEFAULT_BATCH_FIGURES
    return {name: record.entry_value(name) for name in names}
