"""The Trainer's optimizer step lands on the CPU as torch's reference (for-loop) implementation lands it,
in every parameter dtype: a fused CPU kernel that rounds 16-bit updates away (torch 2.13's SGD) would
leave pure fp16 and bf16 training standing still."""

from __future__ import annotations

import pytest
import torch

from ampbench import models
from ampbench.modes import MODES
from ampbench.train import OPTIMIZERS, Trainer

CPU = torch.device("cpu")


def _steps(trainer: Trainer, steps: int) -> list[torch.Tensor]:
    trainer.run(steps)
    return [p.detach().clone() for p in trainer.model.parameters()]


@pytest.mark.parametrize("model", ["mlp", "mnist_cnn", "gpt"])
@pytest.mark.parametrize("mode", ["fp32", "fp16", "bf16"])
def test_steps_land_as_the_for_loop_optimizer_lands_them(model: str, mode: str):
    spec = models.get_model(model)
    trainer = Trainer(spec, MODES[mode], CPU, smoke=True)
    assert type(trainer.optimizer) is type(OPTIMIZERS[spec.optimizer]([torch.zeros(1, requires_grad=True)], 1e-3,
                                                                        torch.float32))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    got = _steps(trainer, 3)
    # built and stepped after the first, so that dropout draws the same masks from the seeded generator
    reference = Trainer(spec, MODES[mode], CPU, smoke=True)
    kwargs = {k: v for k, v in reference.optimizer.defaults.items()
              if k in ("lr", "momentum", "weight_decay", "betas", "eps")}
    reference.optimizer = type(reference.optimizer)(reference.model.parameters(), foreach=False, **kwargs)
    want = _steps(reference, 3)
    moved = sum((a.float() - b.float()).abs().sum().item() for a, b in zip(got, before))
    expected = sum((a.float() - b.float()).abs().sum().item() for a, b in zip(want, before))
    apart = sum((a.float() - b.float()).abs().sum().item() for a, b in zip(got, want))
    assert expected > 0, f"{model} {mode}: the for-loop optimizer's three steps changed no weight"
    assert apart <= 0.1 * expected, (f"{model} {mode}: three steps moved the weights by {moved:.4g} in all, "
                                     f"{apart:.4g} away from the for-loop optimizer's {expected:.4g}")
