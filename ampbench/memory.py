"""Memory: the peak of one training step per precision mode with a breakdown of where it goes, the
largest batch each mode fits under a memory cap, and its throughput there.

The largest-batch search (``find_largest_batch``) is pure logic over a ``measure(batch) -> peak bytes``
function that raises ``torch.OutOfMemoryError`` when a batch does not fit, so it is tested on the CPU
against fake steps; ``measure_memory`` wires it to real training steps on a CUDA device.

How the search spends its steps (each real step at a large batch costs up to a few seconds):

0. Where this GPU's baseline holds a largest batch found under the same cap and allocator settings,
   the search starts there, on the baseline's grid: P is that batch and step 1 is skipped. Unchanged,
   the cell is settled by the two confirming steps of 2; changed, the bracket of 3 takes over from
   them. The answer is confirmed by real steps either way; the start only saves the steps spent
   looking (on the H100 they were more than half of the memory tests' time).
1. Two measured sizes: the model's default batch (measured anyway for the peak figure) and half-way
   to where a line through it and the fixed memory (weights, optimizer state) puts the largest batch.
   A line through those lands near the cap; a second size at twice a small default batch did not
   (lstm_lm's line through batches 20 and 40 overshot by 25-400%, because its smallest batches carry
   a workspace that larger ones amortise).
2. The line predicts the largest batch P under the cap. One step at P + g (must not fit), then one at
   P (must fit): the prediction is confirmed in two steps, and the trainer is left warm at P for timing.
3. A miss is corrected inside the bracket [largest fit, smallest failure]: first with the line refitted
   through the largest fits, then by galloping down from a failure (never past the bracket's middle),
   then by bisection. Every step lies strictly inside the bracket, so the search always ends, in a few
   steps when the miss is small.

Batches are searched on a grid of step g, a power of two of about 1/64 of the predicted batch (1 below
128): "the next size up" is P + g. A resolution finer than ~1.5% would cost more steps than it tells.

cuDNN benchmark mode is off for memory cells: autotuning at every new batch size would try algorithms
whose workspaces make the peak depend on timing, and cost seconds per size. So the throughput at the
largest batch is with cuDNN's heuristic algorithms, on both sides of its ratio.

The cap is a budget on top of what the process holds when a cell starts, enforced by the caching
allocator (``set_per_process_memory_fraction``) during the search and lifted afterwards, so results
compare across GPUs of different sizes and other tests get the whole card. The default is 90% of the
card, at most 24 GiB. The steps timed at the largest batch run with the cap lifted: under it, cuDNN's
workspace requests make the allocator flush its cache at every convolution (see ``measure_memory``).
The search's own last step at that batch is their warm-up (it chose the algorithms and cached the
blocks), so no extra step is spent unless the search ended on a failure.

OOM is an expected event: after each one every reference to the failed step is dropped outside the
``except`` block, the trainer's gradients and loss-scaler bookkeeping are reset, ``gc.collect()`` runs
and the allocator's cache is emptied, so the next step starts from the state the last good one left.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ampbench.device import cudnn_heuristics, first_line, is_out_of_memory, prime_libraries, release
from ampbench.modes import PrecisionMode
from ampbench.stats import median
from ampbench.timing import peak_memory_bytes, sync, time_block
from ampbench.train import Trainer
from ampbench.verdict import RatioCheck, Verdict
from models.spec import ModelSpec

GIB = 2**30

# Default cap: this fraction of the card's total memory, at most DEFAULT_CAP_CEILING. Total, not free:
# a baseline recorded on one H100 80GB must mean the same budget on every other, whatever size of
# driver context. The ceiling makes every card of 27 GB or more search under the same 24 GiB, so
# their largest batches compare; and a step at the largest batch costs time in proportion to it: under
# 90% of an H100 (71 GiB) the quick tier's memory tests took about 200 s. The ratios to fp32, which
# are what the tests hold, barely depend on the cap once weights and optimizer state are small next to
# it. Only where the card is shared and has less free does the default shrink to FREE_SHARE of what
# is free (then the largest batch is not held against a baseline recorded under another cap).
DEFAULT_CAP_FRACTION = 0.9
DEFAULT_CAP_CEILING = 24 * GIB
FREE_SHARE = 0.95
# The search stops at this multiple of the model's default batch: beyond it the largest batch is
# absurd for training (the MLP would reach ~500k samples) and each confirming step would cost seconds.
MAX_BATCH_FACTOR = 256
# Grid of the search relative to the predicted batch: g = the power of two nearest below P * resolution.
BATCH_RESOLUTION = 1 / 64
# The line is refitted through the largest fit and the largest other fit at least this fraction below
# it: far enough apart that allocator rounding does not dominate the slope, near enough to follow a
# curving peak.
LINE_SPACING = 0.1
# A peak measured without the cap counts as "fits" only this far under the cap; nearer, it is re-run
# under the cap, where the allocator's fragmentation decides.
FIRST_PEAK_TRUST = 0.9
# Training steps per probe. One decides "fits" for the first step from an empty cache; the timed steps
# that follow reuse its cached blocks. Set 2 if a largest batch ever fits once and then not again.
PROBE_STEPS = 1
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


class SearchError(RuntimeError):
    """The largest-batch search could not finish; the message says what it measured."""


class CapTooSmall(SearchError):
    """Not even the smallest batch fits under the cap."""


class MemoryMeasurementError(RuntimeError):
    """A memory cell could not be measured (out of memory where it must fit, a cap the card cannot
    give); the message names model, mode, batch and the figures seen."""


def gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.2f} GiB"


# -- the search ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    batch: int
    peak_bytes: float | None  # None: ran out of memory
    stepped: bool = True  # False: a figure handed in, not a step of this search

    @property
    def fits(self) -> bool:
        return self.peak_bytes is not None


@dataclass
class SearchResult:
    max_batch: int  # largest batch seen to fit
    next_failing: int | None  # smallest batch seen to run out of memory (None: none did)
    granularity: int  # the search's grid: "the next size up" of max_batch is max_batch + granularity
    predicted: int | None  # the two-point line's first prediction, on the grid (may exceed the limit)
    limit: int | None  # the search stops at this batch
    cap_bytes: float
    probes: list[Probe] = field(default_factory=list)
    started_at: int | None = None  # the batch the search started from (a baseline's), None: searched blind

    @property
    def limited(self) -> bool:
        """Stopped at the limit: the real largest batch is at least max_batch."""
        return self.limit is not None and self.max_batch >= self.limit

    @property
    def confirmed(self) -> bool:
        """max_batch fit and the next size up did not (or the limit was reached and fit)."""
        if self.limited:
            return True
        return self.next_failing is not None and self.next_failing - self.max_batch <= self.granularity

    @property
    def steps(self) -> int:
        return sum(p.stepped for p in self.probes)

    def peak_at(self, batch: int) -> float | None:
        for p in self.probes:
            if p.batch == batch and p.fits:
                return p.peak_bytes
        return None

    def describe(self) -> str:
        head = f"largest batch {self.max_batch} ({gib(self.peak_at(self.max_batch))} under a cap of {gib(self.cap_bytes)})"
        if self.limited:
            tail = f"stopped at the limit {self.limit}"
        elif self.next_failing is not None:
            tail = f"{self.next_failing} ran out of memory"
        else:
            tail = "nothing larger was tried"
        trail = ", ".join(f"{p.batch}{'' if p.fits else ' OOM'}" for p in self.probes if p.stepped)
        start = f"started at {self.started_at}" if self.started_at is not None else f"predicted {self.predicted}"
        return f"{head}; {tail}; {start}; {self.steps} steps: {trail}"


def try_step(measure: Callable[[int], float], batch: int, on_oom: Callable[[], None] | None = None) -> float | None:
    """`measure(batch)`, or None if it ran out of memory; then `on_oom()` runs, after the exception and
    its traceback (which hold the failed step's frames, and so its tensors) are gone."""
    try:
        return float(measure(batch))
    except Exception as exc:  # noqa: BLE001 - anything but running out of memory propagates
        if not is_out_of_memory(exc):
            raise
    if on_oom is not None:
        on_oom()
    return None


def granule(predicted: float, resolution: float = BATCH_RESOLUTION) -> int:
    """The search's grid step for a predicted largest batch: a power of two near predicted * resolution."""
    target = predicted * resolution
    return 1 if target < 2 else 2 ** int(math.floor(math.log2(target)))


def find_largest_batch(
    measure: Callable[[int], float],
    cap_bytes: float,
    first_batch: int,
    *,
    first_peak: float | None = None,
    fixed_bytes: float = 0.0,
    limit: int | None = None,
    granularity: int | None = None,
    resolution: float = BATCH_RESOLUTION,
    max_steps: int = 24,
    min_batch: int = 1,
    on_oom: Callable[[], None] | None = None,
    start: int | None = None,
) -> SearchResult:
    """The largest batch whose training step fits under `cap_bytes`, confirmed by real steps.

    `measure(batch)` runs one step and returns its peak bytes, or raises ``torch.OutOfMemoryError``.
    `first_peak` is an already measured peak at `first_batch` (saves a step when comfortably under the
    cap); `fixed_bytes` a prior for the memory that does not grow with the batch (weights, optimizer
    state), used to place the grid before two sizes are measured. `on_oom` runs after every failed step,
    once the failure's references are gone. `start` is a largest batch found before (a baseline's, on
    the grid `granularity`): it is tried first, instead of the line's prediction. Raises
    ``CapTooSmall`` when even `min_batch` does not fit, ``SearchError`` when `max_steps` steps do not
    settle it.
    """
    if start is not None and granularity is None:
        raise ValueError(f"a search that starts at batch {start} needs the grid it was found on (granularity)")
    return _Search(measure, cap_bytes, fixed_bytes, limit, granularity, resolution, max_steps, min_batch, on_oom,
                   start).run(first_batch, first_peak)


class _Search:
    def __init__(self, measure, cap, fixed, limit, granularity, resolution, max_steps, min_batch, on_oom, start):
        if cap <= 0:
            raise ValueError(f"the memory cap must be positive, got {cap} bytes")
        self.measure, self.cap, self.fixed, self.start = measure, float(cap), float(fixed), start
        self.limit, self.g, self.resolution = limit, granularity, resolution
        self.max_steps, self.min_batch, self.on_oom = max_steps, min_batch, on_oom
        self.probes: list[Probe] = []  # everything the search knows; the bracket below is read off it
        self.predicted: int | None = None

    @property
    def fits(self) -> dict[int, float]:
        """Peak bytes by batch, of every batch that fit."""
        return {p.batch: p.peak_bytes for p in self.probes if p.fits}

    @property
    def lo(self) -> int | None:
        """The largest batch that fit."""
        return max((p.batch for p in self.probes if p.fits), default=None)

    @property
    def hi(self) -> int | None:
        """The smallest batch that ran out of memory."""
        return min((p.batch for p in self.probes if not p.fits), default=None)

    def probe(self, batch: int) -> bool:
        if sum(p.stepped for p in self.probes) >= self.max_steps:
            raise SearchError(f"no confirmed largest batch after {self.max_steps} steps: {self.result().describe()}")
        self.probes.append(Probe(batch, try_step(self.measure, batch, self.on_oom)))
        return self.probes[-1].fits

    def aim(self) -> int | None:
        """The start while it is untried and inside the bracket; else the largest batch on the grid whose
        peak the line through the two largest fits keeps under the cap."""
        s = self.start
        if s is not None and self.lo < s and (self.hi is None or s < self.hi) and all(p.batch != s for p in self.probes):
            return s
        raw = self.raw_aim()
        return None if raw is None else int(raw // self.g) * self.g

    def raw_aim(self) -> float | None:
        points = sorted(self.fits.items())
        anchor_b, anchor_y = points[-1]
        partner = next((p for p in reversed(points[:-1]) if p[0] <= anchor_b * (1 - LINE_SPACING)), None)
        if partner is None:
            partner = points[0] if len(points) > 1 else (0, self.fixed)
        slope = (anchor_y - partner[1]) / (anchor_b - partner[0])
        if not slope > 0:
            return None
        # a near-flat line says "unbounded": the limit or galloping decides
        return min(anchor_b + (self.cap - anchor_y) / slope, 1e15)

    def run(self, first_batch: int, first_peak: float | None) -> SearchResult:
        if first_batch < self.min_batch:
            raise ValueError(f"first batch {first_batch} is below the smallest batch {self.min_batch}")
        if first_peak is not None and first_peak <= FIRST_PEAK_TRUST * self.cap:
            self.probes.append(Probe(first_batch, first_peak, stepped=False))
        elif first_peak is not None:
            self.probes.append(Probe(first_batch, None, stepped=False))  # over the cap already, no step needed
        else:
            self.probe(first_batch)
        self.descend_to_first_fit(first_batch)
        if self.start is not None and self.start <= self.lo:
            self.start = None  # a start that is no larger than what already fit says nothing: search blind
        if self.start is not None:
            self.settle()  # no second size: the start stands in for the line's prediction
            return self.result()

        # the second measured size: half-way to where a line through the fixed-memory prior puts the
        # largest batch, far enough from the first that the line through both holds near the cap
        lo, y = self.lo, self.fits[self.lo]
        slope = (y - self.fixed) / lo if y > self.fixed else y / lo
        second = int(lo + (self.cap - y) / slope) // 2 if slope > 0 else 2 * lo
        if self.limit is not None:
            second = min(second, self.limit)
        if self.hi is not None:
            second = min(second, self.hi - 1)
        if second > lo:
            self.probe(second)

        if self.g is None:  # the grid follows the two-point line's prediction
            raw = self.raw_aim() or float(self.lo)
            self.g = granule(min(raw, self.limit) if self.limit is not None else raw, self.resolution)
        self.settle()
        return self.result()

    def descend_to_first_fit(self, first_batch: int) -> None:
        batch = first_batch
        while self.lo is None:
            if batch <= self.min_batch:
                raise CapTooSmall(
                    f"even a batch of {self.min_batch} does not fit under the memory cap of {gib(self.cap)} "
                    f"({self.cap:.0f} bytes): raise the cap or use a smaller model"
                )
            batch = max(self.min_batch, batch // 2)
            self.probe(batch)

    def settle(self) -> None:
        g = self.g
        misses = 0  # consecutive steps expected to fit that did not
        climbs = 0  # consecutive "next size up" steps that fit after all
        while True:
            lo, hi = self.lo, self.hi
            if hi is not None and hi - lo <= g:
                return
            if self.limit is not None and lo >= self.limit:
                return
            aim = self.aim()
            if self.predicted is None:
                self.predicted = aim
            if hi is None:
                # nothing has failed yet: check the next size up from the prediction (or above the
                # largest fit, galloping when the line keeps saying there is no room but there is)
                candidate = aim + g if aim is not None and aim > lo else lo + g * 2**climbs
                expect_fit = False
            elif aim is not None and lo < aim < hi:
                candidate, expect_fit = aim, True
            else:
                # after a miss gallop down from the failure, never past the middle; else bisect
                middle = lo + g * max(1, (hi - lo) // g // 2)
                candidate = max(hi - g * 2**misses, middle) if misses else middle
                expect_fit = True
            if self.limit is not None:
                candidate = min(candidate, self.limit)
            fit = self.probe(candidate)
            misses = 0 if fit else misses + int(expect_fit)
            climbs = climbs + 1 if fit and not expect_fit else 0

    def result(self) -> SearchResult:
        return SearchResult(
            max_batch=self.lo if self.lo is not None else 0,
            next_failing=self.hi,
            granularity=self.g or 1,
            predicted=self.predicted,
            started_at=self.start,
            limit=self.limit,
            cap_bytes=self.cap,
            probes=list(self.probes),
        )


# -- where the memory goes -----------------------------------------------------------------------


def held_bytes(trainer: Trainer) -> dict[str, int]:
    """Bytes the trainer holds between steps, by kind; each storage counted once (tied weights,
    fp32 norm layers that are their own masters)."""
    seen: set[tuple[str, int]] = set()

    def size(tensors) -> int:
        total = 0
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = (str(t.device), storage.data_ptr())
            if key in seen or storage.nbytes() == 0:
                continue
            seen.add(key)
            total += storage.nbytes()
        return total

    params = list(trainer.model.parameters())
    weights = size(params) + size(trainer.model.buffers())
    grads = size(p.grad for p in params)
    master = 0
    if trainer.master is not None:
        master = size(trainer.master.master_params) + size(m.grad for m in trainer.master.master_params)
    optimizer = size(v for state in trainer.optimizer.state.values() for v in state.values())
    batch = size((trainer.inputs, trainer.targets))
    return {"weights": weights, "grads": grads, "master": master, "optimizer_state": optimizer, "batch": batch}


@dataclass(frozen=True)
class Breakdown:
    """One training step at one batch size, in bytes above what was allocated before the trainer existed."""

    batch_size: int
    peak_bytes: int  # the allocator's peak of allocated bytes during the step
    steady_bytes: int  # allocated after the step: what the trainer holds between steps
    held: dict[str, int]  # held_bytes(): weights, grads, master, optimizer_state, batch
    reserved_peak_bytes: int | None  # the allocator's reserved peak (caching and fragmentation on top)
    allocator: dict[str, int]  # selected torch.cuda.memory_stats figures

    @property
    def other_steady_bytes(self) -> int:
        """Held between steps but none of the kinds above: library workspaces, scaler state, rounding."""
        return self.steady_bytes - sum(self.held.values())

    @property
    def activation_bytes(self) -> int:
        """Peak above the steady state: activations saved for backward, temporaries, workspaces."""
        return self.peak_bytes - self.steady_bytes

    def figures(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {f"{k}_bytes": v for k, v in self.held.items()}
        out.update(
            steady_bytes=self.steady_bytes,
            other_steady_bytes=self.other_steady_bytes,
            activation_bytes=self.activation_bytes,
            reserved_peak_bytes=self.reserved_peak_bytes,
        )
        out.update(self.allocator)
        return out


# peaks of the step just measured, by pool: large blocks (> 1 MiB, activations) and small ones
_STATS = {
    "large_pool_peak_bytes": "allocated_bytes.large_pool.peak",
    "small_pool_peak_bytes": "allocated_bytes.small_pool.peak",
}
# session counters: a cell reports how much they grew while it ran
_EVENTS = {"alloc_retries": "num_alloc_retries", "ooms": "num_ooms"}


def _allocator_stats(device: torch.device, names: dict[str, str] = _STATS) -> dict[str, int]:
    stats = torch.cuda.memory_stats(device)
    return {name: int(stats[key]) for name, key in names.items() if key in stats}


def _alloc_retries(device: torch.device) -> int:
    """The session's count of cache flushes: a request that did not fit (a cuDNN workspace under the
    cap) made the allocator free its cached blocks, a device sync, and try again."""
    return _allocator_stats(device, _EVENTS).get("alloc_retries", 0)


# -- the device side -----------------------------------------------------------------------------


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


def allocator_config() -> str | None:
    """PYTORCH_CUDA_ALLOC_CONF (e.g. expandable_segments) changes fragmentation, so the largest batch."""
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF") or None


@contextlib.contextmanager
def process_memory_limit(device: torch.device, limit_bytes: int) -> Iterator[float]:
    """The caching allocator refuses to hold more than `limit_bytes` on `device` for the duration
    (``set_per_process_memory_fraction``), then the previous fraction is restored so later tests get
    the whole card again. Yields the fraction set."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    _, total = torch.cuda.mem_get_info(index)
    getter = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    previous = float(getter(index)) if getter is not None else 1.0
    fraction = min(1.0, limit_bytes / total)
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
        entry["peak_bytes"] = peak_memory_bytes(self.trainer, self.base_allocated, PROBE_STEPS)
        entry["seconds"] = (time.perf_counter() - t0) / PROBE_STEPS
        entry["alloc_retries"] = _alloc_retries(self.device) - retries
        entry["reserved_peak_bytes"] = torch.cuda.max_memory_reserved(self.device) - self.base_reserved
        self.warm_batch = batch
        return entry["peak_bytes"]

    def recover(self) -> None:
        """After an out-of-memory step: drop the batch and the half-made gradients, forget the loss
        scaler's per-step bookkeeping (a step that died inside ``scaler.step`` would make the next one
        refuse to unscale), collect and empty the cache."""
        self.warm_batch = None
        self.set_batch(None)
        self.trainer.model.zero_grad(set_to_none=True)
        for name in ("_per_optimizer_states", "_per_optimizer"):  # GradScaler, ampbench.scaling.LossScaler
            states = getattr(self.trainer.scaler, name, None)
            if hasattr(states, "clear"):
                states.clear()
        release(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)


def warm_up(trainer: Trainer) -> int:
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
        held=held_bytes(prober.trainer),
        reserved_peak_bytes=prober.log[-1]["reserved_peak_bytes"],
        allocator=_allocator_stats(device),
    )


@dataclass
class CellMemory:
    """Everything measured of one model in one mode; holds no tensors, so it can be cached."""

    model: str
    mode: str
    breakdown: Breakdown  # at the model's default batch
    search: SearchResult
    cap_bytes: int
    step_seconds: list[float]  # timed steps at the largest batch (CUDA events)
    probe_log: list[dict]
    warmup_steps: int
    search_seconds: float
    allocator_events: dict[str, int]  # alloc retries (cache flushed under pressure) and OOMs during the cell
    timed_alloc_retries: int  # of those, in the uncapped steps at the largest batch (0 unless the card is full)
    seconds: float  # the whole cell, wall clock

    @property
    def peak_bytes(self) -> int:
        return self.breakdown.peak_bytes

    @property
    def max_batch(self) -> int:
        return self.search.max_batch

    @property
    def throughput(self) -> float:
        """Samples per second at the largest batch."""
        return self.max_batch / median(self.step_seconds)


def _default_timed(step: Callable[[], None], rounds: int) -> None:
    for _ in range(rounds):
        step()


def measure_memory(
    spec: ModelSpec,
    mode: PrecisionMode,
    device: torch.device,
    cap_bytes: int,
    *,
    smoke: bool = False,
    timed: Callable[[Callable[[], None], int], None] | None = None,
    start: tuple[int, int] | None = None,
) -> CellMemory:
    """Peak and breakdown at the default batch, the largest batch under `cap_bytes` (confirmed), and
    step times there. `timed(step, rounds)` runs the timed steps (pytest-benchmark's ``pedantic`` in
    the tests); `start` is (batch, grid step) where the search starts (see ``search_start``). cuDNN
    benchmark mode is off throughout; the cap holds during the search and is lifted for the timed
    steps. Raises ``MemoryMeasurementError`` with the figures seen (a failed search included)."""
    if device.type != "cuda":
        raise MemoryMeasurementError(f"{spec.name} {mode.name}: {NO_CUDA_REASON}")
    where = f"{spec.name} {mode.name}"
    t_start = time.perf_counter()
    limit = batch_limit(spec, smoke)
    timed = timed or _default_timed
    prime_libraries(device)
    release(device)
    base_allocated = torch.cuda.memory_allocated(device)
    base_reserved = torch.cuda.memory_reserved(device)
    free, _ = torch.cuda.mem_get_info(device)
    if free < cap_bytes:  # the cap is a budget on top of what this process already holds
        raise MemoryMeasurementError(
            f"{where}: the memory cap of {gib(cap_bytes)} exceeds the {gib(free)} free on the card "
            f"(this process holds {gib(base_reserved)}, the rest is the driver's or other processes'); "
            f"lower --perf-memory-cap"
        )
    events_before = _allocator_stats(device, _EVENTS)

    stage, batch, failure = "building the trainer", spec.batch_size_for(smoke), None
    prober = None
    try:
        with cudnn_heuristics():
            trainer = Trainer(spec, mode, device, smoke=smoke)
            stage = "warm-up"
            warmup_steps = warm_up(trainer)
            stage = "the peak at the default batch"
            prober = _Prober(trainer, base_allocated, base_reserved)
            breakdown = step_breakdown(prober, batch)
            held = breakdown.held
            fixed = held["weights"] + held["master"] + held["optimizer_state"]
            with process_memory_limit(device, base_reserved + cap_bytes):
                stage = "the largest-batch search"
                t0 = time.perf_counter()
                result = find_largest_batch(
                    prober.peak, cap_bytes, breakdown.batch_size, first_peak=breakdown.peak_bytes,
                    fixed_bytes=fixed, limit=limit, on_oom=prober.recover,
                    start=start[0] if start else None, granularity=start[1] if start else None,
                )
                search_seconds = time.perf_counter() - t0
            # Timed with the cap lifted. At the largest batch, by definition, the workspaces cuDNN's
            # heuristics ask for do not fit under the cap: a convolution's request then makes the
            # allocator flush its cache (a device sync) and retry before cuDNN falls back to another
            # algorithm; WRN-28-10 fp32's probes near a 24 GiB cap logged 10-20 flushes per step on
            # an H100. That would time the allocator at its limit, not the mode; the batch itself was
            # settled under the cap.
            batch = result.max_batch
            stage = f"steps at the largest batch {batch}"
            retries_before = _alloc_retries(device)
            if prober.warm_batch == batch:
                # the search's last step ran at this batch: its algorithms are chosen and its blocks cached
                per_step = prober.log[-1]["seconds"]
            else:  # the search ended on a failure: the batch is made again and one untimed step warms it
                prober.set_batch(batch)
                per_step = time_block(device, lambda: trainer.run(1))
            rounds = max(1, min(MAX_TIMED_ROUNDS, math.ceil(TIMED_SECONDS / per_step)))
            seconds: list[float] = []
            timed(lambda: seconds.append(time_block(trainer.device, lambda: trainer.run(1))), rounds)
            timed_retries = _alloc_retries(device) - retries_before
    except Exception as exc:  # noqa: BLE001 - out of memory and a failed search become a report
        # the message is built here and the exception dropped: its traceback holds the trainer
        if isinstance(exc, SearchError):
            failure = f"{where}: {exc}"
        elif is_out_of_memory(exc):
            peak = torch.cuda.max_memory_allocated(device) - base_allocated
            failure = f"{where}: out of memory during {stage} (batch {batch}, peak {gib(peak)}): {first_line(exc)}"
        else:
            raise
    finally:
        trainer = None  # noqa: F841 - the last reference; release() below frees its memory
        if prober is not None:
            prober.trainer = None
        release(device)
    if failure is not None:
        raise MemoryMeasurementError(failure)
    events = {k: v - events_before.get(k, 0) for k, v in _allocator_stats(device, _EVENTS).items()}
    return CellMemory(
        model=spec.name, mode=mode.name, breakdown=breakdown, search=result, cap_bytes=cap_bytes,
        step_seconds=seconds, probe_log=prober.log, warmup_steps=warmup_steps, search_seconds=search_seconds,
        allocator_events=events, timed_alloc_retries=timed_retries, seconds=time.perf_counter() - t_start,
    )


@dataclass(frozen=True)
class OomRecovery:
    batch: int
    oom_batch: int
    ran_out: bool  # the deliberate step did run out of memory
    peak_before: int  # peak of a step at `batch` before the out-of-memory step
    peak_after: int  # the same step after recovery
    steady_before: int  # allocated after the step at `batch`, before and after
    steady_after: int
    allocated_at_start: int  # before the trainer existed, and after it was dropped at the end
    allocated_at_end: int
    reserved_after_recovery: int  # cache emptied: little beyond what is allocated
    allocated_after_recovery: int


def demonstrate_oom_recovery(spec: ModelSpec, mode: PrecisionMode, device: torch.device, *, smoke: bool = False) -> OomRecovery:
    """A step at the default batch, then a real training step at 4x the batch under a cap it cannot
    fit, recovery, and the default step again: the allocator must be back where it was."""
    prime_libraries(device)
    release(device)
    start = torch.cuda.memory_allocated(device)
    reserved = torch.cuda.memory_reserved(device)
    prober = None
    try:
        with cudnn_heuristics():
            prober = _Prober(Trainer(spec, mode, device, smoke=smoke), start, reserved)
            warm_up(prober.trainer)
            batch = prober.trainer.batch_size
            before = prober.peak(batch)
            steady_before = torch.cuda.memory_allocated(device) - start
            # 4x the batch needs about 3x more activation memory than this cap leaves room for
            cap = before + (before - steady_before) // 2
            with process_memory_limit(device, reserved + cap):
                ran_out = try_step(prober.peak, 4 * batch, prober.recover) is None
            alloc_recovered = torch.cuda.memory_allocated(device) - start
            reserved_recovered = torch.cuda.memory_reserved(device) - reserved
            after = prober.peak(batch)
            steady_after = torch.cuda.memory_allocated(device) - start
    finally:
        if prober is not None:
            prober.trainer = None
        release(device)
    return OomRecovery(
        batch=batch, oom_batch=4 * batch, ran_out=ran_out, peak_before=before, peak_after=after,
        steady_before=steady_before, steady_after=steady_after, allocated_at_start=start,
        allocated_at_end=torch.cuda.memory_allocated(device), reserved_after_recovery=reserved_recovered,
        allocated_after_recovery=alloc_recovered,
    )


# -- the verdict ---------------------------------------------------------------------------------


# Two caps this close (relative) give comparable largest batches; farther apart the batch is not held
# against the baseline (the ratios still are).
CAP_MATCH = 0.01


@dataclass(frozen=True)
class MemoryJudgement:
    verdict: Verdict
    message: str
    failures: tuple[str, ...]  # one message per figure beyond its tolerance


def summary(model: str, mode: str, f: dict) -> str:
    """One line of what a memory cell measured, from its figures (the keys of test_memory's extra_info)."""
    plus = "+" if f.get("max_batch_limited") else ""
    ref_plus = "+" if f.get("max_batch_ref_limited") else ""
    return (
        f"{model} {mode}: peak {gib(f['peak_mem_bytes'])} at batch {f['batch_size']} "
        f"({f['memory_ratio']:.3f}x fp32); largest batch {f['max_batch']}{plus} "
        f"({f['max_batch_ratio']:.2f}x fp32's {f['max_batch_ref']}{ref_plus}) under a cap of {gib(f['cap_bytes'])}; "
        f"{f['max_batch_throughput']:,.0f} samples/s there ({f['max_batch_throughput_ratio']:.2f}x fp32 at its largest)"
    )


def same_budget(baseline: dict, cap_bytes: float, alloc_conf: str | None) -> bool:
    """Whether a baseline entry's largest batch was found under this cap and these allocator settings."""
    base_cap = baseline.get("cap_bytes")
    return (isinstance(base_cap, (int, float)) and base_cap > 0 and abs(cap_bytes / base_cap - 1.0) <= CAP_MATCH
            and baseline.get("alloc_conf") == alloc_conf)


def search_start(baseline: dict | None, cap_bytes: float) -> tuple[int, int] | None:
    """(largest batch, grid step) of a baseline entry found under this cap and this process's allocator
    settings, where the search starts; None where there is none, and the search goes blind."""
    if not baseline or not same_budget(baseline, cap_bytes, allocator_config()):
        return None
    batch, step = baseline.get("max_batch"), baseline.get("max_batch_step")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, step)):
        return None
    return batch, step


def judge(model: str, mode: str, figures: dict, baseline: dict | None, tolerance: float) -> MemoryJudgement:
    """Hold a memory cell's figures against its baseline entry.

    Peak memory and its ratio to fp32 must not grow by more than `tolerance`; the largest batch and its
    ratio must not shrink by more than `tolerance` plus the search's grid step, and are compared only
    when the baseline was recorded under the same cap and allocator settings and neither side stopped
    at the batch limit. Throughput at the largest batch is reported against the baseline, not held: it
    is timed in one to three steps.
    """
    head = summary(model, mode, figures)
    if baseline is None:
        return MemoryJudgement(Verdict.NO_BASELINE, f"{head}; no baseline for this GPU", ())

    checks: list[tuple[RatioCheck, float]] = []
    notes: list[str] = []

    def hold(name: str, figure: str, worse: str, slack: float = 0.0) -> None:
        expected = baseline.get(name)
        if isinstance(expected, (int, float)) and not isinstance(expected, bool) and expected > 0:
            checks.append((RatioCheck(model, mode, figure, float(expected), tolerance + slack, worse), float(figures[name])))

    hold("peak_mem_bytes", "peak memory (bytes)", "higher")
    hold("memory_ratio", "memory ratio to fp32", "higher")
    base_cap = baseline.get("cap_bytes")
    if not same_budget(baseline, figures["cap_bytes"], figures.get("alloc_conf")):
        notes.append(
            f"largest batch not compared: baseline recorded under a cap of {gib(base_cap) if isinstance(base_cap, (int, float)) else 'n/a'} "
            f"and allocator settings {baseline.get('alloc_conf')!r}, this run {gib(figures['cap_bytes'])} and {figures.get('alloc_conf')!r}"
        )
    elif figures.get("max_batch_limited") or baseline.get("max_batch_limited"):
        notes.append("largest batch not compared: the search stopped at the batch limit")
    else:
        own = figures["max_batch_step"] / figures["max_batch"]
        hold("max_batch", "largest batch", "lower", own)
        if not figures.get("max_batch_ref_limited"):
            hold("max_batch_ratio", "largest batch ratio to fp32", "lower",
                 own + figures["max_batch_ref_step"] / figures["max_batch_ref"])

    failures = tuple(msg for check, value in checks if (msg := check.failure(value)) is not None)
    improved = [c for c, v in checks if c.improved(v)]
    compared = "; ".join(f"{c.figure} {v:.4g} vs baseline {c.expected:.4g} ({v / c.expected - 1:+.1%})" for c, v in checks)
    expected_tput = baseline.get("max_batch_throughput_ratio")
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


def figures_of(cell: CellMemory, reference: CellMemory) -> dict:
    """The figures of a memory cell, as test_memory's extra_info carries them and baselines store them
    (scalars only; the probe log is added by the test)."""
    s, r = cell.search, reference.search
    return {
        "batch_size": cell.breakdown.batch_size,
        "peak_mem_bytes": cell.peak_bytes,
        "peak_mem_ref_bytes": reference.peak_bytes,
        "memory_ratio": cell.peak_bytes / reference.peak_bytes,
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
        "max_batch_throughput": cell.throughput,
        "max_batch_throughput_ref": reference.throughput,
        "max_batch_throughput_ratio": cell.throughput / reference.throughput,
        "max_batch_step_ms": median(cell.step_seconds) * 1e3,
        "search_steps": s.steps,
        "search_seconds": cell.search_seconds,
        "cell_seconds": cell.seconds,
        "warmup_steps": cell.warmup_steps,
        "cap_bytes": cell.cap_bytes,
        "alloc_conf": allocator_config(),
        "cudnn_benchmark": False,
        **{f"allocator_{k}": v for k, v in cell.allocator_events.items()},
        "max_batch_timed_alloc_retries": cell.timed_alloc_retries,
        **cell.breakdown.figures(),
    }


# what a baseline entry of test_memory keeps
BASELINE_FIGURES = (
    "batch_size", "peak_mem_bytes", "memory_ratio", "max_batch", "max_batch_ratio", "max_batch_step",
    "max_batch_limited", "max_batch_throughput", "max_batch_throughput_ratio", "cap_bytes", "alloc_conf",
)
