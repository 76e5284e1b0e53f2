"""Real images with no download: scikit-learn's handwritten digits (shipped inside the package), which
the convergence cells train on, and how any uint8 images are fitted to a model's input (channels, size,
normalization). Nothing is read at import time. The digits come as ``ImageData``: uint8 images
(N, C, H, W) and int64 labels, split into train and test."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ImageData:
    name: str  # what the images are, for messages ("digits")
    train_images: torch.Tensor  # uint8 (N, C, H, W)
    train_labels: torch.Tensor  # int64 (N,)
    test_images: torch.Tensor  # uint8 (M, C, H, W)
    test_labels: torch.Tensor  # int64 (M,)
    num_classes: int

    def channel_stats(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-channel mean and std of the training images (test images never leak into the
        normalization)."""
        return channel_stats(self.train_images)


def channel_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of uint8 (N, C, H, W) images on the [0, 1] scale; the std is kept off
    zero, since it divides."""
    x = images.float().div_(255.0)
    return x.mean(dim=(0, 2, 3)), x.std(dim=(0, 2, 3)).clamp_min(1e-6)


# -- scikit-learn's digits ------------------------------------------------------------------------

DIGITS_TEST_FRACTION = 0.25  # 1,797 images -> 1,347 train, 450 test


@functools.lru_cache(maxsize=4)
def load_digits(test_fraction: float = DIGITS_TEST_FRACTION, seed: int = 0) -> ImageData:
    """The 1,797 real 8x8 handwritten digits that ship with scikit-learn, split (stratified, seeded)
    into train and test; the same seed always gives the same split.

    Cached, because importing scikit-learn costs seconds on a busy runner and every convergence cell
    reads the same split; callers must not modify the tensors in place."""
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_load_digits()
    # the pixels are integers 0..16; 255/16 maps them one-to-one onto uint8 like any other image set
    images = np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)[:, None, :, :]
    labels = bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        images, labels, test_size=test_fraction, random_state=seed, stratify=labels
    )
    return ImageData(
        name="digits",
        train_images=torch.from_numpy(np.ascontiguousarray(x_tr)), train_labels=torch.from_numpy(y_tr),
        test_images=torch.from_numpy(np.ascontiguousarray(x_te)), test_labels=torch.from_numpy(y_te),
        num_classes=10,
    )


# -- fitting images to a model's input ------------------------------------------------------------

def fit_images(images: torch.Tensor, channels: int, size: int, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 (N, channels, size, size), normalized with the training set's
    per-channel statistics, on the images' device.

    Bilinear resizing is how "When life gives you tensor cores, you run mixed precision benchmarks"
    (2019) fed 32x32 CIFAR-100 to 224x224 ResNets; a grey image becomes RGB by repetition, an RGB image
    grey by averaging.
    """
    x = images.float().div_(255.0)
    x = (x - mean.to(x.device).view(1, -1, 1, 1)) / std.to(x.device).view(1, -1, 1, 1)
    return _reshaped(x, channels, size).contiguous()


def resized_uint8(images: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """uint8 (N, C, H, W) -> uint8 (N, channels, size, size): the pixels a data set of that shape would
    hold on disk, so a DataLoader over them does the same per-sample work as over CIFAR."""
    return _reshaped(images.float(), channels, size).round().clamp(0, 255).to(torch.uint8).contiguous()


def _reshaped(x: torch.Tensor, channels: int, size: int) -> torch.Tensor:
    """float (N, C, H, W) -> (N, channels, size, size): grey repeated to RGB or RGB averaged to grey,
    then resized bilinearly where the size differs."""
    c = x.shape[1]
    if c != channels:
        if c == 1:
            x = x.expand(-1, channels, -1, -1)
        elif channels == 1:
            x = x.mean(dim=1, keepdim=True)
        else:
            raise ValueError(f"cannot map {c}-channel images onto {channels} channels")
    if x.shape[-1] != size or x.shape[-2] != size:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return x


def shuffled_batches(n: int, batch: int, seed: int, device: torch.device) -> Iterator[torch.Tensor]:
    """Index batches of `batch` out of `n` samples, endlessly: a seeded permutation per epoch, whose
    ragged tail is dropped so every step has one shape."""
    if not 0 < batch <= n:
        raise ValueError(f"a batch of {batch} cannot be drawn from {n} samples")
    gen = torch.Generator().manual_seed(seed)
    while True:
        order = torch.randperm(n, generator=gen).to(device)
        for pos in range(0, n - batch + 1, batch):
            yield order[pos:pos + batch]
