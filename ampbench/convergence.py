"""Does a precision mode still learn, and does the host keep up with it? Pure harness, no pytest.

Three measurements, each deterministic given its seed (up to the GPU's own non-deterministic kernels):

- ``train_to_accuracy``: a zoo model trained in one mode from a fixed seed for a fixed budget on real
  images (scikit-learn's digits by default), then scored on held-out images; the per-step loss curve and
  any non-finite loss come with it. ``ParityCheck`` holds a mode's accuracy against fp32's.
- ``underflow_demo``: why loss scaling exists. A loss multiplied by a tiny factor puts the true gradients
  below fp16's smallest subnormal; an fp16 backward then flushes them to zero and the model never moves,
  while the same run with a loss scale keeps them in range and learns.
- ``measure_input_pipeline``: the samples/s of a training step fed by a real DataLoader (workers,
  pin_memory, non_blocking copies, per-sample augmentation) against the same step on device-resident
  batches; when the loader caps the step rate the mode is input-bound and its AMP speedup is hidden
  (seed 000: "two weak vCPUs" made O0, O1 and O2 cost the same).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ampbench.data import (
    ArrayImageDataset,
    ImageData,
    channel_stats,
    cifar_train_transform,
    fit_images,
    load_digits,
    resized_uint8,
    torchvision_dataset,
)
from ampbench.device import cudnn_heuristics
from ampbench.modes import PrecisionMode
from ampbench.timing import sync
from ampbench.train import MasterWeights, Trainer
from models.spec import ModelSpec


# -- budgets ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Budget:
    """How long a convergence cell trains, and what fp32 must reach for parity to mean anything."""

    steps: int  # optimizer steps, the same in every mode
    batch_size: int
    min_accuracy: float  # fp32's floor: below it the budget is too small and parity says nothing
    margin: float  # default accuracy margin when the baseline file holds none
    eval_batch_size: int = 512  # scoring batch (450 digits test images fit one)


# On a GPU the full-size models (mnist_cnn at 1x28x28, WRN-28-10 at 3x32x32, the digits resized to fit)
# train ~14 epochs of the 1,347 training digits: fp32 lands near its plateau (~98%), where the seeds'
# mode-to-mode differences are a point or two, so a 3-point margin separates "still learns" from noise.
GPU_BUDGET = Budget(steps=300, batch_size=64, min_accuracy=0.85, margin=0.03)

# On the CPU, fp16 convolutions run at a fraction of fp32's speed (no fp16 kernels), so the smoke pass
# trains shrunken configs on the digits' native 8x8 pixels, with a shorter run and a wider margin (it
# checks the code path; accuracies land at 0.92-0.97, within ~3 points of each other).
SMOKE_BUDGETS: dict[str, Budget] = {
    "mnist_cnn": Budget(steps=200, batch_size=16, min_accuracy=0.85, margin=0.08),
}
SMOKE_BUDGET = Budget(steps=80, batch_size=16, min_accuracy=0.85, margin=0.08)
SMOKE_CONFIG_OVERRIDES: dict[str, dict[str, Any]] = {
    "mnist_cnn": {"image_size": 8, "pooled_size": 4},
    "wide_resnet28_10": {"widen_factor": 1, "image_size": 8},
}


def budget_for(model: str, device: torch.device) -> Budget:
    if device.type == "cuda":
        return GPU_BUDGET
    return SMOKE_BUDGETS.get(model, SMOKE_BUDGET)


def image_config(spec: ModelSpec, smoke: bool, num_classes: int) -> tuple[Any, int, int]:
    """(config, channels, image size): the model's own config (full-size, or the smoke one shrunk
    further for the CPU) with its classifier sized for `num_classes`. ValueError for a model that
    takes no images."""
    config = spec.config_for(smoke)
    fields = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    if not {"image_size", "in_channels", "num_classes"} <= fields:
        raise ValueError(f"{spec.name}: its config has no image_size/in_channels/num_classes, "
                         f"so it cannot train on images")
    changes: dict[str, Any] = {"num_classes": num_classes}
    if smoke:
        changes.update({k: v for k, v in SMOKE_CONFIG_OVERRIDES.get(spec.name, {}).items() if k in fields})
    config = dataclasses.replace(config, **changes)
    return config, config.in_channels, config.image_size


# -- convergence -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvergenceResult:
    model: str
    mode: str
    data: str  # data set name
    accuracy: float  # on the held-out images, after the last step
    loss_curve: list[float]  # training loss of every step
    nonfinite_steps: list[int]  # steps whose loss was NaN or inf
    params_finite: bool  # every weight finite after training
    steps: int
    batch_size: int
    image_shape: tuple[int, int, int]  # what the model was fed
    seconds: float  # training wall time, device synchronized

    @property
    def finite(self) -> bool:
        return not self.nonfinite_steps and self.params_finite


def evaluate(trainer: Trainer, images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> float:
    """Top-1 accuracy of the trainer's model, in eval mode, computed the way the mode computes."""
    model, mode, device = trainer.model, trainer.mode, trainer.device
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=device)
    try:
        with torch.no_grad(), mode.math_flags(), mode.autocast(device):
            for i in range(0, len(labels), batch_size):
                x, y = trainer.prepare((images[i:i + batch_size], labels[i:i + batch_size]))
                correct += (model(x).float().argmax(dim=1) == y).sum()
    finally:
        model.train()
    return int(correct.item()) / max(1, len(labels))


WARMUP_FRACTION = 0.1  # of the budget's steps


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


def lr_factor(step: int, steps: int) -> float:
    """Seed 000's schedule: linear warm-up, then linear decay to zero at the last step. Ending at a
    small learning rate makes the final accuracy a property of the mode, not of where the last noisy
    step happened to land."""
    warmup = max(1, int(WARMUP_FRACTION * steps))
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / (steps - warmup))


# accuracy, not speed, is measured here: cuDNN's autotuning would cost more than the training
# (WRN-28-10 fp32 took 49 s with it on an H100, most of it tuning the train and eval shapes)
@cudnn_heuristics()
def train_to_accuracy(
    spec: ModelSpec,
    mode: PrecisionMode,
    device: torch.device,
    data: ImageData,
    *,
    config: Any,
    budget: Budget,
    seed: int = 0,
) -> ConvergenceResult:
    """Train `spec` in `mode` on `data` for `budget.steps` steps from `seed`, then score it.

    Every mode sees the same initial weights (Trainer seeds them), the same images in the same order
    (a seeded permutation per epoch), the same learning-rate schedule, and trains with the same step
    the speed tests time (the model's own optimizer and learning rate).
    """
    channels, size = config.in_channels, config.image_size
    mean, std = data.channel_stats()
    x_train = fit_images(data.train_images.to(device), channels, size, mean, std)
    x_test = fit_images(data.test_images.to(device), channels, size, mean, std)
    y_train, y_test = data.train_labels.to(device), data.test_labels.to(device)
    n, batch = len(y_train), budget.batch_size
    if batch > n:
        raise ValueError(f"{spec.name}: batch {batch} exceeds the {n} training images of {data.name}")

    trainer = Trainer(spec, mode, device, config=config, batch_size=batch, seed=seed)
    base_lrs = [group["lr"] for group in trainer.optimizer.param_groups]
    batches = shuffled_batches(n, batch, seed, device)
    losses: list[torch.Tensor] = []
    sync(device)
    t0 = time.perf_counter()
    with mode.math_flags():
        for step, idx in zip(range(budget.steps), batches):
            factor = lr_factor(step, budget.steps)
            for group, base in zip(trainer.optimizer.param_groups, base_lrs):
                group["lr"] = base * factor
            x, y = trainer.prepare((x_train[idx], y_train[idx]))
            losses.append(trainer.step(x, y))  # a device tensor: no host sync inside the loop
    curve = torch.stack(losses).float().cpu()
    seconds = time.perf_counter() - t0

    accuracy = evaluate(trainer, x_test, y_test, budget.eval_batch_size)
    params_finite = all(bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
    nonfinite = [int(i) for i in torch.nonzero(~torch.isfinite(curve)).flatten()]
    return ConvergenceResult(
        model=spec.name, mode=mode.name, data=data.name, accuracy=accuracy, loss_curve=curve.tolist(),
        nonfinite_steps=nonfinite, params_finite=params_finite, steps=budget.steps, batch_size=batch,
        image_shape=(channels, size, size), seconds=seconds,
    )


class Outcome(str, Enum):
    PASS = "pass"  # within the margin of fp32's accuracy, loss finite throughout
    BELOW_MARGIN = "below margin"  # learned less than fp32 by more than the margin
    NONFINITE = "non-finite"  # NaN or inf in the loss curve or the weights
    REFERENCE_FAILED = "reference failed"  # fp32 itself did not learn; parity would mean nothing


# Modes allowed to lag fp32, and why; a lagging cell of these is reported as an expected failure
# (xfail) with its figures, never silently passed, and a cell that does reach parity simply passes.
EXPECTED_TO_LAG: dict[str, str] = {
    "fp16": (
        "pure fp16 (Apex O3, .half(), static loss scale 128) has no fp32 master weights: updates smaller "
        "than half a unit in the last place of an fp16 weight round away, and batch-norm statistics run "
        "in fp16; seed 000's O3 'did not converge'"
    ),
}


@dataclass(frozen=True)
class ParityCheck:
    model: str
    mode: str
    accuracy_ref: float  # fp32's accuracy, same data, seed and budget
    margin: float  # absolute accuracy a mode may lose against fp32
    min_accuracy: float  # fp32's floor

    @property
    def line(self) -> float:
        return self.accuracy_ref - self.margin

    def judge(self, result: ConvergenceResult) -> tuple[Outcome, str]:
        head = (f"{self.model} {self.mode}: accuracy {result.accuracy:.4f} on {result.data} after "
                f"{result.steps} steps of batch {result.batch_size}")
        if not result.finite:
            where = (f"loss NaN/inf at steps {result.nonfinite_steps[:10]}"
                     f"{' ...' if len(result.nonfinite_steps) > 10 else ''} of {result.steps}"
                     if result.nonfinite_steps else "loss finite but weights NaN/inf")
            return Outcome.NONFINITE, f"{head}; {where}"
        if self.accuracy_ref < self.min_accuracy:
            return Outcome.REFERENCE_FAILED, (
                f"{head}; the fp32 reference reached only {self.accuracy_ref:.4f}, below the floor "
                f"{self.min_accuracy:.2f}, so the budget is too small for parity to mean anything")
        if result.accuracy < self.line:
            return Outcome.BELOW_MARGIN, (
                f"{head}; expected at least {self.line:.4f} (fp32 {self.accuracy_ref:.4f} - margin "
                f"{self.margin:.3f}); {100 * (self.accuracy_ref - result.accuracy):.1f} points below fp32")
        return Outcome.PASS, (f"{head}; fp32 {self.accuracy_ref:.4f}, margin {self.margin:.3f} "
                              f"({100 * (result.accuracy - self.accuracy_ref):+.1f} points)")


# -- why loss scaling exists ----------------------------------------------------------------------

FP16_SMALLEST_SUBNORMAL = 2.0**-24  # 5.96e-8: anything below half of it rounds to zero in fp16


@dataclass(frozen=True)
class UnderflowRun:
    label: str
    loss_scale: float  # 1.0: no loss scaling
    accuracy: float
    underflow_fraction: float | None  # share of nonzero fp32 gradient elements that are zero in fp16 (first step)
    grad_median: float | None  # median |fp32 gradient| of that first step, loss scale included (fp16 runs)
    weights_moved: bool
    loss_curve: list[float]


@dataclass(frozen=True)
class UnderflowReport:
    loss_factor: float  # the problem's loss is multiplied by this, shrinking every gradient with it
    grad_median: float  # median |gradient| of the first step in fp32 (nonzero elements)
    steps: int
    reference: UnderflowRun  # fp32
    unscaled: UnderflowRun  # fp16 compute, no loss scaling
    scaled: UnderflowRun  # fp16 compute, static loss scale

    def summary(self) -> str:
        u, s, r = self.unscaled, self.scaled, self.reference
        return (
            f"loss x {self.loss_factor:.3g} puts the median gradient at {self.grad_median:.2e}, below fp16's smallest "
            f"subnormal {FP16_SMALLEST_SUBNORMAL:.2e}. {u.label}: {100 * u.underflow_fraction:.1f}% of gradient "
            f"elements underflowed to zero, weights {'moved' if u.weights_moved else 'never moved'}, accuracy "
            f"{u.accuracy:.3f}. {s.label}: {100 * s.underflow_fraction:.1f}% underflowed, accuracy {s.accuracy:.3f}. "
            f"fp32: accuracy {r.accuracy:.3f} ({self.steps} steps each)"
        )


def _underflow_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))


def _first_step_underflow(model16: nn.Module, x: torch.Tensor, y: torch.Tensor, factor: float) -> tuple[float, float]:
    """(share of the gradient elements that are nonzero when computed in fp32 but zero when computed in
    fp16, median |fp32 gradient|) for one backward of ``cross_entropy * factor`` at the same weights."""
    model32 = _clone_float(model16)
    for m, xx in ((model16, x.half()), (model32, x.float())):
        m.zero_grad(set_to_none=True)
        (F.cross_entropy(m(xx).float(), y) * factor).backward()
    nonzero = flushed = 0
    mags = []
    for p16, p32 in zip(model16.parameters(), model32.parameters()):
        ref = p32.grad != 0
        nonzero += int(ref.sum())
        flushed += int((ref & (p16.grad == 0)).sum())
        mags.append(p32.grad[ref].abs().flatten())
    model16.zero_grad(set_to_none=True)
    median = float(torch.cat(mags).median()) if mags else float("nan")
    return flushed / max(1, nonzero), median


def _clone_float(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).float()


def _train_underflow(
    label: str, data: tuple[torch.Tensor, ...], device: torch.device, *, fp16: bool, loss_scale: float,
    factor: float, lr: float, steps: int, batch_size: int, seed: int,
) -> UnderflowRun:
    from ampbench.scaling import LossScaler

    x_train, y_train, x_test, y_test = data
    model = _underflow_model(seed).to(device)
    if fp16:
        model = model.half()
    start = [p.detach().clone() for p in model.parameters()]
    underflow = grad_median = None
    if fp16:
        underflow, grad_median = _first_step_underflow(model, x_train[:batch_size], y_train[:batch_size], factor * loss_scale)
    # fp32 master weights in both fp16 runs, so that the loss scale is the only difference between them;
    # the learning rate undoes the loss factor, so fp32 takes ordinary steps
    master = MasterWeights(model.parameters()) if fp16 else None
    params = master.master_params if master else list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=lr / factor, momentum=0.9)
    scaler = LossScaler(device=device.type, init_scale=loss_scale, growth_factor=1.0, backoff_factor=1.0) if fp16 else None
    losses = []
    for _, idx in zip(range(steps), shuffled_batches(len(y_train), batch_size, seed, device)):
        x = x_train[idx].half() if fp16 else x_train[idx]
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).float(), y_train[idx])
        losses.append(loss.detach())
        scaled = loss * factor
        if scaler is None:
            scaled.backward()
            optimizer.step()
        else:
            scaler.scale(scaled).backward()
            master.grads_to_master()
            scaler.step(optimizer)
            scaler.update()
            master.master_to_model()
    with torch.no_grad():
        x = x_test.half() if fp16 else x_test
        accuracy = float((model(x).float().argmax(1) == y_test).float().mean())
    moved = any(bool((p.detach() != s).any()) for p, s in zip(model.parameters(), start))
    return UnderflowRun(label, loss_scale, accuracy, underflow, grad_median, moved, torch.stack(losses).float().cpu().tolist())


def underflow_demo(
    device: torch.device,
    *,
    steps: int = 150,
    batch_size: int = 64,
    loss_factor: float = 2.0**-24,
    loss_scale: float = 2.0**16,
    lr: float = 0.05,
    seed: int = 0,
    data: ImageData | None = None,
) -> UnderflowReport:
    """A 64-64-10 MLP on the digits whose loss is multiplied by `loss_factor` (2^-24 puts typical
    gradients near 1e-9, under fp16's smallest subnormal 6e-8), trained three ways from one seed:
    fp32; fp16 compute without loss scaling; fp16 compute with a static `loss_scale` (GradScaler's
    initial 2^16). Only the scale differs between the two fp16 runs."""
    data = data if data is not None else load_digits()
    mean, std = data.channel_stats()
    tensors = (
        fit_images(data.train_images.to(device), 1, 8, mean, std), data.train_labels.to(device),
        fit_images(data.test_images.to(device), 1, 8, mean, std), data.test_labels.to(device),
    )
    common = dict(factor=loss_factor, lr=lr, steps=steps, batch_size=batch_size, seed=seed)
    reference = _train_underflow("fp32", tensors, device, fp16=False, loss_scale=1.0, **common)
    unscaled = _train_underflow("fp16 without loss scaling", tensors, device, fp16=True, loss_scale=1.0, **common)
    scaled = _train_underflow(f"fp16 with loss scale 2^{int(math.log2(loss_scale))}", tensors, device, fp16=True,
                              loss_scale=loss_scale, **common)
    # the unscaled run's first step is the problem's own gradient: loss x loss_factor, nothing more
    return UnderflowReport(loss_factor, unscaled.grad_median, steps, reference, unscaled, scaled)


# -- the input pipeline ----------------------------------------------------------------------------

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
    extra: dict = field(default_factory=dict)

    @property
    def loader_ratio(self) -> float:
        return self.loader_samples_per_s / self.resident_samples_per_s


def pipeline_dataset(config: Any, data_root: Any = None, seed: int = 0) -> tuple[torch.utils.data.Dataset, str]:
    """The training set a CIFAR-shaped model's DataLoader reads, with seed 000's per-sample augmentation:
    CIFAR-10 from `data_root` when one is given (an error if it lacks CIFAR-10), else the digits
    stored as 3x32x32 uint8 images so each sample costs the host what a CIFAR image costs."""
    size = config.image_size
    if data_root is not None:
        probe = torchvision_dataset("cifar10", data_root, train=True)
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
    # both feeds run the same kernels, so the ratio does not need cuDNN's autotuning, which costs
    # 10-25 s per model and dtype on an H100 (the speed tests' warm-up times): on the first cell
    # it alone outlasted a 45 s stage
    with mode.math_flags(), cudnn_heuristics():
        for _ in range(warmup):
            trainer.step(rx, ry)
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            losses.append(trainer.step(rx, ry))
        sync(device)
        resident = steps * batch_size / (time.perf_counter() - t0)

        # one loader for both loader measurements, so the workers start once per cell
        drain = 2 * workers  # batches the workers prefetch (prefetch_factor 2) while the step still runs
        it = iter(_loader(dataset, batch_size, warmup + 2 * steps + drain, workers, pin, seed))
        for _ in range(warmup):  # worker start-up and the first prefetches stay outside the timing
            feed(*next(it))
        sync(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            feed(*next(it))
        sync(device)
        fed = steps * batch_size / (time.perf_counter() - t0)

    for _ in range(drain):  # batches prefetched during training would arrive instantly
        next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        next(it)
    alone = steps * batch_size / (time.perf_counter() - t0)
    del it

    finite = bool(torch.isfinite(torch.stack(losses).float()).all())
    slower = fed < INPUT_BOUND_RATIO * resident
    # the loader is what caps the step only if, on its own, it cannot deliver much more than the step
    # consumes; a fed step that is slower while the loader has plenty to spare lost its time elsewhere
    # (unpinned copies, a noisy host)
    bound = slower and alone < LOADER_HEADROOM * resident
    head = (f"{spec.name} {mode.name}: the DataLoader ({workers} workers, pin_memory {'on' if pin else 'off'}) feeds "
            f"{fed:,.0f} samples/s, resident batches {resident:,.0f} ({100 * fed / resident:.0f}%); the loader "
            f"alone delivers {alone:,.0f}")
    if bound:
        message = (f"{head}: input-bound, the loader caps the step rate, so this mode's speedup over fp32 is "
                   f"hidden on this host (more --perf-loader-workers, or a faster CPU)")
    elif slower:
        message = (f"{head}: not input-bound, the loader alone has {alone / resident:.1f}x the step's need; "
                   f"the fed step lost its time elsewhere (copies, workers competing with it for cores, host noise)")
    else:
        message = f"{head}: not input-bound (the loader keeps up within {100 * (1 - INPUT_BOUND_RATIO):.0f}%)"
    return PipelineResult(
        model=spec.name, mode=mode.name, data=data_name, batch_size=batch_size, steps=steps, workers=workers,
        pin_memory=pin, resident_samples_per_s=resident, loader_samples_per_s=fed, loader_only_samples_per_s=alone,
        input_bound=bound, message=message, losses_finite=finite,
    )
