"""Dual Path Networks (Chen et al. 2017) in the CIFAR form of kuangliu/pytorch-cifar, which "RTX Titan FP16 comparison"
(2019) timed.

Each bottleneck is a ResNeXt block (1x1, grouped 3x3, 1x1) whose output splits in two: the first
``out_planes`` channels are added to the block's input (the residual path), the last ``dense_depth``
channels are concatenated to it (the densely connected path), so every block widens the feature map by
``dense_depth``. The CIFAR form has a 3x3 stride-1 stem and no stem pooling.
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
    in_planes: tuple[int, ...] = (96, 192, 384, 768)  # bottleneck width of each stage's grouped 3x3 conv
    out_planes: tuple[int, ...] = (256, 512, 1024, 2048)  # width of each stage's residual path
    num_blocks: tuple[int, ...] = (3, 4, 20, 3)  # blocks per stage; (3, 4, 20, 3) is DPN92, (2, 2, 2, 2) DPN26
    dense_depth: tuple[int, ...] = (16, 32, 24, 128)  # channels each block adds to the dense path, per stage
    groups: int = 32  # cardinality of the grouped 3x3 convolutions
    stem_channels: int = 64  # output channels of the 3x3 stem convolution
    num_classes: int = 10  # CIFAR-10
    image_size: int = 32  # CIFAR images are 32x32
    in_channels: int = 3  # RGB


DPN26 = Config(num_blocks=(2, 2, 2, 2))
DPN92 = Config(num_blocks=(3, 4, 20, 3))


class Bottleneck(nn.Module):
    def __init__(self, last_planes: int, in_planes: int, out_planes: int, dense_depth: int, stride: int,
                 first: bool, groups: int):
        super().__init__()
        assert in_planes % groups == 0, f"in_planes {in_planes} must be divisible by groups {groups}"
        self.out_planes = out_planes
        self.conv1 = nn.Conv2d(last_planes, in_planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv2 = nn.Conv2d(in_planes, in_planes, 3, stride=stride, padding=1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(in_planes)
        self.conv3 = nn.Conv2d(in_planes, out_planes + dense_depth, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_planes + dense_depth)
        # the block's new features start at zero, as torchvision's zero_init_residual does for ResNets:
        # with the default init, dpn92's activations grew ~90x in 10 steps at lr 0.05 (fp16 overflows)
        nn.init.zeros_(self.bn3.weight)
        # only a stage's first block projects its input: it changes resolution and starts a new dense path
        self.shortcut: nn.Module = nn.Identity()
        if first:
            self.shortcut = nn.Sequential(
                nn.Conv2d(last_planes, out_planes + dense_depth, 1, stride=stride, bias=False),
                nn.BatchNorm2d(out_planes + dense_depth),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, C, H, W) -> (B, C', H/stride, W/stride) with C' = (the shortcut's width) + dense_depth
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))  # (B, out_planes + dense_depth, H', W')
        x = self.shortcut(x)
        d = self.out_planes
        out = torch.cat([x[:, :d] + out[:, :d], x[:, d:], out[:, d:]], dim=1)
        return F.relu(out)


class DPN(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        stages = (config.in_planes, config.out_planes, config.num_blocks, config.dense_depth)
        assert len({len(s) for s in stages}) == 1, f"per-stage tuples must have equal lengths, got {stages}"
        assert all(n >= 1 for n in config.num_blocks), f"every stage needs a block, got {config.num_blocks}"
        self.conv1 = nn.Conv2d(config.in_channels, config.stem_channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(config.stem_channels)
        last_planes = config.stem_channels
        layers: list[nn.Module] = []
        for stage, (in_planes, out_planes, n, dense) in enumerate(zip(*stages)):
            for i in range(n):
                stride = 2 if stage > 0 and i == 0 else 1
                layers.append(Bottleneck(last_planes, in_planes, out_planes, dense, stride, i == 0, config.groups))
                # the first block's projection carries one dense slice; each block appends another
                last_planes = out_planes + (i + 2) * dense
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)  # kuangliu's avg_pool2d(4) on the 4x4 map of a 32x32 input
        self.linear = nn.Linear(last_planes, config.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, 3, H, W) -> (B, 64, H, W) -> stages -> (B, C, H/8, W/8) -> (B, num_classes) logits
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.pool(self.layers(out))
        return self.linear(torch.flatten(out, 1))


make_batch = image_batch


flops_per_sample = counted_training_flops(DPN, make_batch)


def _spec(name: str, config: Config, smoke_blocks: tuple[int, ...]) -> ModelSpec:
    return ModelSpec(
        name=name,
        origin=f'"RTX Titan FP16 comparison" (2019): kuangliu/pytorch-cifar {name.upper()} on CIFAR-10, batch 128',
        config=config,
        smoke_config=Config(
            in_planes=(16, 16, 32, 32),
            out_planes=(16, 32, 32, 64),
            num_blocks=smoke_blocks,
            dense_depth=(4, 4, 4, 8),
            groups=8,
            stem_channels=16,
            num_classes=4,
            image_size=16,
        ),
        build=DPN,
        make_batch=make_batch,
        loss=F.cross_entropy,
        flops_per_sample=flops_per_sample,
        batch_size=128,
        smoke_batch_size=4,
        optimizer="sgd",
        lr=0.05,
        channels_last=True,
        tier="full",
        input_pipeline=("full", "cpu_smoke"),
    )


DPN26_SPEC = _spec("dpn26", DPN26, smoke_blocks=(2, 2, 2, 2))
DPN92_SPEC = _spec("dpn92", DPN92, smoke_blocks=(2, 2, 4, 2))  # keeps DPN92's deep third stage deepest
