"""Where the memory of one training step goes: what the trainer holds between steps, by kind, and
the caching allocator's figures of the step."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ampbench.train import Trainer


def resident_bytes(trainer: Trainer) -> dict[str, int]:
    """Bytes the trainer keeps resident between steps, by kind; each storage counted once (tied weights,
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
    resident: dict[str, int]  # resident_bytes(): weights, grads, master, optimizer_state, batch
    reserved_peak_bytes: int | None  # the allocator's reserved peak (caching and fragmentation on top)
    allocator: dict[str, int]  # selected torch.cuda.memory_stats figures

    @property
    def other_steady_bytes(self) -> int:
        """Held between steps but none of the kinds above: library workspaces, scaler state, rounding."""
        return self.steady_bytes - sum(self.resident.values())

    @property
    def activation_bytes(self) -> int:
        """Peak above the steady state: activations saved for backward, temporaries, workspaces."""
        return self.peak_bytes - self.steady_bytes

    def figures(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {f"{k}_bytes": v for k, v in self.resident.items()}
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
