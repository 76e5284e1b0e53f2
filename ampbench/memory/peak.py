"""One training step's peak memory at a cell's batch: what a cell needs where no baseline recorded its peak
(``memory.fit``), measured as the memory cells measure a step (``probe.warm_up_optimizer``, then
``peak_memory_bytes`` over what was allocated before the trainer)."""

from __future__ import annotations

from typing import Any

import torch

from ampbench.device import cudnn_heuristics, is_out_of_memory, prime_libraries, release
from ampbench.memory.probe import warm_up_optimizer
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.speed.timing import peak_memory_bytes
from ampbench.train import Trainer


def probe_peak(spec: ModelSpec, mode: PrecisionMode, device: torch.device, *, smoke: bool = False,
               config: Any = None, batch_size: int | None = None) -> tuple[int, bool]:
    """One training step's peak at the default batch (or `batch_size`, of `config` where given, as a
    convergence cell trains), once the optimizer holds its state, as the memory
    cells measure it (``warm_up_optimizer``, then ``peak_memory_bytes`` over what was allocated before the
    trainer): (peak bytes, False), or (the peak when it ran out, True) where it does not fit. Whatever
    it made is released before it returns."""
    prime_libraries(device)
    release(device)
    base = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    trainer: Trainer | None = None
    ran_out = False
    peak = 0
    try:
        with cudnn_heuristics():
            trainer = Trainer(spec, mode, device, smoke=smoke, config=config, batch_size=batch_size)
            warm_up_optimizer(trainer)
            peak = peak_memory_bytes(trainer, base) or 0
    except Exception as exc:  # noqa: BLE001 - out of memory is the answer; anything else propagates
        if not is_out_of_memory(exc):
            raise
        ran_out = True
        peak = torch.cuda.max_memory_allocated(device) - base
    finally:
        trainer = None
        release(device)
    return peak, ran_out
