"""Does a precision mode still learn? A zoo model trained in one mode from a fixed seed for a fixed
budget on real images (scikit-learn's digits by default, ``images``), then scored on held-out images
(``train_to_accuracy``); the per-step loss curve and any non-finite loss come with it. Pure harness, no
pytest; ``parity`` judges the result."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch

from ampbench.convergence.images import ImageData, fit_images, shuffled_batches
from ampbench.device import cudnn_heuristics
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode
from ampbench.speed.timing import sync
from ampbench.train import Trainer

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
# train ~14 epochs of the 1,347 training digits: fp32 lands near its plateau (~98%), where the write-ups'
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


def lr_factor(step: int, steps: int) -> float:
    """Seed 000's schedule: linear warm-up, then linear decay to zero at the last step. Ending at a
    small learning rate makes the final accuracy a property of the mode, not of where the last noisy
    step happened to land."""
    warmup = max(1, int(WARMUP_FRACTION * steps))
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / (steps - warmup))


# accuracy, not speed, is measured here: cuDNN's autotuning would cost more than the training
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
