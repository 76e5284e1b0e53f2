"""A pytest plugin that makes one precision mode of one model really slower, from outside the
shipped code path, to show the suite catches it:

    AMPBENCH_SLOWDOWN=resnet50:amp_bf16:0.05 python3 -m pytest perf/test_speed.py -p scripts.slowdown_plugin

Every training step of that (model, mode) gets extra GPU work worth the given fraction of its own
step time: a spin kernel (torch.cuda._sleep) queued on the stream after the step, calibrated once
from the step's measured time, with no host sync added to the steps that are timed.
"""

from __future__ import annotations

import os

import torch

from ampbench import train

_original_step = train.Trainer.step


def _target() -> tuple[str, str, float] | None:
    spec = os.environ.get("AMPBENCH_SLOWDOWN")
    if not spec:
        return None
    model, mode, fraction = spec.split(":")
    return model, mode, float(fraction)


def _cycles_per_second() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(10_000_000)  # wake the clock
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / (start.elapsed_time(end) / 1e3)


def _slowed_step(self, *args, **kwargs):
    target = _target()
    if target is None or (self.spec.name, self.mode.name) != target[:2] or self.device.type != "cuda":
        return _original_step(self, *args, **kwargs)
    if not hasattr(self, "_slowdown_cycles"):
        for _ in range(5):  # settle before calibrating
            _original_step(self, *args, **kwargs)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            _original_step(self, *args, **kwargs)
        end.record()
        end.synchronize()
        step_seconds = start.elapsed_time(end) / 1e3 / 10
        self._slowdown_cycles = int(target[2] * step_seconds * _cycles_per_second())
        print(f"\n[slowdown] {target[0]} {target[1]}: step {step_seconds * 1e3:.3f} ms, adding "
              f"{target[2]:.0%} = {self._slowdown_cycles} spin cycles per step")
    loss = _original_step(self, *args, **kwargs)
    torch.cuda._sleep(self._slowdown_cycles)
    return loss


def pytest_configure(config) -> None:
    if _target() is not None:
        train.Trainer.step = _slowed_step
