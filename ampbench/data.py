"""Real image data with no download: scikit-learn's handwritten digits (shipped inside the package) by
default, and CIFAR-10/100 (python pickle batches) and MNIST (idx files) from a data root, read through
torchvision's own dataset classes with ``download=False``.

GPU runners and CI runners are often offline, so nothing here ever reaches the network, and nothing is
read at import time. Every loader returns the same ``ImageData``: uint8 images (N, C, H, W) and int64
labels, split into train and test, so the convergence and input-pipeline code never cares where the
pixels came from. A data root that lacks the expected files, or holds files that do not parse, raises
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
    name: str  # "digits", "cifar10", "cifar100", "mnist"
    source: str  # where the pixels came from (a path, or the package that ships them)
    train_images: torch.Tensor  # uint8 (N, C, H, W)
    train_labels: torch.Tensor  # int64 (N,)
    test_images: torch.Tensor  # uint8 (M, C, H, W)
    test_labels: torch.Tensor  # int64 (M,)
    num_classes: int

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_images.shape[1:])  # type: ignore[return-value]

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
        name="digits", source="sklearn.datasets.load_digits",
        train_images=torch.from_numpy(np.ascontiguousarray(x_tr)), train_labels=torch.from_numpy(y_tr),
        test_images=torch.from_numpy(np.ascontiguousarray(x_te)), test_labels=torch.from_numpy(y_te),
        num_classes=10,
    )


# -- CIFAR-10/100 and MNIST through torchvision -----------------------------------------------------

def _no_checksum(files: list) -> list:
    return [[name, None] for name, _ in files]


def _cifar_classes() -> tuple[type, type]:
    """torchvision's CIFAR classes with the MD5 check reduced to "the file exists".

    torchvision's own loading code runs unchanged; only the checksums go, because they would reject
    the tiny files the tests write (and any subset of the real batches). A truncated or garbled file
    still fails, when it is unpickled or reshaped, and ``_load`` turns that into a DataError.
    """
    from torchvision.datasets import CIFAR10, CIFAR100

    class _CIFAR10(CIFAR10):
        train_list = _no_checksum(CIFAR10.train_list)
        test_list = _no_checksum(CIFAR10.test_list)
        meta = {**CIFAR10.meta, "md5": None}

    class _CIFAR100(CIFAR100):
        train_list = _no_checksum(CIFAR100.train_list)
        test_list = _no_checksum(CIFAR100.test_list)
        meta = {**CIFAR100.meta, "md5": None}

    return _CIFAR10, _CIFAR100


@dataclass(frozen=True)
class OnDisk:
    """Where a torchvision data set lives under a data root, and what it needs there."""

    name: str
    folder: str  # relative to the data root
    files: tuple[str, ...]  # file names inside `folder`, all required
    num_classes: int
    describe: str  # what the files are, for error messages

    def expected(self, root: Path) -> str:
        return f"{self.describe}: {', '.join(self.files)} in {Path(root) / self.folder}"


ON_DISK: dict[str, OnDisk] = {
    "cifar10": OnDisk(
        "cifar10", "cifar-10-batches-py",
        ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch", "batches.meta"),
        10, "CIFAR-10 python pickle batches (cifar-10-python.tar.gz extracted)",
    ),
    "cifar100": OnDisk(
        "cifar100", "cifar-100-python", ("train", "test", "meta"),
        100, "CIFAR-100 python pickles (cifar-100-python.tar.gz extracted)",
    ),
    "mnist": OnDisk(
        "mnist", "MNIST/raw",
        ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
        10, "MNIST idx files (gunzipped)",
    ),
}


def _dataset_class(name: str) -> type:
    if name == "mnist":
        from torchvision.datasets import MNIST

        return MNIST
    cifar10, cifar100 = _cifar_classes()
    return cifar10 if name == "cifar10" else cifar100


def check_root(name: str, root: Path | str | None) -> Path:
    """The data root, if it holds every file data set `name` needs; else DataError naming what is missing."""
    layout = ON_DISK[name]
    if root is None:
        raise DataError(f"{name}: no data root given; expected {layout.expected(Path('<data root>'))} "
                        f"(pass --perf-data-root DIR)")
    root = Path(root).expanduser()
    if not root.is_dir():
        raise DataError(f"{name}: data root {root} is not a directory; expected {layout.expected(root)}")
    folder = root / layout.folder
    missing = [f for f in layout.files if not (folder / f).is_file()]
    if missing:
        raise DataError(f"{name}: {folder} lacks {', '.join(missing)}; expected {layout.expected(root)}")
    return root


def torchvision_dataset(name: str, root: Path | str | None, train: bool, transform: Callable | None = None):
    """torchvision's dataset object for `name` under `root` (``download=False``), with `transform`
    applied per sample, as a training script's DataLoader would use it."""
    if name not in ON_DISK:
        raise KeyError(f"unknown on-disk data set {name!r}; valid: {', '.join(ON_DISK)}")
    root = check_root(name, root)
    layout = ON_DISK[name]
    try:
        dataset = _dataset_class(name)(str(root), train=train, transform=transform, download=False)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, AssertionError,
            RuntimeError, OSError, AttributeError, IndexError) as exc:
        raise DataError(f"{name}: cannot read {root / layout.folder} ({type(exc).__name__}: {exc}); "
                        f"expected {layout.expected(root)}") from exc
    _validate(name, dataset, root / layout.folder, layout)
    return dataset


def _validate(name: str, dataset: Any, folder: Path, layout: OnDisk) -> None:
    data, targets = dataset.data, dataset.targets
    n = len(data)
    where = f"{name}: {folder}"
    if n == 0:
        raise DataError(f"{where} holds no images; expected {layout.describe}")
    if len(targets) != n:
        raise DataError(f"{where}: {n} images but {len(targets)} labels")
    labels = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    if int(labels.min()) < 0 or int(labels.max()) >= layout.num_classes:
        raise DataError(f"{where}: labels span {int(labels.min())}..{int(labels.max())}, "
                        f"expected 0..{layout.num_classes - 1}")


def _to_nchw(name: str, dataset: Any) -> tuple[torch.Tensor, torch.Tensor]:
    data = dataset.data
    if isinstance(data, np.ndarray):  # CIFAR: (N, 32, 32, 3) uint8, HWC
        images = torch.from_numpy(np.ascontiguousarray(data.transpose(0, 3, 1, 2)))
    else:  # MNIST: (N, 28, 28) uint8 tensor
        images = data.unsqueeze(1).contiguous()
    labels = torch.as_tensor(np.asarray(dataset.targets), dtype=torch.int64)
    return images, labels


def load_from_root(name: str, root: Path | str | None) -> ImageData:
    """CIFAR-10, CIFAR-100 or MNIST from `root`, train and test, as ImageData."""
    train = torchvision_dataset(name, root, train=True)
    test = torchvision_dataset(name, root, train=False)
    x_tr, y_tr = _to_nchw(name, train)
    x_te, y_te = _to_nchw(name, test)
    return ImageData(name=name, source=str(Path(root) / ON_DISK[name].folder), train_images=x_tr, train_labels=y_tr,
                     test_images=x_te, test_labels=y_te, num_classes=ON_DISK[name].num_classes)


def load_cifar10(root: Path | str) -> ImageData:
    return load_from_root("cifar10", root)


def load_cifar100(root: Path | str) -> ImageData:
    return load_from_root("cifar100", root)


def load_mnist(root: Path | str) -> ImageData:
    return load_from_root("mnist", root)


DATASETS: dict[str, Callable[[Path | None], ImageData]] = {
    "digits": lambda root: load_digits(),
    "cifar10": load_cifar10,
    "cifar100": load_cifar100,
    "mnist": load_mnist,
}


def load(name: str, root: Path | str | None = None) -> ImageData:
    """Data set `name`; every one but digits needs `root`."""
    try:
        loader = DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}") from None
    return loader(root)


# -- fitting images to a model's input ------------------------------------------------------------

def fit_images(images: torch.Tensor, channels: int, size: int, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """uint8 (N, C, H, W) -> float32 (N, channels, size, size), normalized with the training set's
    per-channel statistics, on the images' device.

    Bilinear resizing is how "When life gives you tensor cores, you run mixed precision benchmarks" (2019) fed 32x32 CIFAR-100 to 224x224 ResNets; a grey image becomes
    RGB by repetition, an RGB image grey by averaging.
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
    """Seed 000's CIFAR augmentation: random crop with 4 pixels of padding, horizontal flip, to tensor,
    normalize (preceded by a resize where the model's input differs from the stored images)."""
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
