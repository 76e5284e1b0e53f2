"""Fake training steps for the largest-batch search's tests: a memory model (peak bytes as a function of
the batch) and an allocator limit, above which a step raises ``torch.OutOfMemoryError`` like the caching
allocator does. The limit can sit below the cap the search is told (fragmentation makes the real
boundary lower than the allocated peak's line predicts), and the memory model can be linear, noisy or
curved."""

from __future__ import annotations

import random

import torch

MIB = 2**20
GIB = 2**30


class FakeStep:
    """peak(b) bytes per step; out of memory above `limit` bytes. Counts its calls like real steps."""

    def __init__(self, peak, limit: float):
        self.peak, self.limit = peak, limit
        self.calls: list[int] = []

    def __call__(self, batch: int) -> float:
        self.calls.append(batch)
        y = self.peak(batch)
        if y > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {y - self.limit:.0f} bytes")
        return y

    def fits(self, batch: int) -> bool:
        return self.peak(batch) <= self.limit


def linear(fixed: float, per_sample: float, noise: float = 0.0, seed: int = 0):
    """fixed + per_sample * b, plus a deterministic per-batch jitter of up to +-noise bytes."""

    def peak(b: int) -> float:
        jitter = random.Random(b * 7919 + seed).uniform(-1.0, 1.0) * noise if noise else 0.0
        return fixed + per_sample * b + jitter

    return peak


def assert_confirmed(result, step: FakeStep) -> None:
    """The result's claim holds for the fake: max_batch fits, the next size up does not."""
    assert result.confirmed, result.describe()
    assert step.fits(result.max_batch), result.describe()
    if not result.limited:
        assert result.next_failing is not None and result.next_failing <= result.max_batch + result.granularity
        assert not step.fits(result.next_failing), result.describe()
