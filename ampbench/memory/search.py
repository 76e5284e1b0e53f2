"""The largest-batch search: pure logic over a ``measure(batch) -> peak bytes`` function that raises
``torch.OutOfMemoryError`` when a batch does not fit, so it is tested on the CPU against fake steps
(tests/test_memory_search.py). How it spends its steps is told in the package's docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ampbench import progress
from ampbench.device import is_out_of_memory

GIB = 2**30

# Grid of the search relative to the predicted batch: g = the power of two nearest below P * resolution.
BATCH_RESOLUTION = 1 / 64
# The line is refitted through the largest fit and the largest other fit at least this fraction below
# it: far enough apart that allocator rounding does not dominate the slope, near enough to follow a
# curving peak.
LINE_SPACING = 0.1
# A peak measured without the cap counts as "fits" only this far under the cap; nearer, it is re-run
# under the cap, where the allocator's fragmentation decides.
FIRST_PEAK_TRUST = 0.9


class SearchError(RuntimeError):
    """The largest-batch search could not finish; the message says what it measured."""


class CapTooSmall(SearchError):
    """Not even the smallest batch fits under the cap."""


def gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GIB:.2f} GiB"


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
        head = (f"largest batch {self.max_batch} ({gib(self.peak_at(self.max_batch))} under a cap of "
                f"{gib(self.cap_bytes)})")
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
        # Probe.fits, spelt out: the peak of each is then known to be set
        return {p.batch: p.peak_bytes for p in self.probes if p.peak_bytes is not None}

    @property
    def lo(self) -> int | None:
        """The largest batch that fit."""
        return max((p.batch for p in self.probes if p.fits), default=None)

    @property
    def fit_lo(self) -> int:
        """The largest batch that fit, once one has: after ``descend_to_first_fit``."""
        lo = self.lo
        assert lo is not None, "the search asks once a batch has fit"
        return lo

    @property
    def hi(self) -> int | None:
        """The smallest batch that ran out of memory."""
        return min((p.batch for p in self.probes if not p.fits), default=None)

    def probe(self, batch: int) -> bool:
        steps = sum(p.stepped for p in self.probes)
        if steps >= self.max_steps:
            raise SearchError(f"no confirmed largest batch after {self.max_steps} steps: {self.result().describe()}")
        progress.update(f"largest batch: trying {batch} (fits {self.lo or '-'}, fails {self.hi or '-'}; "
                        f"step {steps + 1} of at most {self.max_steps})")
        self.probes.append(Probe(batch, try_step(self.measure, batch, self.on_oom)))
        return self.probes[-1].fits

    def aim(self) -> int | None:
        """The start while it is untried and inside the bracket; else the largest batch on the grid whose
        peak the line through the two largest fits keeps under the cap."""
        s = self.start
        if (s is not None and self.lo < s and (self.hi is None or s < self.hi)
            and all(p.batch != s for p in self.probes)):
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
        if self.start is not None and self.start <= self.fit_lo:
            self.start = None  # a start that is no larger than what already fit says nothing: search blind
        if self.start is not None:
            self.settle()  # no second size: the start stands in for the line's prediction
            return self.result()

        # the second measured size: half-way to where a line through the fixed-memory prior puts the
        # largest batch, far enough from the first that the line through both holds near the cap
        lo = self.fit_lo
        y = self.fits[lo]
        slope = (y - self.fixed) / lo if y > self.fixed else y / lo
        second = int(lo + (self.cap - y) / slope) // 2 if slope > 0 else 2 * lo
        if self.limit is not None:
            second = min(second, self.limit)
        if self.hi is not None:
            second = min(second, self.hi - 1)
        if second > lo:
            self.probe(second)

        if self.g is None:  # the grid follows the two-point line's prediction
            raw = self.raw_aim() or float(self.fit_lo)
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
            lo, hi = self.fit_lo, self.hi
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
