"""LeNet-5 of "Gradient-Based Learning Applied to Document Recognition" (LeCun et al., 1998): two 5x5
convolutions, each followed by 2x2 subsampling, then three fully connected layers. ReLU and max pooling
stand in for the paper's scaled tanh and trainable average pooling, as in today's re-implementations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ampbench.models.flops import counted_training_flops
from ampbench.models.spec import ModelSpec, image_batch


@dataclass(frozen=True)
class Config:
    image_size: int = 32  # the paper's 32x32 input (28x28 digits padded); the digits are resized to it
    in_channels: int = 1  # grayscale
    c1: int = 6  # feature maps of the first convolution (C1)
    c3: int = 16  # feature maps of the second convolution (C3)
    f5: int = 120  # width of the first fully connected layer (C5)
    f6: int = 84  # width of the second (F6)
    num_classes: int = 10  # digits
    kernel: int = 5  # side of both convolutions' kernels


def _pooled_size(config: Config) -> int:
    """Side of C3's maps after the second subsampling: each unpadded convolution takes kernel - 1."""
    return ((config.image_size - config.kernel + 1) // 2 - config.kernel + 1) // 2


class LeNet5(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        side = _pooled_size(config)
        assert side >= 1, (f"image_size {config.image_size} is too small for two {config.kernel}x{config.kernel} "
                           "convolutions")
        self.c1 = nn.Conv2d(config.in_channels, config.c1, config.kernel)
        self.c3 = nn.Conv2d(config.c1, config.c3, config.kernel)
        self.f5 = nn.Linear(config.c3 * side * side, config.f5)
        self.f6 = nn.Linear(config.f5, config.f6)
        self.out = nn.Linear(config.f6, config.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, C, S, S) -> (B, c1, (S-4)/2, (S-4)/2), S = 32: (B, 6, 14, 14)
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        # -> (B, c3, P, P), P = _pooled_size; S = 32: (B, 16, 5, 5)
        x = F.max_pool2d(F.relu(self.c3(x)), 2)
        x = torch.flatten(x, 1)  # (B, c3 * P * P)
        x = F.relu(self.f5(x))  # (B, f5)
        x = F.relu(self.f6(x))  # (B, f6)
        return self.out(x)  # (B, num_classes) logits


make_batch = image_batch
flops_per_sample = counted_training_flops(LeNet5, make_batch)

SPEC = ModelSpec(
    name="lenet5",  # the entry point's name, and the model's in test ids: test_speed[lenet5-amp_bf16]
    origin='"Gradient-Based Learning Applied to Document Recognition" (LeCun et al., 1998): LeNet-5 on 32x32 digits',
    config=Config(),
    smoke_config=Config(),  # LeNet-5 is small enough for the CPU smoke pass at full size
    build=LeNet5,
    make_batch=make_batch,
    loss=F.cross_entropy,
    flops_per_sample=flops_per_sample,
    batch_size=256,
    smoke_batch_size=8,
    optimizer="adamw",  # learns the digits within the smoke pass's 80 steps, where SGD at this size does not
    lr=3e-3,
    tier="quick",
    convergence=("quick", "full", "cpu_smoke"),  # an image classifier that learns the digits in seconds: every run
)
