"""The out-of-memory recovery shown on a real device: a step that cannot fit under a cap, recovery, and
the allocator back where it was (``demonstrate_oom_recovery``, for the memory test)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ampbench.device import cudnn_heuristics, prime_libraries, release
from ampbench.memory.probe import _Prober, process_memory_limit, warm_up_optimizer
from ampbench.memory.search import try_step
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.train import Trainer


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


def demonstrate_oom_recovery(spec: ModelSpec, mode: PrecisionMode,
                             device: torch.device, *, smoke: bool = False) -> OomRecovery:
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
            warm_up_optimizer(prober.trainer)
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
            # the prober is done with: no method of it runs after this
            prober.trainer = None  # type: ignore[assignment]
        release(device)
    return OomRecovery(
        batch=batch, oom_batch=4 * batch, ran_out=ran_out, peak_before=before, peak_after=after,
        steady_before=steady_before, steady_after=steady_after, allocated_at_start=start,
        allocated_at_end=torch.cuda.memory_allocated(device), reserved_after_recovery=reserved_recovered,
        allocated_after_recovery=alloc_recovered,
    )

