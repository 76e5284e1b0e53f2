"""Records of the cells that are not timed against fp32 in rounds: memory, convergence, the input
pipeline and the underflow demonstration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from ampbench.results.base import FigureGroup, Group, Record, checked, flag, number, part, raw, text
from ampbench.results.schema import (
    ACCURACY,
    BOOLEAN,
    FLAT_SEARCH_SCHEMAS,
    FP32_SIDE,
    MODE_SIDE,
    NON_NEGATIVE,
    POSITIVE,
    SIDES_KEY,
)


@dataclass(frozen=True)
class MemorySide(FigureGroup):
    """One side of a memory cell (the mode's, fp32's): its peak at the default batch, and the largest batch
    it fits under the cap where the cell searched it, with the search's grid step, whether it stopped at
    the batch limit, and the samples per second there."""

    peak_mem_bytes: int | None = number()
    max_batch: int | None = number()
    max_batch_step: int | None = number()  # the search's grid step
    max_batch_limited: bool | None = flag()  # the search stopped at the batch limit, not at the cap
    max_batch_throughput: float | None = number()


@dataclass(frozen=True)
class MemorySearch(FigureGroup):
    """How a memory cell's largest-batch search of the mode went (``ampbench.memory.search.SearchResult``):
    the budget it ran under, the batch limit, where it started, the line's prediction, the first batch that
    ran out of memory, whether a real step confirmed the largest batch, its steps and seconds, each probe,
    and the peak, step time and allocator retries of the mode's steps at the largest batch."""

    cap_bytes: int | None = number()  # the cap the allocator enforced during the search
    alloc_conf: str | None = text()  # PYTORCH_CUDA_ALLOC_CONF: it moves the largest batch
    text: str | None = text()  # in words: ``ampbench.memory.search.SearchResult.describe``
    limit: int | None = number()
    start: int | None = number()  # the baseline's largest batch it started from; None: it searched blind
    predicted: int | None = number()
    next_failing: int | None = number()
    confirmed: bool | None = flag()
    steps: int | None = number()
    seconds: float | None = number()
    # [batch, peak bytes, reserved peak bytes, seconds, alloc retries] per step the cell took, the default
    # batch's first (the search's first point): a cell that did not search holds that one
    probes: list | None = raw()
    peak_bytes: int | None = number()
    step_ms: float | None = number()  # the steps timed at the largest batch, the cap lifted
    timed_alloc_retries: int | None = number()


# the key of a memory record that holds its search (``MemorySearch``)
SEARCH_KEY = "max_batch_search"


@dataclass(frozen=True)
class MemoryRecord(Record):
    """``test_memory[model-mode]``: the peak of a training step and its ratio to fp32's, the confirmed
    largest batch under the memory cap and its ratio to fp32's, the throughput there, and how the search
    went (the largest batch's figures are None where the cell did not search it: the quick tier). Where a step's memory
    goes (weights, gradients, masters, optimizer state, activations...) and the allocator's counters
    are open-ended, and kept in `detail`."""

    KIND: ClassVar[str] = "memory"
    TIMED: ClassVar[bool] = True  # pytest-benchmark times the steps at the largest batch (see times_steps)

    batch_size: int | None = number()
    # each side's peak and largest batch, by side (``MemorySide``): the mode's and fp32's
    sides: Mapping[str, MemorySide] = part()
    # how the largest-batch search went (``MemorySearch``); a cell that did not search holds its probe only
    max_batch_search: MemorySearch = part(lambda: MemorySearch())
    memory_ratio: float | None = checked(POSITIVE)
    # False: the quick tier measured the default batch only. A key of its own, beside the search: whether
    # pytest-benchmark timed the cell is read off it (``times_steps``) in a run of any schema
    max_batch_searched: bool | None = flag()
    max_batch_ratio: float | None = checked(POSITIVE)
    max_batch_throughput_ratio: float | None = number()
    cell_seconds: float | None = number()
    warmup_steps: int | None = number()
    cudnn_benchmark: bool | None = flag()
    baseline_memory_ratio: float | None = number()
    baseline_max_batch: int | None = number()
    tolerance: float | None = checked(NON_NEGATIVE)

    # what tables show in place of the largest batch of a cell that did not search it
    NOT_SEARCHED: ClassVar[str] = "not searched"
    # its sides' figures, and the keys records of schemas 1 and 2 (and its baseline entry) give them, flat;
    # its search's, and the keys records of schemas 1 to 3 (and its baseline entry: the budget) give them
    GROUPS: ClassVar[Mapping[str, Group]] = {
        SIDES_KEY: Group(MemorySide, by_side=True, flat={
            MODE_SIDE: {"peak_mem_bytes": "peak_mem_bytes", "max_batch": "max_batch",
                        "max_batch_step": "max_batch_step", "max_batch_limited": "max_batch_limited",
                        "max_batch_throughput": "max_batch_throughput"},
            FP32_SIDE: {"peak_mem_bytes": "peak_mem_ref_bytes", "max_batch": "max_batch_ref",
                        "max_batch_step": "max_batch_ref_step", "max_batch_limited": "max_batch_ref_limited",
                        "max_batch_throughput": "max_batch_throughput_ref"}}),
        SEARCH_KEY: Group(MemorySearch, flat_schemas=FLAT_SEARCH_SCHEMAS, flat={
            "cap_bytes": "cap_bytes", "alloc_conf": "alloc_conf", "text": "search", "limit": "max_batch_limit",
            "start": "max_batch_search_start", "predicted": "max_batch_predicted",
            "next_failing": "max_batch_next_failing", "confirmed": "max_batch_confirmed", "steps": "search_steps",
            "seconds": "search_seconds", "probes": "search_probes", "peak_bytes": "max_batch_peak_bytes",
            "step_ms": "max_batch_step_ms", "timed_alloc_retries": "max_batch_timed_alloc_retries"}),
    }

    @classmethod
    def of_figures(cls, **values: Any) -> "MemoryRecord":
        """The record of a memory cell's figures, named flat as its baseline entry names them
        (``memory.judging.memory_figures``): each side's into its side, the search's into the search."""
        grouped = frozenset(k for group in cls.GROUPS.values() for k in group.flat_names())
        rest = {k: v for k, v in values.items() if k not in grouped}
        return cls.build(**rest, **{key: group.from_flat(values) for key, group in cls.GROUPS.items()})

    def entry_value(self, name: str) -> Any:
        """A figure by the name its baseline entry gives it: the search's budget is the search's, a side's
        figures are the mode's."""
        value = self.value(name)
        if value is not None:
            return value
        search = {key: figure for figure, key in self.GROUPS[SEARCH_KEY].flat.items()}
        if name in search:
            return getattr(self.max_batch_search, search[name])
        return getattr(self.side(MODE_SIDE), name, None)

    @property
    def batch_searched(self) -> bool:
        """Whether the cell searched its largest batch (cells written before the flag existed all did)."""
        return self.max_batch_searched is not False

    @classmethod
    def times_steps(cls, info: Mapping[str, Any]) -> bool:
        # without a search no step is timed: pytest-benchmark's one round only keeps the cell in its JSON
        return info.get("max_batch_searched") is not False


@dataclass(frozen=True)
class ConvergenceRecord(Record):
    """``test_convergence[model-mode]``: the held-out accuracy a mode reaches from fp32's seed, data and
    budget, against fp32's within a margin, with the loss curve."""

    KIND: ClassVar[str] = "convergence"

    data: str | None = text()
    image_shape: list | None = raw()
    steps: int | None = number()
    batch_size: int | None = number()
    seed: int | None = number()
    accuracy: float | None = checked(ACCURACY)
    accuracy_ref: float | None = checked(ACCURACY)
    reference: str | None = text()  # the parity mode: "fp32", or "amp_bf16 compiled" for fp8
    margin: float | None = number()
    min_accuracy: float | None = number()
    loss_curve: list | None = raw()
    nonfinite_steps: list | None = raw()
    train_seconds: float | None = number()
    baseline_margin: float | None = number()
    expected_to_lag: bool | None = flag()
    reason: str | None = text()  # what the verdict does not say: "below margin" for a regression or a lag

    @property
    def accuracy_delta(self) -> float | None:
        """The mode's accuracy minus fp32's, in the scale the cell wrote them."""
        return None if self.accuracy is None or self.accuracy_ref is None else self.accuracy - self.accuracy_ref


@dataclass(frozen=True)
class PipelineRecord(Record):
    """``test_input_pipeline[model-mode]``: samples/s of the step fed by a real DataLoader against the
    same step on resident batches, and whether the loader caps it."""

    KIND: ClassVar[str] = "input_pipeline"

    data: str | None = text()
    batch_size: int | None = number()
    steps: int | None = number()
    workers: int | None = number()
    pin_memory: bool | None = flag()
    throughput_resident: float | None = number()
    throughput_loader: float | None = number()
    throughput_loader_only: float | None = number()
    loader_ratio: float | None = number()
    input_bound: bool | None = checked(BOOLEAN)
    input_bound_ratio: float | None = number()
    loader_headroom: float | None = number()


@dataclass(frozen=True)
class UnderflowRecord(Record):
    """``test_underflow_without_loss_scaling``: the same fp16 run without and with a loss scale, and how
    many gradient elements flushed to zero in each."""

    KIND: ClassVar[str] = "underflow"

    data: str | None = text()
    steps: int | None = number()
    loss_factor: float | None = number()
    grad_median: float | None = number()
    fp16_smallest_subnormal: float | None = number()
    loss_scale: float | None = number()
    accuracy_ref: float | None = number()
    accuracy_unscaled: float | None = number()
    accuracy_scaled: float | None = number()
    underflow_unscaled: float | None = number()
    underflow_scaled: float | None = number()
    weights_moved_unscaled: bool | None = flag()
    loss_curve_unscaled: list | None = raw()
    loss_curve_scaled: list | None = raw()
    loss_curve: list | None = raw()
