"""A pytest plugin that makes precision modes of models really slower, from outside the shipped code
path, to show the suite catches it:

    AMPBENCH_SLOWDOWN=resnet50:amp_fp16:0.01,gpt:amp_bf16:0.01 python3 -m pytest perf/test_speed.py -p scripts.slowdown_plugin

Every training step of each named (model, mode) gets extra GPU work worth the given fraction of the
step's own GPU work: a spin kernel (torch.cuda._sleep) queued on the stream after the step. It is
calibrated once per trainer from the profiler's kernel time of five plain steps, so the fraction is of
device time, not of a host-bound wall step. The spin kernel is part of the step, so a CUDA graph of
the step captures it too. No host sync is added to the steps that are timed.
"""

from __future__ import annotations

import os

import torch

from ampbench import devicetime, train

_original_step = train.Trainer.step


def _targets() -> dict[tuple[str, str], float]:
    spec = os.environ.get("AMPBENCH_SLOWDOWN", "")
    out = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        model, mode, fraction = item.split(":")
        out[(model, mode)] = float(fraction)
    return out


def _cycles_per_second() -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(10_000_000)  # wake the clock
    start.record()
    torch.cuda._sleep(50_000_000)
    end.record()
    end.synchronize()
    return 50_000_000 / (start.elapsed_time(end) / 1e3)


def _slowed_step(self, *args, **kwargs):
    fraction = _targets().get((self.spec.name, self.mode.name))
    cycles = getattr(self, "_slowdown_cycles", None)
    if fraction is None or self.device.type != "cuda" or cycles == -1:
        return _original_step(self, *args, **kwargs)
    if cycles is None:
        self._slowdown_cycles = -1  # calibrating: plain steps
        for _ in range(5):  # settle before calibrating
            _original_step(self, *args, **kwargs)
        work_ms = devicetime.profile_steps(self, 5).kernel_ms
        self._slowdown_cycles = cycles = int(fraction * work_ms / 1e3 * _cycles_per_second())
        print(f"\n[slowdown] {self.spec.name} {self.mode.name}: GPU work {work_ms:.3f} ms per step, adding "
              f"{fraction:.1%} = {cycles} spin cycles per step")
    loss = _original_step(self, *args, **kwargs)
    torch.cuda._sleep(cycles)
    return loss


def pytest_configure(config) -> None:
    if _targets():
        train.Trainer.step = _slowed_step
