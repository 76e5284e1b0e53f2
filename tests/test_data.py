"""The suite's image data on the CPU (``ampbench.convergence.images``, ``ampbench.pipeline.cifar``): the
digits split, and CIFAR-10 read through torchvision from tiny files written in its exact on-disk format,
plus the errors a missing or corrupt root gives; and convergence parity's verdicts.

The fixtures write what the real archive holds: python pickles of a dict of ``data``, an (N, 3072) uint8
array of R, G and B planes, and ``labels``, plus a meta pickle.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from ampbench.convergence import images, parity, training
from ampbench.pipeline import cifar
from ampbench.pipeline import measure as pipeline

# one marked pixel per image, so a test can tell whether the planes and axes arrive where they belong
MARK = (5, 7)  # (row, column)


def _cifar_images(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 200, size=(n, 3, 32, 32), dtype=np.uint8)
    rgb[:, 0, MARK[0], MARK[1]] = 250  # red plane
    rgb[:, 1, MARK[0], MARK[1]] = 251  # green plane
    rgb[:, 2, MARK[0], MARK[1]] = 252  # blue plane
    return rgb, [int(v) for v in rng.integers(0, 10, size=n)]


def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)  # the archives were written by Python 2's cPickle


def write_cifar10(root: Path, per_batch: int = 3) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        rgb, labels = _cifar_images(per_batch, seed=i)
        _pickle(folder / name, {
            "batch_label": f"{name} of 6", "labels": labels, "data": rgb.reshape(per_batch, 3072),
            "filenames": [f"img_{i}_{j}.png" for j in range(per_batch)],
        })
    _pickle(folder / "batches.meta", {
        "num_cases_per_batch": per_batch, "num_vis": 3072,
        "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"],
    })
    return root


# -- the digits ----------------------------------------------------------------------------------

def test_digits_split_is_real_stratified_and_deterministic():
    d = images.load_digits()
    again = images.load_digits.__wrapped__()  # bypass the cache: a fresh load gives the same split
    assert d.name == "digits" and d.num_classes == 10
    assert d.train_images.shape[1:] == (1, 8, 8) and d.train_images.dtype == torch.uint8
    assert len(d.train_labels) + len(d.test_labels) == 1797, "scikit-learn ships 1,797 digits"
    assert len(d.test_labels) == 450
    assert torch.equal(d.train_images, again.train_images) and torch.equal(d.test_labels, again.test_labels)
    assert int(d.train_images.max()) == 255 and int(d.train_images.min()) == 0
    counts = torch.bincount(d.test_labels, minlength=10)
    assert int(counts.min()) >= 43 and int(counts.max()) <= 47, f"test split not stratified: {counts.tolist()}"
    other = images.load_digits.__wrapped__(seed=1)
    assert not torch.equal(other.test_images, d.test_images), "another seed should give another split"


def test_fit_images_resizes_and_normalizes():
    d = images.load_digits()
    mean, std = d.channel_stats()
    x = images.fit_images(d.train_images[:16], 3, 32, mean, std)
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32
    assert torch.equal(x[:, 0], x[:, 2]), "a grey image becomes RGB by repeating its channel"
    full = images.fit_images(d.train_images, 1, 8, mean, std)
    assert abs(float(full.mean())) < 1e-4 and abs(float(full.std()) - 1.0) < 1e-3


# -- CIFAR-10 through torchvision ------------------------------------------------------------------

def test_cifar10_pickles_load_through_torchvision(tmp_path):
    root = write_cifar10(tmp_path)
    train = cifar.cifar10_dataset(root, train=True)
    test = cifar.cifar10_dataset(root, train=False)
    assert type(train).__mro__[1].__module__.startswith("torchvision"), "must be read by torchvision's own class"
    assert len(train) == 15 and len(test) == 3 and train.classes[0] == "airplane"
    expected_rgb, expected_labels = _cifar_images(3, seed=0)
    # torchvision keeps CIFAR as HWC; the planes of the pickle must land in the last axis
    assert np.array_equal(train.data[:3], expected_rgb.transpose(0, 2, 3, 1)), "planes or axes were scrambled"
    assert train.targets[:3] == expected_labels
    assert train.data[0, MARK[0], MARK[1]].tolist() == [250, 251, 252]


def test_pipeline_dataset_reads_cifar_from_the_root(tmp_path):
    from ampbench.models import get_model

    config, _, _ = training.image_config(get_model("wide_resnet28_10"), True, 10)
    dataset, name = pipeline.pipeline_dataset(config, write_cifar10(tmp_path))
    x, y = dataset[0]
    assert name.startswith("cifar10") and x.shape == (3, config.image_size, config.image_size)
    digits, name = pipeline.pipeline_dataset(config, None)
    x, y = digits[0]
    assert name.startswith("digits") and x.shape == (3, config.image_size, config.image_size) and 0 <= y < 10


# -- missing and corrupt roots ----------------------------------------------------------------------

def test_missing_root_names_path_and_expected_files(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(cifar.DataError) as err:
        cifar.cifar10_dataset(missing, train=True)
    assert str(missing) in str(err.value) and "not a directory" in str(err.value)
    assert "data_batch_1" in str(err.value) and "CIFAR-10 python pickle" in str(err.value)
    with pytest.raises(cifar.DataError, match="no data root given.*--perf-data-root"):
        cifar.cifar10_dataset(None, train=True)


def test_root_without_the_data_set_lists_what_is_missing(tmp_path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "test_batch").unlink()
    (tmp_path / "cifar-10-batches-py" / "batches.meta").unlink()
    with pytest.raises(cifar.DataError, match=r"cifar-10-batches-py lacks test_batch, batches.meta"):
        cifar.cifar10_dataset(tmp_path, train=True)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "bad labels"])
def test_corrupt_cifar_names_the_folder(tmp_path, damage):
    root = write_cifar10(tmp_path)
    batch = root / "cifar-10-batches-py" / "data_batch_2"
    if damage == "garbage":
        batch.write_bytes(b"this is not a pickle")
    elif damage == "truncated":
        _pickle(batch, {"labels": [1, 2], "data": np.zeros((2, 3000), dtype=np.uint8)})
    else:
        rgb, _ = _cifar_images(3, seed=1)
        _pickle(batch, {"labels": [1, 2, 99], "data": rgb.reshape(3, 3072)})
    with pytest.raises(cifar.DataError) as err:
        cifar.cifar10_dataset(root, train=True)
    assert "cifar-10-batches-py" in str(err.value) and "cifar10" in str(err.value)


# -- the convergence verdicts (pure logic, no training) ---------------------------------------------

def _result(accuracy: float,
            curve: list[float] | None = None, finite_params: bool = True) -> training.ConvergenceResult:
    curve = curve if curve is not None else [2.3, 1.0, 0.5]
    bad = [i for i, v in enumerate(curve) if not np.isfinite(v)]
    return training.ConvergenceResult("wide_resnet28_10", "amp_fp16", "digits", accuracy, curve, bad, finite_params,
                                  len(curve), 64, (3, 32, 32), 1.0)


@pytest.mark.parametrize("accuracy, curve, outcome", [
    (0.965, None, parity.Outcome.PASS),
    (0.95, None, parity.Outcome.PASS),
    (0.93, None, parity.Outcome.BELOW_MARGIN),
    (0.97, [2.3, float("nan"), 0.4], parity.Outcome.NONFINITE),
])
def test_parity_check(accuracy, curve, outcome):
    check = parity.ParityCheck("wide_resnet28_10", "amp_fp16", accuracy_ref=0.98, margin=0.03, min_accuracy=0.9)
    got, message = check.judge(_result(accuracy, curve))
    assert got is outcome, message
    assert message.startswith("wide_resnet28_10 amp_fp16: accuracy")
    if outcome is parity.Outcome.BELOW_MARGIN:
        assert "expected at least 0.9500" in message and "fp32 0.9800" in message and "5.0 points below" in message
    if outcome is parity.Outcome.NONFINITE:
        assert "steps [1]" in message


def test_parity_needs_a_parity_mode_that_learned():
    check = parity.ParityCheck("mnist_cnn", "bf16", accuracy_ref=0.4, margin=0.03, min_accuracy=0.9)
    got, message = check.judge(_result(0.41))
    assert got is parity.Outcome.PARITY_FAILED and "budget is too small" in message
