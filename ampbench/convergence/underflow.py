"""Why loss scaling exists: ``underflow_demo`` multiplies a loss by a tiny factor, which puts the true
gradients below fp16's smallest subnormal; an fp16 backward then flushes them to zero and the model never
moves, while the same run with a loss scale keeps them in range and learns."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ampbench.convergence.images import ImageData, fit_images, load_digits, shuffled_batches
from ampbench.results import UnderflowRecord
from ampbench.train import MasterWeights

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
    fp32: UnderflowRun
    unscaled: UnderflowRun  # fp16 compute, no loss scaling
    scaled: UnderflowRun  # fp16 compute, static loss scale

    def summary(self) -> str:
        u, s, r = self.unscaled, self.scaled, self.fp32
        assert u.underflow_fraction is not None and s.underflow_fraction is not None, "fp16 runs measure it"
        return (
            f"loss x {self.loss_factor:.3g} puts the median gradient at {self.grad_median:.2e}, below fp16's smallest "
            f"subnormal {FP16_SMALLEST_SUBNORMAL:.2e}. {u.label}: {100 * u.underflow_fraction:.1f}% of gradient "
            f"elements underflowed to zero, weights {'moved' if u.weights_moved else 'never moved'}, accuracy "
            f"{u.accuracy:.3f}. {s.label}: {100 * s.underflow_fraction:.1f}% underflowed, accuracy {s.accuracy:.3f}. "
            f"fp32: accuracy {r.accuracy:.3f} ({self.steps} steps each)"
        )

    def record(self, device: str) -> UnderflowRecord:
        """The demonstration's record: the same run without and with a loss scale, and fp32's."""
        ref, bare, scaled = self.fp32, self.unscaled, self.scaled
        return UnderflowRecord(
            model="mlp_64_64_10", device=device, data="digits", steps=self.steps, loss_factor=self.loss_factor,
            grad_median=self.grad_median, fp16_smallest_subnormal=FP16_SMALLEST_SUBNORMAL, loss_scale=scaled.loss_scale,
            accuracy_ref=ref.accuracy, accuracy_unscaled=bare.accuracy, accuracy_scaled=scaled.accuracy,
            underflow_unscaled=bare.underflow_fraction, underflow_scaled=scaled.underflow_fraction,
            weights_moved_unscaled=bare.weights_moved, loss_curve_unscaled=bare.loss_curve,
            loss_curve_scaled=scaled.loss_curve, loss_curve=ref.loss_curve, message=self.summary(),
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
        g16, g32 = p16.grad, p32.grad
        assert g16 is not None and g32 is not None, "the backward above gives every parameter its gradient"
        ref = g32 != 0
        nonzero += int(ref.sum())
        flushed += int((ref & (g16 == 0)).sum())
        mags.append(g32[ref].abs().flatten())
    model16.zero_grad(set_to_none=True)
    median = float(torch.cat(mags).median()) if mags else float("nan")
    return flushed / max(1, nonzero), median


def _clone_float(model: nn.Module) -> nn.Module:
    return copy.deepcopy(model).float()


def _train_underflow(
    label: str, data: tuple[torch.Tensor, ...], device: torch.device, *, fp16: bool, loss_scale: float,
    factor: float, lr: float, steps: int, batch_size: int, seed: int,
) -> UnderflowRun:
    from ampbench.loss_scaler import LossScaler

    x_train, y_train, x_test, y_test = data
    model = _underflow_model(seed).to(device)
    if fp16:
        model = model.half()
    start = [p.detach().clone() for p in model.parameters()]
    underflow = grad_median = None
    if fp16:
        underflow, grad_median = _first_step_underflow(model, x_train[:batch_size],
                                                       y_train[:batch_size], factor * loss_scale)
    # fp32 master weights in both fp16 runs, so that the loss scale is the only difference between them;
    # the learning rate undoes the loss factor, so fp32 takes ordinary steps
    master = MasterWeights(model.parameters()) if fp16 else None
    params = master.master_params if master else list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=lr / factor, momentum=0.9)
    scaler = LossScaler(device=device.type, init_scale=loss_scale,
                        growth_factor=1.0, backoff_factor=1.0) if fp16 else None
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
            assert master is not None, "an fp16 run keeps fp32 master weights"
            scaler.scale(scaled).backward()
            master.grads_to_master()
            scaler.step(optimizer)
            scaler.update()
            master.master_to_model()
    with torch.no_grad():
        x = x_test.half() if fp16 else x_test
        accuracy = float((model(x).float().argmax(1) == y_test).float().mean())
    moved = any(bool((p.detach() != s).any()) for p, s in zip(model.parameters(), start))
    return UnderflowRun(label, loss_scale, accuracy, underflow, grad_median, moved,
                        torch.stack(losses).float().cpu().tolist())


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
    common: dict[str, Any] = dict(factor=loss_factor, lr=lr, steps=steps, batch_size=batch_size, seed=seed)
    fp32 = _train_underflow("fp32", tensors, device, fp16=False, loss_scale=1.0, **common)
    unscaled = _train_underflow("fp16 without loss scaling", tensors, device, fp16=True, loss_scale=1.0, **common)
    scaled = _train_underflow(f"fp16 with loss scale 2^{int(math.log2(loss_scale))}", tensors, device, fp16=True,
                              loss_scale=loss_scale, **common)
    # the unscaled run's first step is the problem's own gradient: loss x loss_factor, nothing more
    assert unscaled.grad_median is not None, "an fp16 run measures its first step's gradients"
    return UnderflowReport(loss_factor, unscaled.grad_median, steps, fp32, unscaled, scaled)

