"""CIFAR-10 (python pickle batches) from a data root, for the input pipeline, read through
torchvision's own dataset class with ``download=False``, and in-memory images served the same way.

GPU runners and CI runners are often offline, so nothing here ever reaches the network, and nothing is
read at import time. A data root that lacks the CIFAR-10 files, or holds files that do not parse, raises
``DataError`` naming the path and what was expected there.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch


class DataError(RuntimeError):
    """A data set that is missing or cannot be read; the message names the path and what was expected."""


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
