"""Real image data with no download: scikit-learn's handwritten digits (shipped inside the package) for
the convergence cells, and CIFAR-10 (python pickle batches) from a data root for the input pipeline,
read through torchvision's own dataset class with ``download=False``.

GPU runners and CI runners are often offline, so nothing here ever reaches the network, and nothing is
read at import time. The digits come as ``ImageData``: uint8 images (N, C, H, W) and int64 labels, split
into train and test. A data root that lacks the CIFAR-10 files, or holds files that do not parse, raises
``DataError`` naming the path and what was expected there.
"""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F


class DataError(RuntimeError):
    """A data set that is missing or cannot be read; the message names the path and what was expected."""


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


# -- CIFAR-10 through torchvision, for the input pipeline ---------------------------------------------

CIFAR10_FOLDER = "cifar-10-batches-py"  # relative to the data root
CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
                 "batches.meta")
CIFAR10_CLASSES = 10


def _expected(root: Path) -> str:
    return (f"CIFAR-10 python pickle batches (cifar-10-python.tar.gz extracted): {', '.join(CIFAR10_FILES)} "
            f"in {Path(root) / CIFAR10_FOLDER}")


def _cifar10_class() -> type:
    """torchvision's CIFAR10 with the MD5 check reduced to "the file exists".

    torchvision's own loading code runs unchanged; only the checksums go, because they would reject
    the tiny files the tests write (and any subset of the real batches). A truncated or garbled file
    still fails, when it is unpickled or reshaped, and ``cifar10_dataset`` turns that into a DataError.
    """
    from torchvision.datasets import CIFAR10

    class _CIFAR10(CIFAR10):
        train_list = [[name, None] for name, _ in CIFAR10.train_list]
        test_list = [[name, None] for name, _ in CIFAR10.test_list]
        meta = {**CIFAR10.meta, "md5": None}

    return _CIFAR10


def check_root(root: Path | str | None) -> Path:
    """The data root, if it holds every file CIFAR-10 needs; else DataError naming what is missing."""
    if root is None:
        raise DataError(f"cifar10: no data root given; expected {_expected(Path('<data root>'))} "
                        f"(pass --perf-data-root DIR)")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"cifar10: data root {root} is not a directory; expected {_expected(root)}")
    folder = root / CIFAR10_FOLDER
    missing = [f for f in CIFAR10_FILES if not (folder / f).is_file()]
    if missing:
        raise DataError(f"cifar10: {folder} lacks {', '.join(missing)}; expected {_expected(root)}")
    return root


def cifar10_dataset(root: Path | str | None, train: bool, transform: Callable | None = None):
    """torchvision's CIFAR-10 dataset under `root` (``download=False``), with `transform` applied per
    sample, as a training script's DataLoader would use it."""
    root = check_root(root)
    folder = root / CIFAR10_FOLDER
    try:
        dataset = _cifar10_class()(str(root), train=train, transform=transform, download=False)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, AssertionError,
            RuntimeError, OSError, AttributeError, IndexError) as exc:
        raise DataError(f"cifar10: cannot read {folder} ({type(exc).__name__}: {exc}); "
                        f"expected {_expected(root)}") from exc
    _validate(dataset, folder)
    return dataset


def _validate(dataset: Any, folder: Path) -> None:
    data, targets = dataset.data, dataset.targets
    n = len(data)
    where = f"cifar10: {folder}"
    if n == 0:
        raise DataError(f"{where} holds no images; expected CIFAR-10 python pickle batches")
    if len(targets) != n:
        raise DataError(f"{where}: {n} images but {len(targets)} labels")
    labels = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    if int(labels.min()) < 0 or int(labels.max()) >= CIFAR10_CLASSES:
        raise DataError(f"{where}: labels span {int(labels.min())}..{int(labels.max())}, "
                        f"expected 0..{CIFAR10_CLASSES - 1}")


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


class ArrayImageDataset(torch.utils.data.Dataset):
    """In-memory uint8 images served the way torchvision's CIFAR10 serves its pickles: each sample
    becomes a PIL image and goes through `transform`, so the per-sample host work is the real one.

    Module-level and free of lambdas so DataLoader workers can pickle it under any start method.
    """

    def __init__(self, images: torch.Tensor, targets: torch.Tensor, transform: Callable | None = None):
        import PIL.Image  # noqa: F401  imported here so forked workers inherit it instead of each importing it

        # HWC numpy, as torchvision's CIFAR10 keeps ``data``; a grey image drops its channel axis for PIL
        arr = images.permute(0, 2, 3, 1).numpy()
        self.data = np.ascontiguousarray(arr[..., 0] if arr.shape[-1] == 1 else arr)
        self.targets = [int(t) for t in targets]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        img = Image.fromarray(self.data[index])
        if self.transform is not None:
            img = self.transform(img)
        return img, self.targets[index]


def cifar_train_transform(size: int, mean: torch.Tensor, std: torch.Tensor, resize_from: int | None = None) -> Callable:
    """The CIFAR augmentation of "Mixed Precision Training on Tesla T4 and P100" (2019): random crop with
    4 pixels of padding, horizontal flip, to tensor, normalize (preceded by a resize where the model's
    input differs from the stored images)."""
    from torchvision import transforms as T

    steps = [T.Resize(size)] if resize_from is not None and resize_from != size else []
    steps += [T.RandomCrop(size, padding=4), T.RandomHorizontalFlip(), T.ToTensor(),
              T.Normalize(mean.tolist(), std.tolist())]
    return T.Compose(steps)


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
