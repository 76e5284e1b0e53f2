"""Fidelity check: the speedups a plain, hand-written training loop measures (the seeds' code, with
the same good practice: channels_last, fused optimizer) for resnet50 and gpt, against the harness's.

    python3 -m scripts.plain_loop [--cudnn-benchmark] [MODEL:MODE ...]    # default: the four CELLS

For each cell, in one process and alternating, the harness's measurement (the calls ``test_speed``
makes) and the plain loop's, REPEATS times each; prints the median of each and their difference
(target: within 3%). Comparing against a recording made in another process, even on the same
machine, mixes the harness's cost with run-to-run drift, which for AMP cells reached 10-20%.
"""

from __future__ import annotations

import statistics
import sys

import torch

from ampbench import speed
from ampbench.device import configure_backends, release
from ampbench.modes import REFERENCE_MODE, get_mode
from ampbench.stats import SpeedupEstimate
from ampbench.timing import extend_until_tight
from ampbench.verdict import DEFAULT_TOLERANCE
from models import get_model

CELLS = [("resnet50", "amp_bf16"), ("resnet50", "amp_fp16"), ("gpt", "amp_bf16"), ("gpt", "amp_fp16")]
GAP_CELLS = [("resnet50", "amp_bf16")]
REPEATS = 2


def plain_speedup(model_name: str, amp_dtype: torch.dtype, rounds: int = 10, steps: int = 6,
                  good_practice: bool = True) -> float:
    """Median over `rounds` of fp32's time over the AMP loop's, each timed for `steps` steps in
    alternating order. Without `good_practice` the AMP side is the seeds' code: contiguous tensors and
    the optimizer's default implementation; the fp32 side is the harness's reference either way."""
    spec = get_model(model_name)
    cfg = spec.config
    dev = torch.device("cuda")
    good_fmt = torch.channels_last if spec.channels_last else torch.contiguous_format

    def setup(fmt=good_fmt, fused=True):
        torch.manual_seed(0)
        model = spec.build(cfg).to(dev, memory_format=fmt)
        if spec.optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9, weight_decay=5e-4, fused=fused or None)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=fused or None)
        x, y = spec.make_batch(cfg, spec.batch_size, dev, torch.Generator(device=dev).manual_seed(0))
        if x.dim() == 4:
            x = x.contiguous(memory_format=fmt)
        return model, opt, x, y

    fp32 = setup()
    amp = setup() if good_practice else setup(torch.contiguous_format, fused=False)
    scaler = torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)

    def step_fp32():
        model, opt, x, y = fp32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        out = model(x)
        loss = spec.loss(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def step_amp():
        model, opt, x, y = amp
        with torch.autocast("cuda", dtype=amp_dtype):
            out = model(x)
            loss = spec.loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def timed(fn):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    for _ in range(10):
        step_fp32()
        step_amp()
    torch.cuda.synchronize()
    ratios = []
    for r in range(rounds):
        if r % 2 == 0:
            a = timed(step_fp32)
            b = timed(step_amp)
        else:
            b = timed(step_amp)
            a = timed(step_fp32)
        ratios.append(a / b)
    fp32 = amp = None  # free both models before the next cell
    torch.cuda.empty_cache()
    return statistics.median(ratios)


def harness_speedup(model_name: str, mode_name: str) -> SpeedupEstimate:
    """The speedup as ``test_speed`` measures it, through the same calls with the default options:
    both sides built and warmed up by ``speed.prepare_side``, interleaved blocks of about 0.1 s,
    rounds until the interval is tight."""
    spec, dev = get_model(model_name), torch.device("cuda", torch.cuda.current_device())
    policy = speed.policy_for(dev, speed.DEFAULT_MIN_ROUNDS, DEFAULT_TOLERANCE)
    reference = speed.prepare_side(spec, get_mode(REFERENCE_MODE), dev, False, policy)
    side = speed.prepare_side(spec, get_mode(mode_name), dev, False, policy)
    est = extend_until_tight(speed.fresh_timer(reference, side, policy), policy.rounds)
    reference = side = None
    release(dev)
    return est


def main(argv: list[str]) -> int:
    autotune = "--cudnn-benchmark" in argv
    args = [a for a in argv if a != "--cudnn-benchmark"]
    try:
        cells = [tuple(a.split(":")) for a in args] or CELLS
        for model, mode in cells:
            get_model(model), get_mode(mode)
    except (ValueError, KeyError) as exc:
        print(f"plain_loop: {exc}; expected MODEL:MODE arguments\n{__doc__}", file=sys.stderr)
        return 2
    # the harness's default is cuDNN's heuristics; --cudnn-benchmark compares under autotuning
    configure_backends(torch.device("cuda"), cudnn_benchmark=autotune)
    worst = 0.0
    plain_of: dict[tuple[str, str], float] = {}
    for model, mode in cells:
        dtype = get_mode(mode).autocast_dtype
        # alternated in one process, so drift between them falls on both and each is measured twice
        harness, plain = [], []
        for _ in range(REPEATS):
            harness.append(harness_speedup(model, mode))
            plain.append(plain_speedup(model, dtype))
        h, p = statistics.median(e.speedup for e in harness), statistics.median(plain)
        plain_of[model, mode] = p
        diff = h / p - 1
        worst = max(worst, abs(diff))
        print(f"fidelity {model:9s} {mode:9s} harness {h:.3f}x ({', '.join(f'{e.speedup:.3f}' for e in harness)}; "
              f"intervals {', '.join(f'[{e.low:.3f}, {e.high:.3f}]' for e in harness)}) plain {p:.3f}x "
              f"({', '.join(f'{x:.3f}' for x in plain)}) diff {diff:+.2%}", flush=True)
    print(f"fidelity worst |difference| {worst:.2%} (target: within 3%)", flush=True)
    # good practice against the seeds' plain code: the same loop without channels_last and with the
    # optimizer's default (foreach) implementation instead of the fused one
    for model, mode in GAP_CELLS if not args else ():  # the gap only in a full check
        dtype = get_mode(mode).autocast_dtype
        good = plain_of.get((model, mode)) or plain_speedup(model, dtype)  # measured above for the CELLS
        seeds = plain_speedup(model, dtype, good_practice=False)
        print(f"practice {model:9s} {mode:9s} good practice {good:.3f}x, seeds' plain code {seeds:.3f}x: "
              f"good practice is {good / seeds - 1:+.1%} (both against the same plain fp32 loop)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
