"""The fidelity check: does the harness measure the speedup a plain, hand-written training loop gets?

For each cell (a model and an autocast mode), in one process and alternating, the harness's wall-clock
measurement (the calls ``test_speed`` makes, with the default options) and a plain loop's (the same
model, its optimizer and good practice: channels_last for convnets on CUDA, the fused optimizer, the
loss in fp32), each taken `repeats` times. Alternating matters: against a recording made in another
process, even on the same machine, the harness's cost would mix with run-to-run drift, which for AMP
cells can reach 10-20%. Optionally also a naive loop (contiguous tensors, the optimizer's default
implementation) against the same plain fp32 loop: what good practice itself is worth.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass
from typing import Iterator

import torch

from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from ampbench.device import configure_backends, release, resolve
from ampbench.models import get_model
from ampbench.models.spec import ModelSpec
from ampbench.modes import FP32_MODE, MODES, PrecisionMode, get_mode
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.speed import sides
from ampbench.speed.clocks import fresh_timer
from ampbench.speed.timing import extend_until_tight, sync, time_block
from ampbench.stats import SpeedupEstimate
from ampbench.train import memory_format_for

# the plain loop is written the way people write mixed precision: torch.autocast around forward and loss,
# eager (the fp8 rows also convert layers and compile, which a plain loop does not)
AUTOCAST_MODES = tuple(name for name, mode in MODES.items()
                       if mode.autocast_dtype_name is not None and mode.fp8_recipe is None and not mode.compile)
DEFAULT_CELLS = (("resnet50", "amp_bf16"), ("resnet50", "amp_fp16"), ("gpt", "amp_bf16"), ("gpt", "amp_fp16"))
DEFAULT_REPEATS = 2
PLAIN_WARMUP = 10  # steps of each side before the first timed block
PLAIN_ROUNDS = 10  # interleaved rounds; the speedup is their median ratio
PLAIN_STEPS = 6  # steps per timed block


class FidelityError(ValueError):
    """A cell the check cannot run; the message says which and why."""


def parse_cell(text: str) -> tuple[str, str]:
    """'MODEL:MODE' -> (model, mode), for a model of the zoo and a mode the plain loop can write."""
    model, sep, mode = text.partition(":")
    if not sep:
        raise FidelityError(f"{text!r} is not MODEL:MODE, e.g. resnet50:amp_bf16")
    try:
        get_model(model)
    except KeyError as exc:
        raise FidelityError(f"{text!r}: {exc.args[0]}") from None
    if mode not in AUTOCAST_MODES:
        raise FidelityError(f"{text!r}: the plain loop runs the autocast modes only ({', '.join(AUTOCAST_MODES)})")
    return model, mode


@dataclass(frozen=True)
class FidelityRow:
    model: str
    mode: str
    harness: tuple[SpeedupEstimate, ...]  # one per repeat
    plain: tuple[float, ...]  # one per repeat

    @property
    def harness_speedup(self) -> float:
        return statistics.median(e.speedup for e in self.harness)

    @property
    def plain_speedup(self) -> float:
        return statistics.median(self.plain)

    @property
    def difference(self) -> float:
        """How far the harness's speedup lies from the plain loop's, relative to the plain loop's."""
        return self.harness_speedup / self.plain_speedup - 1


class _PlainLoop:
    """One model trained by a hand-written step, on 2 input batches and 3 target batches cycled
    independently: on one fixed batch a model memorises it and its fp16 steps start to overflow."""

    def __init__(self, spec: ModelSpec, device: torch.device, smoke: bool, autocast: torch.dtype | None,
                 good_practice: bool):
        config, batch = spec.config_for(smoke), spec.batch_size_for(smoke)
        fmt = memory_format_for(spec, device) if good_practice else torch.contiguous_format
        torch.manual_seed(0)
        self.spec, self.device, self.autocast = spec, device, autocast
        self.model = spec.build(config).to(device, memory_format=fmt)
        fused = good_practice or None  # None: the optimizer's default (foreach) implementation
        self.opt: torch.optim.Optimizer
        if spec.optimizer == "sgd":
            self.opt = torch.optim.SGD(self.model.parameters(), lr=spec.lr, momentum=0.9,
                                       weight_decay=5e-4, fused=fused)
        else:
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                         fused=fused)
        gen = torch.Generator(device=device).manual_seed(0)
        batches = [spec.make_batch(config, batch, device, gen) for _ in range(3)]
        self.inputs = [x.contiguous(memory_format=fmt) if x.dim() == 4 else x for x, _ in batches[:2]]
        self.targets = [y for _, y in batches]
        self.scaler = torch.amp.GradScaler(device.type, enabled=autocast == torch.float16)
        self.steps = 0

    def step(self) -> None:
        x, y = self.inputs[self.steps % 2], self.targets[self.steps % 3]
        self.steps += 1
        # TF32 off on both sides, as in the harness's fp32 and autocast modes: PyTorch's default would run
        # cuDNN's convolutions in TF32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        with torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None):
            loss = self.spec.loss(self.model(x).float(), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        self.opt.zero_grad(set_to_none=True)

    def block(self) -> float:
        def run() -> None:
            for _ in range(PLAIN_STEPS):
                self.step()

        return time_block(self.device, run)


def plain_speedup(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool,
                  good_practice: bool = True) -> float:
    """Median over PLAIN_ROUNDS of the plain fp32 loop's block time over the autocast loop's, the order
    alternating. Without `good_practice` the autocast side is the naive loop; fp32 is the same either way."""
    fp32 = _PlainLoop(spec, device, smoke, None, good_practice=True)
    amp = _PlainLoop(spec, device, smoke, mode.autocast_dtype, good_practice)
    for _ in range(PLAIN_WARMUP):
        fp32.step()
        amp.step()
    sync(device)
    ratios = []
    for r in range(PLAIN_ROUNDS):
        if r % 2 == 0:
            t_fp32 = fp32.block()
            t_amp = amp.block()
        else:
            t_amp = amp.block()
            t_fp32 = fp32.block()
        ratios.append(t_fp32 / t_amp)
    del fp32, amp  # both models freed before the next cell
    release(device)
    return statistics.median(ratios)


def harness_speedup(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool) -> SpeedupEstimate:
    """The wall-clock speedup as ``test_speed`` measures it, through the same calls with the default
    options: both sides built and warmed up by ``sides.prepare_side``, interleaved blocks, rounds until
    the interval is tight."""
    policy = sides.policy_for(device, sides.DEFAULT_MIN_ROUNDS, DEFAULT_TOLERANCE)
    fp32 = sides.prepare_side(spec, get_mode(FP32_MODE), device, smoke, policy)
    side = sides.prepare_side(spec, mode, device, smoke, policy)
    estimate = extend_until_tight(fresh_timer(fp32, side, policy), policy.rounds)
    del fp32, side
    release(device)
    return estimate


def fidelity_rows(cells: list[tuple[str, str]], device: torch.device, smoke: bool,
          repeats: int = DEFAULT_REPEATS) -> Iterator[FidelityRow]:
    """One row per cell, as each is measured: the harness and the plain loop alternately, `repeats` times."""
    for model, mode_name in cells:
        spec, mode = get_model(model), get_mode(mode_name)
        harness, plain = [], []
        for _ in range(repeats):
            harness.append(harness_speedup(spec, mode, device, smoke))
            plain.append(plain_speedup(spec, mode, device, smoke))
        yield FidelityRow(model, mode_name, tuple(harness), tuple(plain))


def practice_gap(model: str, mode_name: str, device: torch.device, smoke: bool) -> tuple[float, float]:
    """(good practice's speedup, the naive loop's), both over the same plain fp32 loop."""
    spec, mode = get_model(model), get_mode(mode_name)
    return (plain_speedup(spec, mode, device, smoke),
            plain_speedup(spec, mode, device, smoke, good_practice=False))


def format_row(row: FidelityRow) -> str:
    each = ", ".join(f"{e.speedup:.3f}" for e in row.harness)
    intervals = ", ".join(f"[{e.low:.3f}, {e.high:.3f}]" for e in row.harness)
    plain = ", ".join(f"{p:.3f}" for p in row.plain)
    return (f"fidelity {row.model:9s} {row.mode:9s} harness {row.harness_speedup:.3f}x ({each}; intervals "
            f"{intervals}) plain {row.plain_speedup:.3f}x ({plain}) difference {row.difference:+.2%}")


def command(args: argparse.Namespace) -> int:
    try:
        cells = [parse_cell(c) for c in args.cells] or list(DEFAULT_CELLS)
        device = resolve(args.device, flag="--device")
    except (FidelityError, RuntimeError) as exc:
        print(f"ampbench fidelity: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    smoke = device.type != "cuda"
    if smoke and not args.force:  # minutes of measuring for figures that say nothing: only when asked
        print(f"ampbench fidelity: no CUDA device ({device}): on it the models run their smoke shapes, whose "
              "figures say nothing about the harness on a GPU; nothing measured. --force runs the check here all "
              "the same (minutes), to see that it works")
        return EXIT_OK
    configure_backends(device, cudnn_benchmark=args.cudnn_benchmark)
    if smoke:
        print(f"ampbench fidelity: no CUDA device ({device}): smoke shapes, the figures say nothing about a GPU "
              "and no difference fails the check")
    worst = 0.0
    for row in fidelity_rows(cells, device, smoke, args.repeats):
        print(format_row(row), flush=True)
        worst = max(worst, abs(row.difference))
    goal = "not checked on a smoke run" if smoke else f"target: within {args.target:.0%}"
    print(f"fidelity worst |difference| {worst:.2%} ({goal})", flush=True)
    for model, mode in cells if args.naive else ():
        good, naive = practice_gap(model, mode, device, smoke)
        print(f"practice {model:9s} {mode:9s} good practice {good:.3f}x, naive loop {naive:.3f}x: good practice "
              f"is worth {good / naive - 1:+.1%} (both against the same plain fp32 loop)", flush=True)
    # a smoke run only shows the check works: a difference of tiny shapes on a CPU is no finding
    return EXIT_REGRESSION if worst > args.target and not smoke else EXIT_OK
