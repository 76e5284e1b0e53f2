"""What every rank of a distributed cell does together: start a block at once, and take a decision
that sets how many steps or collectives run as one (a rank that decided alone would leave the others
waiting in a collective)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ampbench.speed.timing import sync


def together(device: torch.device) -> None:
    """Every rank's device idle, then every rank past the barrier: the next block starts at once on all.
    (NCCL's barrier blocks the host until its all-reduce has finished on the device.)"""
    sync(device)
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])  # NCCL: on this rank's GPU, not on a guessed one
    else:
        dist.barrier()
    sync(device)


def agree_max(value: float, device: torch.device) -> float:
    """The largest of the ranks' values: decisions that set how many steps run must be the same on all."""
    t = torch.tensor([value], dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def gather_text(text: str | None) -> list[str | None]:
    """Every rank's `text`, in rank order."""
    out: list[str | None] = [None] * dist.get_world_size()
    dist.all_gather_object(out, text)
    return out
