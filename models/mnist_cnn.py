"""The MNIST CNN of the PyTorch examples, which "Comparison for training CNN models using Tensor Cores with PyTorch"
timed with and without AMP at batch 512.

Two 3x3 convolutions, a 2x2 max pool, dropout, a 128-wide hidden layer and the classifier. The example
ends in log_softmax + nll_loss; this model returns logits and is scored with cross entropy, which is the
same function and lets the harness compute the softmax in fp32.
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
    image_size: int = 28  # MNIST digits are 28x28
    in_channels: int = 1  # grayscale
    channels1: int = 32  # output channels of the first 3x3 convolution
    channels2: int = 64  # output channels of the second 3x3 convolution
    # spatial size after pooling; 12 = (28 - 2 - 2) / 2, so adaptive pooling equals the example's max_pool2d(2)
    pooled_size: int = 12
    hidden: int = 128  # width of the fully connected hidden layer
    num_classes: int = 10  # digits
    dropout_conv: float = 0.25  # the example's dropout1, after pooling
    dropout_fc: float = 0.5  # the example's dropout2, after the hidden layer


class MnistCNN(nn.Module):
    def __init__(self, config: Config):
        super().__init__()
        conv_out = config.image_size - 4  # two unpadded 3x3 convolutions
        assert conv_out >= config.pooled_size >= 1, (
            f"pooled_size must be in [1, {conv_out}] for image_size {config.image_size}, got {config.pooled_size}"
        )
        self.conv1 = nn.Conv2d(config.in_channels, config.channels1, 3, 1)
        self.conv2 = nn.Conv2d(config.channels1, config.channels2, 3, 1)
        self.pool = nn.AdaptiveMaxPool2d(config.pooled_size)
        self.dropout1 = nn.Dropout(config.dropout_conv)
        self.fc1 = nn.Linear(config.channels2 * config.pooled_size**2, config.hidden)
        self.dropout2 = nn.Dropout(config.dropout_fc)
        self.fc2 = nn.Linear(config.hidden, config.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (B, C, H, W) -> (B, C1, H-2, W-2) -> (B, C2, H-4, W-4)
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(self.pool(x))  # (B, C2, P, P)
        x = torch.flatten(x, 1)  # (B, C2 * P * P)
        x = self.dropout2(F.relu(self.fc1(x)))  # (B, hidden)
        return self.fc2(x)  # (B, num_classes) logits


make_batch = image_batch


flops_per_sample = counted_training_flops(MnistCNN, make_batch)


SPEC = ModelSpec(
    name="mnist_cnn",
    origin='"Comparison for training CNN models using Tensor Cores with PyTorch" (undated): the PyTorch examples MNIST '
           'CNN, batch 512',
    config=Config(),
    smoke_config=Config(image_size=12, channels1=8, channels2=16, pooled_size=4, hidden=32),
    build=MnistCNN,
    make_batch=make_batch,
    loss=F.cross_entropy,
    flops_per_sample=flops_per_sample,
    batch_size=512,
    smoke_batch_size=8,
    optimizer="sgd",
    lr=0.05,
    channels_last=True,
    tier="full",
    # every run: its hidden Linear layer (9216 x 128) gives the compile tier's fp8 cells one to convert
    convergence=("quick", "full", "compile", "cpu_smoke"),
)
