"""The device side of the memory cells: the cap (``cap_bytes_for``, ``nominal_cap_bytes``) and the
allocator limit that enforces it, real training steps at chosen batches (``_Prober``) with their
out-of-memory recovery, and ``measure_memory``, which wires the search to them on a CUDA device (the out-of-memory
recovery shown on its own: ``ampbench.memory.recovery``)."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from ampbench.device import cudnn_heuristics, first_line, is_out_of_memory, prime_libraries, release
from ampbench.memory import limit
from ampbench.memory.breakdown import _EVENTS, Breakdown, _alloc_retries, _allocator_stats, resident_bytes
from ampbench.memory.search import GIB, SearchError, SearchResult, find_largest_batch, gib
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.speed.timing import peak_memory_bytes, sync, time_block
from ampbench.stats import median
from ampbench.train import Trainer

# Default cap: this fraction of the card's total memory, at most DEFAULT_CAP_CEILING. Total, not free:
# a baseline recorded on one H100 80GB must mean the same budget on every other, whatever size of
# driver context. The ceiling makes every card of 27 GB or more search under the same 24 GiB, so
# their largest batches compare; and a step at the largest batch costs time in proportion to it
# (docs/design.md, "Where the constants come from"). The ratios to fp32, which
# are what the tests hold, barely depend on the cap once weights and optimizer state are small next to
# it. Only where the card is shared and has less free does the default shrink to FREE_SHARE of what
# is free (then the largest batch is not held against a baseline recorded under another cap).
DEFAULT_CAP_FRACTION = 0.9
DEFAULT_CAP_CEILING = 24 * GIB
FREE_SHARE = 0.95
# The search stops at this multiple of the model's default batch: beyond it the largest batch is
# absurd for training (the MLP would reach ~500k samples) and each confirming step would cost seconds.
MAX_BATCH_FACTOR = 256
# Training steps per probe. One decides "fits" for the first step from an empty cache; the timed steps
# that follow reuse its cached blocks. Set 2 if a largest batch ever fits once and then not again.
STEPS_PER_PROBE = 1
# Timed steps at the largest batch: about this many seconds, between 1 and 3 steps (the throughput
# there is reported, not held, so a few steps do).
TIMED_SECONDS = 0.25
MAX_TIMED_ROUNDS = 3
# Warm-up steps at most, until the optimizer holds its state (scaled steps that overflow are skipped,
# and a skipped first step creates no momentum or Adam moments).
MAX_WARMUP_STEPS = 32

NO_CUDA_REASON = (
    "memory figures need CUDA's caching allocator (max_memory_allocated, memory_stats, "
    "set_per_process_memory_fraction); on the CPU the search logic is covered by tests/test_memory_search.py"
)

# what a memory cell's failure says where it ran out of memory
OUT_OF_MEMORY = "out of memory during"


class MemoryMeasurementError(RuntimeError):
    """A memory cell could not be measured (out of memory where it must fit, a cap the card cannot
    give); the message names model, mode, batch and the figures seen. `out_of_memory` tells the first
    kind, which a memory limit explains (``plugin.fixtures.out_of_memory``), from the others."""

    def __init__(self, message: str, *, out_of_memory: bool = False) -> None:
        super().__init__(message)
        self.out_of_memory = out_of_memory


def nominal_cap_for(total_bytes: int) -> int:
    """The default cap of an idle card with this much memory."""
    return int(min(DEFAULT_CAP_FRACTION * total_bytes, DEFAULT_CAP_CEILING))


def default_cap_bytes(device: torch.device) -> int:
    free, total = torch.cuda.mem_get_info(device)
    return int(min(nominal_cap_for(total), FREE_SHARE * free))


def nominal_cap_bytes(device: torch.device) -> int:
    """The default cap of an idle card of this kind."""
    return nominal_cap_for(torch.cuda.mem_get_info(device)[1])


def cap_bytes_for(device: torch.device, cap_gib: float | None) -> int:
    """--perf-memory-cap in bytes, or the default fraction of this card."""
    return int(cap_gib * GIB) if cap_gib is not None else default_cap_bytes(device)


def batch_limit(spec: ModelSpec, smoke: bool = False) -> int:
    return MAX_BATCH_FACTOR * spec.batch_size_for(smoke)


@contextlib.contextmanager
def process_memory_limit(device: torch.device, limit_bytes: int) -> Iterator[float]:
    """The caching allocator refuses to hold more than `limit_bytes` on `device` for the duration
    (``set_per_process_memory_fraction``), then the previous fraction is restored so later tests get
    the whole card again. Yields the fraction set."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    _, total = torch.cuda.mem_get_info(index)
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    # under --perf-memory-limit the cap never lifts the run's limit, nor does restoring the fraction after it
    previous = limit.limited_fraction(device, float(getter(index)) if getter is not None else 1.0)
    fraction = limit.limited_fraction(device, min(1.0, limit_bytes / total))
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    try:
        yield fraction
    finally:
        torch.cuda.set_per_process_memory_fraction(previous, index)


class _Prober:
    """Real training steps at chosen batch sizes on one trainer: the model is built once per cell,
    only its batch changes (building GPT-2 small alone takes about a second of CPU)."""

    def __init__(self, trainer: Trainer, base_allocated: int, base_reserved: int):
        self.trainer, self.device = trainer, trainer.device
        self.base_allocated, self.base_reserved = base_allocated, base_reserved
        self.warm_batch: int | None = None  # batch of the last step that completed (its blocks are cached)
        self.log: list[dict] = []  # batch, peak, reserved peak, seconds of every step

    def set_batch(self, batch: int | None) -> None:
        t = self.trainer
        t.use_batch(None)  # the old batch goes before the new one is made
        if batch is not None:
            gen = torch.Generator(device=self.device).manual_seed(0)
            t.use_batch(t.prepare(t.spec.make_batch(t.config, batch, self.device, gen)))
            t.batch_size = batch

    def peak(self, batch: int) -> int:
        """One step at `batch` from an emptied cache, so every probe starts from the same allocator
        state; returns its allocated peak. Raises on out of memory (see ``recover``)."""
        self.warm_batch = None
        entry: dict = {"batch": batch, "peak_bytes": None, "reserved_peak_bytes": None, "seconds": None,
                       "alloc_retries": None}
        self.log.append(entry)
        # every probe starts from the same live set (weights, optimizer state) and an empty cache: a
        # block split from a cached one is counted whole, so the peak would otherwise depend on history
        self.set_batch(None)
        self.trainer.model.zero_grad(set_to_none=True)
        torch.cuda.empty_cache()
        self.set_batch(batch)
        sync(self.device)
        retries = _alloc_retries(self.device)
        t0 = time.perf_counter()
        entry["peak_bytes"] = peak_memory_bytes(self.trainer, self.base_allocated, STEPS_PER_PROBE)
        entry["seconds"] = (time.perf_counter() - t0) / STEPS_PER_PROBE
        entry["alloc_retries"] = _alloc_retries(self.device) - retries
        entry["reserved_peak_bytes"] = torch.cuda.max_memory_reserved(self.device) - self.base_reserved
        self.warm_batch = batch
        return entry["peak_bytes"]

    def recover(self) -> None:
        """After an out-of-memory step: drop the batch and the half-made gradients, forget the loss
        scaler's per-step bookkeeping (a step that died inside ``torch.amp.GradScaler.step`` would make the
        next one refuse to unscale), collect and empty the cache."""
        self.warm_batch = None
        self.set_batch(None)
        self.trainer.model.zero_grad(set_to_none=True)
        for name in ("_per_optimizer_states", "_per_optimizer"):  # GradScaler, ampbench.loss_scaler.LossScaler
            states: Any = getattr(self.trainer.scaler, name, None)
            if hasattr(states, "clear"):
                states.clear()
        release(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)


def warm_up_optimizer(trainer: Trainer) -> int:
    """Steps until the optimizer holds its state; returns how many ran. The first step also makes
    the library handles and workspaces that persist, so the measured step does not count them."""
    steps = 0
    while steps < MAX_WARMUP_STEPS:
        trainer.run(1)
        steps += 1
        if len(trainer.optimizer.state) > 0:
            break
    sync(trainer.device)
    return steps


def step_breakdown(prober: _Prober, batch: int) -> Breakdown:
    """Peak and breakdown of one step of a warmed-up trainer at `batch`."""
    peak = prober.peak(batch)
    device = prober.device
    return Breakdown(
        batch_size=batch,
        peak_bytes=int(peak),
        steady_bytes=torch.cuda.memory_allocated(device) - prober.base_allocated,
        resident=resident_bytes(prober.trainer),
        reserved_peak_bytes=prober.log[-1]["reserved_peak_bytes"],
        allocator=_allocator_stats(device),
    )


@dataclass
class CellMemory:
    """Everything measured of one model in one mode; holds no tensors, so it can be cached."""

    model: str
    mode: str
    breakdown: Breakdown  # at the model's default batch
    search: SearchResult | None  # None where the largest batch was not searched (the quick tier)
    cap_bytes: int
    step_seconds: list[float]  # timed steps at the largest batch (CUDA events); empty without a search
    probe_log: list[dict]
    warmup_steps: int
    search_seconds: float | None
    allocator_events: dict[str, int]  # alloc retries (cache flushed under pressure) and OOMs during the cell
    timed_alloc_retries: int | None  # of those, in the uncapped steps at the largest batch (0 unless the card is full)
    seconds: float  # the whole cell, wall clock

    @property
    def peak_bytes(self) -> int:
        return self.breakdown.peak_bytes

    @property
    def searched(self) -> bool:
        return self.search is not None

    @property
    def max_batch(self) -> int | None:
        return self.search.max_batch if self.search is not None else None

    @property
    def throughput(self) -> float | None:
        """Samples per second at the largest batch; None where it was not searched."""
        if self.search is None or not self.step_seconds:
            return None
        return self.search.max_batch / median(self.step_seconds)


def _default_timed(step: Callable[[], None], rounds: int) -> None:
    for _ in range(rounds):
        step()


@dataclass
class _CellRun:
    """How far a memory cell has got: its stage and batch (for the message of a failure) and what it
    has measured so far."""

    stage: str
    batch: int
    trainer: Trainer | None = None
    prober: _Prober | None = None
    warmup_steps: int = 0
    breakdown: Breakdown | None = None
    result: SearchResult | None = None
    search_seconds: float | None = None
    seconds: list[float] = field(default_factory=list)  # timed steps at the largest batch
    timed_retries: int | None = None


def _base_memory(where: str, device: torch.device, cap_bytes: int, search: bool) -> tuple[int, int]:
    """(allocated, reserved) bytes this process holds before the cell, after priming the libraries;
    raises MemoryMeasurementError where the search's cap exceeds what the card has free."""
    prime_libraries(device)
    release(device)
    base_allocated = torch.cuda.memory_allocated(device)
    base_reserved = torch.cuda.memory_reserved(device)
    free, _ = torch.cuda.mem_get_info(device)
    # the cap is a budget on top of what this process already holds; only the search is held to it (the
    # step at the default batch runs uncapped either way), so without one a cap the card cannot give
    # stops nothing
    if search and free < cap_bytes:
        raise MemoryMeasurementError(
            f"{where}: the memory cap of {gib(cap_bytes)} exceeds the {gib(free)} free on the card "
            f"(this process holds {gib(base_reserved)}, the rest is the driver's or other processes'); "
            f"lower --perf-memory-cap"
        )
    return base_allocated, base_reserved


def _search(run: _CellRun, device: torch.device, cap_bytes: int, base_reserved: int, limit: int,
            start: tuple[int, int] | None) -> None:
    """The largest-batch search from the default batch's breakdown, under the cap."""
    breakdown, prober = run.breakdown, run.prober
    assert breakdown is not None and prober is not None, "the search follows the default batch's step"
    resident = breakdown.resident
    fixed = resident["weights"] + resident["master"] + resident["optimizer_state"]
    with process_memory_limit(device, base_reserved + cap_bytes):
        run.stage = "the largest-batch search"
        t0 = time.perf_counter()
        run.result = find_largest_batch(
            prober.peak, cap_bytes, breakdown.batch_size, first_peak=breakdown.peak_bytes,
            fixed_bytes=fixed, limit=limit, on_oom=prober.recover,
            start=start[0] if start else None, granularity=start[1] if start else None,
        )
        run.search_seconds = time.perf_counter() - t0


def _time_largest_batch(run: _CellRun, device: torch.device, timed: Callable[[Callable[[], None], int], None]) -> None:
    """Steps at the largest batch found, timed with the cap lifted: at that batch cuDNN's heuristic
    workspaces do not fit under the cap, and capped steps would time the allocator's flushes and
    retries, not the mode (docs/design.md, "Where the constants come from")."""
    trainer, prober, result = run.trainer, run.prober, run.result
    assert trainer is not None and prober is not None and result is not None, "the timed steps follow the search"
    run.batch = batch = result.max_batch
    run.stage = f"steps at the largest batch {batch}"
    retries_before = _alloc_retries(device)
    if prober.warm_batch == batch:
        # the search's last step ran at this batch: its algorithms are chosen and its blocks cached
        per_step = prober.log[-1]["seconds"]
    else:  # the search ended on a failure: the batch is made again and one untimed step warms it
        prober.set_batch(batch)
        per_step = time_block(device, lambda: trainer.run(1))
    rounds = max(1, min(MAX_TIMED_ROUNDS, math.ceil(TIMED_SECONDS / per_step)))
    timed(lambda: run.seconds.append(time_block(trainer.device, lambda: trainer.run(1))), rounds)
    run.timed_retries = _alloc_retries(device) - retries_before


def _failure(exc: Exception, where: str, run: _CellRun, device: torch.device,
             base_allocated: int) -> MemoryMeasurementError | None:
    """The report of an out-of-memory error or a failed search; None for any other error."""
    if isinstance(exc, SearchError):
        return MemoryMeasurementError(f"{where}: {exc}")
    if is_out_of_memory(exc):
        peak = torch.cuda.max_memory_allocated(device) - base_allocated
        return MemoryMeasurementError(
            f"{where}: {OUT_OF_MEMORY} {run.stage} (batch {run.batch}, peak {gib(peak)}): {first_line(exc)}",
            out_of_memory=True)
    return None


def measure_memory(
    spec: ModelSpec,
    mode: PrecisionMode,
    device: torch.device,
    cap_bytes: int,
    *,
    smoke: bool = False,
    timed: Callable[[Callable[[], None], int], None] | None = None,
    start: tuple[int, int] | None = None,
    search: bool = True,
) -> CellMemory:
    """Peak and breakdown at the default batch, the largest batch under `cap_bytes` (confirmed), and
    step times there. `timed(step, rounds)` runs the timed steps (pytest-benchmark's ``pedantic`` in
    the tests); `start` is (batch, grid step) where the search starts (see ``search_start``). cuDNN
    benchmark mode is off throughout; the cap holds during the search and is lifted for the timed
    steps. With `search` false only the default batch is measured: no search, no timed steps, and the
    cell's ``search`` is None. Raises ``MemoryMeasurementError`` with the figures seen (a failed search
    included)."""
    if device.type != "cuda":
        raise MemoryMeasurementError(f"{spec.name} {mode.name}: {NO_CUDA_REASON}")
    where = f"{spec.name} {mode.name}"
    t_start = time.perf_counter()
    base_allocated, base_reserved = _base_memory(where, device, cap_bytes, search)
    events_before = _allocator_stats(device, _EVENTS)
    run, failure = _CellRun(stage="building the trainer", batch=spec.batch_size_for(smoke)), None
    try:
        with cudnn_heuristics():
            run.trainer = Trainer(spec, mode, device, smoke=smoke)
            run.stage = "warm-up"
            run.warmup_steps = warm_up_optimizer(run.trainer)
            run.stage = "the peak at the default batch"
            run.prober = _Prober(run.trainer, base_allocated, base_reserved)
            run.breakdown = step_breakdown(run.prober, run.batch)
            if search:
                _search(run, device, cap_bytes, base_reserved, batch_limit(spec, smoke), start)
                _time_largest_batch(run, device, timed or _default_timed)
    except Exception as exc:  # noqa: BLE001 - out of memory and a failed search become a report
        # the message is built here and the exception dropped: its traceback holds the trainer
        failure = _failure(exc, where, run, device, base_allocated)
        if failure is None:
            raise
    finally:
        run.trainer = None  # the last reference; release() below frees its memory
        if run.prober is not None:
            # the prober is done with: no method of it runs after this
            run.prober.trainer = None  # type: ignore[assignment]
        release(device)
    if failure is not None:
        raise failure
    assert run.breakdown is not None and run.prober is not None, "a cell that did not fail measured its default batch"
    events = {k: v - events_before.get(k, 0) for k, v in _allocator_stats(device, _EVENTS).items()}
    return CellMemory(
        model=spec.name, mode=mode.name, breakdown=run.breakdown, search=run.result, cap_bytes=cap_bytes,
        step_seconds=run.seconds, probe_log=run.prober.log, warmup_steps=run.warmup_steps,
        search_seconds=run.search_seconds, allocator_events=events, timed_alloc_retries=run.timed_retries,
        seconds=time.perf_counter() - t_start,
    )
