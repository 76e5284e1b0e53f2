"""WRN-28-10 (Zagoruyko & Komodakis, "Wide Residual Networks") for CIFAR-10, as "Mixed Precision Training on Tesla T4
and P100" (2019) trained it.

Seed 000's repository (ceshine/apex_pytorch_cifar_experiment) builds ``Wide_ResNet(28, 10, 0.3, 10)``
from meliketoy/wide-resnet.pytorch, and this file follows that variant so the timings compare:
pre-activation basic blocks (BN-ReLU-conv, dropout between the two convolutions), convolutions with
biases, the stride on a block's second convolution, and a 1x1 projection of the raw input wherever a
block changes width or resolution. ~36.5M parameters.
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
    depth: int = 28  # 6n + 4 layers: n blocks of two convolutions per stage, 3 stages, stem, classifier
    widen_factor: int = 10  # stage widths are 16k, 32k, 64k
    dropout: float = 0.3  # between a block's two convolutions; the seed passed 0.3
    num_classes: int = 10  # CIFAR-10
    image_size: int = 32  # CIFAR images are 32x32
    in_channels: int = 3  # RGB


class WideBasic(nn.Module):
    """Pre-activation basic block: BN-ReLU-conv3x3, dropout, BN-ReLU-conv3x3, plus the shortcut."""

    def __init__(self, in_planes: int, planes: int, dropout: float, stride: int):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, padding=1, bias=True)
        self.dropout = nn.Dropout(dropout)
        self.bn2 = nn.BatchNorm2d(planes)
        # the seed's variant downsamples in the second convolution, so the first runs at full resolution
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, in_planes, H, W) -> (B, planes, H / stride, W / stride)
        out = self.dropout(self.conv1(F.relu(self.bn1(x))))
        out = self.conv2(F.relu(self.bn2(out)))
        return out + self.shortcut(x)


class WideResNet(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        assert (config.depth - 4) % 6 == 0 and config.depth >= 10, (
            f"WRN depth must be 6n + 4 with n >= 1, got {config.depth}"
        )
        assert config.widen_factor >= 1, f"widen_factor must be >= 1, got {config.widen_factor}"
        n = (config.depth - 4) // 6
        k = config.widen_factor
        widths = (16 * k, 32 * k, 64 * k)
        self.conv1 = nn.Conv2d(config.in_channels, 16, 3, padding=1, bias=True)
        blocks: list[nn.Module] = []
        in_planes = 16
        for stage, planes in enumerate(widths):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                blocks.append(WideBasic(in_planes, planes, config.dropout, stride))
                in_planes = planes
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(in_planes)
        self.pool = nn.AdaptiveAvgPool2d(1)  # the seed's avg_pool2d(8), for any input size
        self.linear = nn.Linear(in_planes, config.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, 3, H, W) -> (B, 16, H, W) -> blocks -> (B, 64k, H/4, W/4)
        out = self.blocks(self.conv1(x))
        out = self.pool(F.relu(self.bn(out)))  # (B, 64k, 1, 1)
        return self.linear(torch.flatten(out, 1))  # (B, num_classes) logits


make_batch = image_batch


flops_per_sample = counted_training_flops(WideResNet, make_batch)


SPEC = ModelSpec(
    name="wide_resnet28_10",
    origin='"Mixed Precision Training on Tesla T4 and P100" (2019): WRN-28-10 (meliketoy variant, dropout 0.3) on '
           'CIFAR-10, batch 128',
    config=Config(),
    smoke_config=Config(depth=10, widen_factor=2, num_classes=4, image_size=16),
    build=WideResNet,
    make_batch=make_batch,
    loss=F.cross_entropy,
    flops_per_sample=flops_per_sample,
    batch_size=128,
    smoke_batch_size=4,
    optimizer="sgd",
    lr=0.05,
    channels_last=True,
    tier="quick",
    # full tier only: on the CPU its fp16 convolutions would take most of the smoke pass, on a GPU its
    # seven cells a quarter of the quick tier's budget, and it has no Linear layer but its head for the
    # compile tier's fp8 to convert
    convergence=("full",),
    input_pipeline=("quick", "full", "cpu_smoke"),
)
