"""The input pipeline: ``measure_input_pipeline`` times a training step fed by a real DataLoader
(workers, pin_memory, non_blocking copies, per-sample augmentation) against the same step on
device-resident batches."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ampbench.convergence.images import channel_stats, load_digits, resized_uint8
from ampbench.device import cudnn_heuristics
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.pipeline.cifar import ArrayImageDataset, cifar10_dataset, cifar_train_transform
from ampbench.results import PipelineRecord
from ampbench.speed.timing import sync
from ampbench.train import Trainer
from ampbench.verdict import Verdict

INPUT_BOUND_RATIO = 0.9  # the loader-fed step runs below 90% of the resident rate ...
LOADER_HEADROOM = 1.5  # ... and the loader alone delivers under 1.5x the resident rate: the loader caps it


@dataclass(frozen=True)
class PipelineResult:
    model: str
    mode: str
    data: str  # where the loader's images came from
    batch_size: int
    steps: int  # timed steps on each side
    workers: int
    pin_memory: bool
    resident_samples_per_s: float  # the step on batches already on the device
    loader_samples_per_s: float  # the same step fed by the DataLoader
    loader_only_samples_per_s: float  # the DataLoader alone, no training: the host's ceiling
    input_bound: bool
    message: str
    losses_finite: bool = True

    @property
    def loader_ratio(self) -> float:
        return self.loader_samples_per_s / self.resident_samples_per_s

    @property
    def verdict(self) -> Verdict:
        """Non-finite where a loss was; input-bound (a finding about the host, never a regression)
        where the loader caps the step; a pass otherwise."""
        if not self.losses_finite:
            return Verdict.NON_FINITE
        return Verdict.INPUT_BOUND if self.input_bound else Verdict.PASS

    def record(self, device: str) -> PipelineRecord:
        return PipelineRecord(
            model=self.model, mode=self.mode, device=device, data=self.data, batch_size=self.batch_size,
            steps=self.steps, workers=self.workers, pin_memory=self.pin_memory,
            throughput_resident=self.resident_samples_per_s, throughput_loader=self.loader_samples_per_s,
            throughput_loader_only=self.loader_only_samples_per_s, loader_ratio=self.loader_ratio,
            input_bound=self.input_bound, input_bound_ratio=INPUT_BOUND_RATIO, loader_headroom=LOADER_HEADROOM,
            verdict=self.verdict, message=self.message,
        )


def pipeline_dataset(config: Any, data_root: Any = None, seed: int = 0) -> tuple[torch.utils.data.Dataset, str]:
    """The training set a CIFAR-shaped model's DataLoader reads, with the per-sample augmentation of
    "Mixed Precision Training on Tesla T4 and P100" (2019):
    CIFAR-10 from `data_root` when one is given (an error if it lacks CIFAR-10), else the digits
    stored as 3x32x32 uint8 images so each sample costs the host what a CIFAR image costs."""
    size = config.image_size
    if data_root is not None:
        probe = cifar10_dataset(data_root, train=True)
        # the statistics of 10,000 images are CIFAR's to three decimals, at a fifth of the memory
        mean, std = channel_stats(torch.from_numpy(probe.data[:10_000]).permute(0, 3, 1, 2))
        transform = cifar_train_transform(size, mean, std, resize_from=32)
        probe.transform = transform
        return probe, f"cifar10 ({data_root})"
    digits = load_digits(seed=seed)
    images = resized_uint8(digits.train_images, config.in_channels, 32)
    mean, std = channel_stats(images)
    transform = cifar_train_transform(size, mean, std, resize_from=32)
    return ArrayImageDataset(images, digits.train_labels, transform), "digits as 3x32x32 uint8"


def _loader(dataset, batch_size: int, batches: int, workers: int, pin: bool, seed: int):
    gen = torch.Generator().manual_seed(seed)
    # sampling with replacement makes one iterator cover any number of steps: no epoch boundary (and no
    # worker restart) inside the timed stretch
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=batches * batch_size, generator=gen)
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=workers,
                                       pin_memory=pin, drop_last=True)


def _samples_per_s(step: Callable[[], None], steps: int, batch_size: int, device: torch.device) -> float:
    """Samples/s over `steps` calls of `step`, the device synchronized before and after."""
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return steps * batch_size / (time.perf_counter() - t0)


def _loader_alone(it: Iterator, drain: int, steps: int, batch_size: int) -> float:
    """Samples/s the loader iterator `it` delivers on its own, after `drain` batches it prefetched."""
    for _ in range(drain):  # batches prefetched during training would arrive instantly
        next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    return steps * batch_size / (time.perf_counter() - t0)


def _finding(where: str, workers: int, pin: bool, resident: float, fed: float, alone: float) -> tuple[bool, str]:
    """(input-bound, message) from the three rates of the cell `where` ("model mode")."""
    slower = fed < INPUT_BOUND_RATIO * resident
    # the loader is what caps the step only if, on its own, it cannot deliver much more than the step
    # consumes; a fed step that is slower while the loader has plenty to spare lost its time elsewhere
    # (unpinned copies, a noisy host)
    bound = slower and alone < LOADER_HEADROOM * resident
    head = (f"{where}: the DataLoader ({workers} workers, pin_memory {'on' if pin else 'off'}) feeds "
            f"{fed:,.0f} samples/s, resident batches {resident:,.0f} ({100 * fed / resident:.0f}%); the loader "
            f"alone delivers {alone:,.0f}")
    if bound:
        return bound, (f"{head}: input-bound, the loader caps the step rate, so this mode's speedup over fp32 is "
                       f"hidden on this host (more --perf-loader-workers, or a faster CPU)")
    if slower:
        return bound, (f"{head}: not input-bound, the loader alone has {alone / resident:.1f}x the step's need; "
                       f"the fed step lost its time elsewhere (copies, workers competing with it for cores, "
                       f"host noise)")
    return bound, f"{head}: not input-bound (the loader keeps up within {100 * (1 - INPUT_BOUND_RATIO):.0f}%)"


def measure_input_pipeline(
    spec: ModelSpec,
    mode: PrecisionMode,
    device: torch.device,
    *,
    config: Any,
    dataset: torch.utils.data.Dataset,
    data_name: str,
    batch_size: int,
    steps: int,
    warmup: int,
    workers: int,
    pin_memory: bool,
    seed: int = 0,
) -> PipelineResult:
    """Samples/s of `spec`'s training step in `mode`, fed three ways: device-resident batches, a real
    DataLoader (`workers` processes, `pin_memory`, non_blocking copies), and the DataLoader alone."""
    pin = pin_memory and device.type == "cuda"  # pinning needs an accelerator to pin for
    trainer = Trainer(spec, mode, device, config=config, batch_size=batch_size, seed=seed)
    losses: list[torch.Tensor] = []

    def feed(x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.to(device, non_blocking=pin)
        y = y.to(device, non_blocking=pin)
        losses.append(trainer.step(*trainer.prepare((x, y))))

    # resident: the first loader batch, kept on the device, so both sides train on real pixels
    first_x, first_y = next(iter(_loader(dataset, batch_size, 1, 0, False, seed)))
    rx, ry = trainer.prepare((first_x.to(device), first_y.to(device)))
    # both feeds run the same kernels, so the ratio does not need cuDNN's autotuning (seconds per model
    # and dtype)
    with mode.math_flags(), cudnn_heuristics():
        for _ in range(warmup):
            trainer.step(rx, ry)
        resident = _samples_per_s(lambda: losses.append(trainer.step(rx, ry)), steps, batch_size, device)

        # one loader for both loader measurements, so the workers start once per cell
        drain = 2 * workers  # batches the workers prefetch (prefetch_factor 2) while the step still runs
        it = iter(_loader(dataset, batch_size, warmup + 2 * steps + drain, workers, pin, seed))
        for _ in range(warmup):  # worker start-up and the first prefetches stay outside the timing
            feed(*next(it))

        def feed_next(batches: Iterator = it) -> None:
            feed(*next(batches))

        fed = _samples_per_s(feed_next, steps, batch_size, device)

    alone = _loader_alone(it, drain, steps, batch_size)
    del it

    finite = bool(torch.isfinite(torch.stack(losses).float()).all())
    bound, message = _finding(f"{spec.name} {mode.name}", workers, pin, resident, fed, alone)
    return PipelineResult(
        model=spec.name, mode=mode.name, data=data_name, batch_size=batch_size, steps=steps, workers=workers,
        pin_memory=pin, resident_samples_per_s=resident, loader_samples_per_s=fed, loader_only_samples_per_s=alone,
        input_bound=bound, message=message, losses_finite=finite,
    )
