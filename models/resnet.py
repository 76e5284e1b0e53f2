"""torchvision's ResNet-18/34/50/101/152, as "When life gives you tensor cores, you run mixed precision benchmarks"
(2019) trained them on CIFAR-100 resized to 224x224.

The architectures are torchvision's own (``torchvision.models.resnetXX(num_classes=...)``), so speed
numbers compare with everyone else's; only the classifier is sized for 100 classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn

from ampbench.models.flops import counted_training_flops
from ampbench.models.spec import ModelSpec, image_batch

# explicit, so a typo in a depth fails loudly rather than reaching for some other torchvision model;
# names, not functions: importing torchvision.models imports torch._dynamo, seconds of CPU time in every
# process that only needs the registry (each pytest start, each rank of a torchrun launch)
CONSTRUCTORS: dict[int, str] = {18: "resnet18", 34: "resnet34", 50: "resnet50", 101: "resnet101", 152: "resnet152"}


@dataclass(frozen=True)
class Config:
    depth: int  # one of CONSTRUCTORS' keys
    num_classes: int = 100  # CIFAR-100
    image_size: int = 224  # the seed resized CIFAR-100 to ImageNet's input size
    in_channels: int = 3  # RGB; torchvision's stem is fixed at 3


def torchvision_resnet(config: Config) -> nn.Module:
    assert config.depth in CONSTRUCTORS, f"resnet depth must be one of {sorted(CONSTRUCTORS)}, got {config.depth}"
    assert config.in_channels == 3, f"torchvision's ResNet stem takes 3 channels, got {config.in_channels}"
    # torchvision already ends in adaptive average pooling, so any image_size >= 32 works.
    # zero_init_residual: each residual branch starts as the identity (Goyal et al. 2017, the usual
    # large-batch recipe). Without it, resnet50 at lr 0.05 with no warm-up grows its activations
    # ~2.6x per step until its fp16 forward overflows.
    import torchvision.models

    constructor = getattr(torchvision.models, CONSTRUCTORS[config.depth])
    return constructor(num_classes=config.num_classes, zero_init_residual=True)


make_batch = image_batch


flops_per_sample = counted_training_flops(torchvision_resnet, make_batch)


def _spec(depth: int, batch_size: int, tier: str, **runs: tuple[str, ...] | bool) -> ModelSpec:
    """resnet`depth`'s spec; `runs`: the ModelSpec fields of the tests and tiers beyond its own tier."""
    return ModelSpec(
        name=f"resnet{depth}",
        origin='"When life gives you tensor cores, you run mixed precision benchmarks" (2019): torchvision '
               f'resnet{depth} on CIFAR-100 resized to 224x224',
        config=Config(depth=depth),
        # full width (torchvision has no knob for it) but a small image and head keep the CPU pass fast;
        # 64 leaves a 2x2 map at the last stage, as batch norm over a 1x1 map of two samples diverges
        smoke_config=Config(depth=depth, num_classes=4, image_size=64),
        build=torchvision_resnet,
        make_batch=make_batch,
        loss=F.cross_entropy,
        flops_per_sample=flops_per_sample,
        batch_size=batch_size,
        smoke_batch_size=2,
        optimizer="sgd",
        lr=0.05,
        channels_last=True,
        tier=tier,
        # torchvision's full width: a CPU fp16 step of the 64x64 smoke config takes about a second
        in_cpu_smoke=False,
        **runs,
    )


RESNET18 = _spec(18, batch_size=256, tier="full")
RESNET34 = _spec(34, batch_size=256, tier="full")
RESNET50 = _spec(50, batch_size=128, tier="quick", in_compile_tier=True, distributed=("quick", "full"))
RESNET101 = _spec(101, batch_size=64, tier="full")
RESNET152 = _spec(152, batch_size=64, tier="full")
