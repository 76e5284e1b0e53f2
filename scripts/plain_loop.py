"""Fidelity check: the speedups a plain, hand-written training loop measures (the seeds' code, with
the same good practice: channels_last, fused optimizer) for resnet50 and gpt, against the harness's.

    python3 -m scripts.plain_loop [HARNESS.json ...]

With harness JSONs (any runs that hold the cells), prints both speedups per cell and their
difference; the target is within 3%.
"""

from __future__ import annotations

import json
import statistics
import sys

import torch

from models import get_model

CELLS = [("resnet50", "amp_bf16"), ("resnet50", "amp_fp16"), ("gpt", "amp_bf16"), ("gpt", "amp_fp16")]


def plain_speedup(model_name: str, amp_dtype: torch.dtype, rounds: int = 12, steps: int = 10) -> float:
    spec = get_model(model_name)
    cfg = spec.config
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if spec.channels_last else torch.contiguous_format

    def setup():
        torch.manual_seed(0)
        model = spec.build(cfg).to(dev, memory_format=fmt)
        if spec.optimizer == "sgd":
            opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9, weight_decay=5e-4, fused=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
        x, y = spec.make_batch(cfg, spec.batch_size, dev, torch.Generator(device=dev).manual_seed(0))
        if x.dim() == 4:
            x = x.contiguous(memory_format=fmt)
        return model, opt, x, y

    fp32 = setup()
    amp = setup()
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


def main(argv: list[str]) -> int:
    harness = {}
    for path in argv:
        with open(path) as f:
            harness.update({b["name"]: b["extra_info"] for b in json.load(f)["benchmarks"] if "speedup" in b.get("extra_info", {})})
    worst = 0.0
    for model, mode in CELLS:
        plain = plain_speedup(model, torch.bfloat16 if mode == "amp_bf16" else torch.float16)
        h = harness.get(f"test_speed[{model}-{mode}]")
        if h:
            diff = h["speedup"] / plain - 1
            worst = max(worst, abs(diff))
            print(f"fidelity {model:9s} {mode:9s} plain {plain:.3f}x harness {h['speedup']:.3f}x "
                  f"[{h['speedup_low']:.3f}, {h['speedup_high']:.3f}] diff {diff:+.2%}")
        else:
            print(f"fidelity {model:9s} {mode:9s} plain {plain:.3f}x (no harness figure)")
    if harness:
        print(f"fidelity worst |difference| {worst:.2%} (target: within 3%)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
