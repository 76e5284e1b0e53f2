"""The MLP of PyTorch's AMP recipe (the sample code of "Comparison for training CNN models using Tensor Cores with
PyTorch"): Linear layers of width 4096 with ReLU,
trained with MSE on random data. Tiny per-step work, so it shows how host overheads eat AMP's gains."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbench.models.spec import ModelSpec


@dataclass(frozen=True)
class Config:
    in_size: int = 4096  # input features (the recipe's in_size)
    hidden: int = 4096  # width of every hidden layer
    out_size: int = 4096  # regression targets per sample
    num_layers: int = 3  # Linear layers; ReLU between them


class MLP(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert config.num_layers >= 1, f"num_layers must be >= 1, got {config.num_layers}"
        widths = [config.in_size] + [config.hidden] * (config.num_layers - 1) + [config.out_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, in_size) -> (B, out_size)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


def make_batch(config: Config, batch_size: int, device: torch.device, generator: torch.Generator | None = None):
    x = torch.randn(batch_size, config.in_size, device=device, generator=generator)
    y = torch.randn(batch_size, config.out_size, device=device, generator=generator)
    return x, y


def flops_per_sample(config: Config) -> float:
    widths = [config.in_size] + [config.hidden] * (config.num_layers - 1) + [config.out_size]
    forward = sum(2 * a * b for a, b in zip(widths[:-1], widths[1:]))
    return 3.0 * forward


SPEC = ModelSpec(
    name="mlp",
    origin='"Comparison for training CNN models using Tensor Cores with PyTorch" (undated): the PyTorch AMP recipe\'s '
           'sample network',
    config=Config(),
    smoke_config=Config(in_size=64, hidden=64, out_size=64),
    build=MLP,
    make_batch=make_batch,
    loss=F.mse_loss,
    flops_per_sample=flops_per_sample,
    batch_size=512,
    smoke_batch_size=16,
    optimizer="sgd",
    lr=1e-3,
    tier="quick",
    distributed=("cpu_smoke",),  # small enough for two gloo processes on two slow CI cores
)
