"""A pytest plugin that makes precision modes of models really slower, from outside the shipped code
path, to show the suite catches it:

    AMPBENCH_SLOWDOWN=resnet50:amp_fp16:0.01,gpt:amp_bf16:0.01 python3 -m pytest perf/test_speed.py -p scripts.slowdown_plugin

Every training step of each named (model, mode) gets extra GPU work worth the given fraction of the
step's own device time: a spin kernel (torch.cuda._sleep) queued on the stream after the step. It is
calibrated once per trainer on the figure the speed gate reads: the step replayed as a CUDA graph, or
the profiler's kernel time where the step cannot be captured; so the fraction is of device time, not of
a host-bound wall step. The spin kernel is part of the step, so a CUDA graph of the step captures it too.
No host sync is added to the steps that are timed. Each slowed cell says so in its extra_info
(``injected_slowdown``), so that ``ampbench spread`` never counts it as a sample of its noise.
"""

from __future__ import annotations

import os

import pytest
import torch

from ampbench import devicetime, train
from ampbench.spread import INJECTED_KEY

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


def _device_ms_per_step(trainer) -> tuple[float, str]:
    """The trainer's device time per step as the gate measures it: graph replay, else kernel time."""
    try:
        graph = devicetime.capture(trainer)
    except devicetime.CaptureError:
        return devicetime.profile_steps(trainer, 5).kernel_ms, "profiler kernel time"
    graph.replay(5)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay(20)
    end.record()
    end.synchronize()
    del graph
    return start.elapsed_time(end) / 20, "graph replay"


def _slowed_step(self, *args, **kwargs):
    fraction = _targets().get((self.spec.name, self.mode.name))
    cycles = getattr(self, "_slowdown_cycles", None)
    if fraction is None or self.device.type != "cuda" or cycles == -1:
        return _original_step(self, *args, **kwargs)
    if cycles is None:
        self._slowdown_cycles = -1  # calibrating: plain steps
        for _ in range(5):  # settle before calibrating
            _original_step(self, *args, **kwargs)
        work_ms, how = _device_ms_per_step(self)
        self._slowdown_cycles = cycles = int(fraction * work_ms / 1e3 * _cycles_per_second())
        print(f"\n[slowdown] {self.spec.name} {self.mode.name}: {work_ms:.3f} ms per step ({how}), adding "
              f"{fraction:.1%} = {cycles} spin cycles per step")
    loss = _original_step(self, *args, **kwargs)
    torch.cuda._sleep(cycles)
    return loss


def pytest_configure(config) -> None:
    if _targets():
        train.Trainer.step = _slowed_step


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield
    bench = getattr(item, "funcargs", {}).get("benchmark")
    info = getattr(bench, "extra_info", None)
    if info is not None:
        fraction = _targets().get((info.get("model"), info.get("mode")))
        if fraction is not None:
            info[INJECTED_KEY] = fraction
