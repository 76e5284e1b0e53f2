"""Does a precision mode still learn? Pure harness, no pytest.

``train_to_accuracy``: a zoo model trained in one mode from a fixed seed for a fixed budget on real
images (scikit-learn's digits by default), then scored on held-out images; the per-step loss curve and
any non-finite loss come with it. ``ParityCheck`` holds a mode's accuracy against its reference's
(fp32's, or compiled amp_bf16's for fp8), and ``parity_cell`` turns that into the cell's record. The
input pipeline (``ampbench.pipeline``) and the underflow demonstration (``ampbench.underflow``) have
modules of their own.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

from ampbench.data import ImageData, fit_images, shuffled_batches
from ampbench.device import cudnn_heuristics
from ampbench.modes import PrecisionMode
from ampbench.results import ConvergenceRecord
from ampbench.speed.timing import sync
from ampbench.verdict import Verdict
from ampbench.train import Trainer
from ampbench.baselines.entries import ConvergenceEntry
from ampbench.models.spec import ModelSpec



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


class Outcome(str, Enum):
    PASS = "pass"  # within the margin of fp32's accuracy, loss finite throughout
    BELOW_MARGIN = "below margin"  # learned less than fp32 by more than the margin
    NONFINITE = "non-finite"  # NaN or inf in the loss curve or the weights
    REFERENCE_FAILED = "reference failed"  # fp32 itself did not learn; parity would mean nothing


# each outcome in the suite's one vocabulary, and what a failing test says first
VERDICTS = {Outcome.PASS: Verdict.PASS, Outcome.BELOW_MARGIN: Verdict.REGRESSION,
            Outcome.NONFINITE: Verdict.NON_FINITE, Outcome.REFERENCE_FAILED: Verdict.REFERENCE_FAILED}
FAILURE_PREFIXES = {Outcome.NONFINITE: "non-finite training", Outcome.BELOW_MARGIN: "convergence regression",
                    Outcome.REFERENCE_FAILED: "{reference} reference did not learn"}


# Modes allowed to lag fp32, and why; a lagging cell of these is reported as an expected failure
# (xfail) with its figures, never silently passed, and a cell that does reach parity simply passes.
EXPECTED_TO_LAG: dict[str, str] = {
    "fp16": (
        "pure fp16 (Apex O3, .half(), static loss scale 128) has no fp32 master weights: updates smaller "
        "than half a unit in the last place of an fp16 weight round away, and batch-norm statistics run "
        "in fp16; O3 'did not converge' in \"Mixed Precision Training on Tesla T4 and P100\" (2019)"
    ),
}


@dataclass(frozen=True)
class ParityCheck:
    model: str
    mode: str
    accuracy_ref: float  # the reference's accuracy, same data, seed and budget
    margin: float  # absolute accuracy a mode may lose against the reference
    min_accuracy: float  # the reference's floor
    reference: str = "fp32"  # the mode held against (ampbench.modes.label of its parity_reference)

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
        ref = self.reference
        if self.accuracy_ref < self.min_accuracy:
            return Outcome.REFERENCE_FAILED, (
                f"{head}; the {ref} reference reached only {self.accuracy_ref:.4f}, below the floor "
                f"{self.min_accuracy:.2f}, so the budget is too small for parity to mean anything")
        if result.accuracy < self.line:
            return Outcome.BELOW_MARGIN, (
                f"{head}; expected at least {self.line:.4f} ({ref} {self.accuracy_ref:.4f} - margin "
                f"{self.margin:.3f}); {100 * (self.accuracy_ref - result.accuracy):.1f} points below {ref}")
        return Outcome.PASS, (f"{head}; {ref} {self.accuracy_ref:.4f}, margin {self.margin:.3f} "
                              f"({100 * (result.accuracy - self.accuracy_ref):+.1f} points)")


@dataclass(frozen=True)
class ParityCell:
    """A convergence cell's record and how its test ends: passes, fails as expected (a mode of
    EXPECTED_TO_LAG that lagged), or fails."""

    record: ConvergenceRecord
    outcome: Outcome
    lag_reason: str | None  # why the mode may lag, where it may

    @property
    def expected_lag(self) -> bool:
        return self.record.verdict is Verdict.EXPECTED_LAG

    def failure(self) -> str:
        prefix = FAILURE_PREFIXES[self.outcome].format(reference=self.record.reference or "fp32")
        return f"{prefix}: {self.record.message}"

    def baseline_figures(self) -> dict:
        """What the cell's baseline entry keeps; its margin is policy, and one a person put there stays."""
        r = self.record
        return {"margin": r.margin, "accuracy": r.accuracy, "accuracy_ref": r.accuracy_ref, "reference": r.reference,
                "steps": r.steps,
                "batch_size": r.batch_size, "data": r.data, "finite": self.outcome is not Outcome.NONFINITE,
                "within_margin": self.outcome is Outcome.PASS}


def parity_cell(result: ConvergenceResult, reference: ConvergenceResult, budget: Budget, baseline: ConvergenceEntry | None,
                device: str, seed: int, reference_label: str = "fp32") -> ParityCell:
    """Hold a mode's training against its reference's (fp32's, or the mode's parity_reference, named
    `reference_label`), with the margin of its baseline entry (the budget's default where it holds none)."""
    held = baseline.margin if baseline is not None else None
    margin = float(held) if held is not None else budget.margin
    check = ParityCheck(result.model, result.mode, reference.accuracy, margin, budget.min_accuracy, reference_label)
    outcome, message = check.judge(result)
    lag_reason = EXPECTED_TO_LAG.get(result.mode)
    verdict, reason = VERDICTS[outcome], (outcome.value if outcome is Outcome.BELOW_MARGIN else None)
    if lag_reason and outcome in (Outcome.BELOW_MARGIN, Outcome.NONFINITE):
        verdict, reason = Verdict.EXPECTED_LAG, outcome.value
    record = ConvergenceRecord(
        model=result.model, mode=result.mode, device=device, data=result.data, image_shape=list(result.image_shape),
        steps=result.steps, batch_size=result.batch_size, seed=seed, accuracy=result.accuracy,
        accuracy_ref=reference.accuracy, reference=reference_label, margin=margin, min_accuracy=budget.min_accuracy,
        loss_curve=result.loss_curve,
        nonfinite_steps=result.nonfinite_steps, train_seconds=result.seconds,
        baseline_margin=held, expected_to_lag=bool(lag_reason),
        verdict=verdict, message=message, reason=reason,
    )
    return ParityCell(record, outcome, lag_reason)
