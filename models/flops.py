"""Training FLOPs counted rather than derived by hand, so a new architecture needs no new formula.

The count runs one sample through the model on the meta device: shapes propagate and every matmul and
convolution is tallied, but no memory is allocated and no arithmetic is done, so even GPT-2 at 1024
tokens counts in well under a second.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ampbench.models.spec import Batch

# backward costs about twice the forward: one matmul for the input gradient, one for the weight gradient
TRAINING_OVER_FORWARD = 3.0


def forward_flops(
    build: Callable[[Any], nn.Module],
    config: Any,
    make_batch: Callable[[Any, int, torch.device, torch.Generator | None], Batch],
) -> float:
    """Forward FLOPs of one sample (a multiply-add counts as 2), counted on the meta device."""
    meta = torch.device("meta")
    with meta:
        # eval mode: batch norm on a single sample whose map has shrunk to 1x1 refuses to train, and the
        # matmuls and convolutions counted are the same in both modes
        model = build(config).eval()
    inputs, _ = make_batch(config, 1, meta, None)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(inputs)
    flops = counter.get_total_flops()
    assert flops > 0, f"the flop counter saw no matmuls or convolutions in {type(model).__name__}"
    return float(flops)


def training_flops(
    build: Callable[[Any], nn.Module],
    config: Any,
    make_batch: Callable[[Any, int, torch.device, torch.Generator | None], Batch],
) -> float:
    """Training (forward + backward) FLOPs of one sample."""
    return TRAINING_OVER_FORWARD * forward_flops(build, config, make_batch)


def counted_training_flops(
    build: Callable[[Any], nn.Module],
    make_batch: Callable[[Any, int, torch.device, torch.Generator | None], Batch],
) -> Callable[[Any], float]:
    """A model's ``flops_per_sample(config)``: ``training_flops`` counted once per config (configs are
    frozen, so hashable), since every speed cell of a model asks for it."""

    @functools.lru_cache(maxsize=None)
    def flops_per_sample(config: Any) -> float:
        return training_flops(build, config, make_batch)

    return flops_per_sample
