"""``--perf-memory-limit``: the whole run behaves as if the card had that much memory. It is how a user
shares a card, and how a 16 or 24 GB card's memory is tried on a larger one.

Two things allocate a training step's memory by the run's choice, and each is capped:

- the CUDA caching allocator, which holds every tensor: ``torch.cuda.set_per_process_memory_fraction``
  makes it refuse to reserve more than the limit (the CUDA context and the driver's own memory lie outside
  it, as they lie outside a smaller card's usable memory);
- cuDNN's convolution workspace: its heuristics pick algorithms by speed, some with workspaces of
  gigabytes, which under a limit turn a step that fits into an out-of-memory error (or an allocator flush
  per convolution); ``CUDNN_CONV_WSCAP_DBG`` (MiB) makes cuDNN choose among those that fit the cap.

cuBLAS's workspace is left at torch's size for the card's architecture (``CUBLAS_WORKSPACE_CONFIG`` unset:
32 MiB per handle and stream from Hopper on, about 8 MiB before, what NVIDIA recommends for each), which a
smaller card of the same generation would use too: setting it would cap nothing on Hopper and grow it on
older cards. What it costs under a limit is one workspace per stream a graph capture used, kept for the
process's life; those are freed between cells (``ampbench.plugin.leftover``).

A variable the user set is left alone: they chose it. The allocator's fraction is the limit over the
card's total memory; a limit above the card's memory is a usage error (``LimitError``), and on the CPU the
limit is recorded but does nothing (``apply`` says so)."""

from __future__ import annotations

import os
from collections.abc import MutableMapping

import torch

from ampbench.memory.search import GIB

FLAG = "--perf-memory-limit"
# cuDNN: a convolution's workspace at most this share of the limit (a 15 GiB limit allows 960 MiB), enough for
# the heuristics' fast algorithms at the zoo's batches while leaving the step its memory
CUDNN_ENV, CUDNN_WORKSPACE_SHARE = "CUDNN_CONV_WSCAP_DBG", 1 / 16
CPU_NOTE = f"{FLAG} is recorded but has no effect on the CPU (no caching allocator to cap)"

# device index -> the allocator fraction the limit set: ``memory.probe.process_memory_limit`` stays under it
_fractions: dict[int, float] = {}


class LimitError(ValueError):
    """A limit the card cannot give; the message names the flag and the card's memory."""


def limit_bytes(limit_gib: float) -> int:
    return int(limit_gib * GIB)


def workspace_environment(limit_gib: float, environ: MutableMapping[str, str]) -> dict[str, str]:
    """The workspace variables to set for `limit_gib`: each one `environ` does not set already."""
    wanted = {CUDNN_ENV: str(max(1, int(limit_gib * 1024 * CUDNN_WORKSPACE_SHARE)))}
    return {k: v for k, v in wanted.items() if k not in environ}


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def apply(device: torch.device, limit_gib: float | None,
          environ: MutableMapping[str, str] | None = None) -> str | None:
    """Cap `device` at `limit_gib` (None: nothing to do); what the run's header should say. Raises
    ``LimitError`` where the card has less memory than the limit."""
    if limit_gib is None:
        return None
    if device.type != "cuda":
        return CPU_NOTE
    index = _index(device)
    total = torch.cuda.mem_get_info(index)[1]
    if limit_bytes(limit_gib) > total:
        raise LimitError(f"{FLAG} {limit_gib:g}: the card ({torch.cuda.get_device_name(index)}) has "
                         f"{total / GIB:.1f} GiB; give a limit no larger")
    env = os.environ if environ is None else environ
    set_now = workspace_environment(limit_gib, env)
    env.update(set_now)
    fraction = limit_bytes(limit_gib) / total
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    _fractions[index] = fraction
    kept = sorted({CUDNN_ENV} - set(set_now))
    return (f"{FLAG} {limit_gib:g}: the allocator holds at most {limit_gib:g} of {total / GIB:.1f} GiB"
            + (f"; {', '.join(kept)} left as set" if kept else ""))


def fraction_of(device: torch.device) -> float | None:
    """The allocator fraction the limit set on `device`; None without a limit (or off CUDA)."""
    return _fractions.get(_index(device)) if device.type == "cuda" else None


def limited_fraction(device: torch.device, fraction: float) -> float:
    """`fraction` of the card, no more than the limit allows (a cap inside the run never lifts it)."""
    limit = fraction_of(device)
    return fraction if limit is None else min(fraction, limit)
