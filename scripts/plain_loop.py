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

from ampbench.modes import get_mode
from models import get_model

CELLS = [("resnet50", "amp_bf16"), ("resnet50", "amp_fp16"), ("gpt", "amp_bf16"), ("gpt", "amp_fp16")]
GAP_CELLS = [("resnet50", "amp_bf16")]


def plain_speedup(model_name: str, amp_dtype: torch.dtype, rounds: int = 10, steps: int = 6,
                  good_practice: bool = True) -> float:
    """Median over `rounds` of fp32's time over the AMP loop's, each timed for `steps` steps in
    alternating order. Without `good_practice` the AMP side is the seeds' code: contiguous tensors and
    the optimizer's default implementation; the fp32 side is the harness's reference either way."""
    spec = get_model(model_name)
    cfg = spec.config
    dev = torch.device("cuda")
    torch.backends.cudnn.benchmark = True
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


def harness_speedups(paths: list[str]) -> dict[str, dict]:
    """test id -> {speedup, low, high, source} from benchmark JSONs and baseline files; a baseline
    file (the recording run) wins whatever the order, since a benchmark JSON may be a run with an
    injected slowdown."""
    found: dict[str, dict] = {}
    for path in paths:
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError) as exc:  # a run cut off at its time limit leaves an empty file
            print(f"fidelity: skipping {path}: {exc}", file=sys.stderr)
            continue
        if "entries" in data:  # a baseline file
            for test_id, entry in data["entries"].items():
                fig = entry.get("figures", {})
                if "speedup" in fig:
                    found[test_id] = dict(speedup=fig["speedup"], low=fig.get("ci_low"), high=fig.get("ci_high"), source=path)
        else:
            for b in data.get("benchmarks", []):
                e = b.get("extra_info", {})
                if "speedup" in e and b["name"] not in found:
                    found[b["name"]] = dict(speedup=e["speedup"], low=e["speedup_low"], high=e["speedup_high"], source=path)
    return found


def main(argv: list[str]) -> int:
    harness = harness_speedups(argv)
    worst = 0.0
    plain_of: dict[tuple[str, str], float] = {}
    for model, mode in CELLS:
        plain = plain_of[model, mode] = plain_speedup(model, get_mode(mode).autocast_dtype)
        h = harness.get(f"test_speed[{model}-{mode}]")
        if h:
            diff = h["speedup"] / plain - 1
            worst = max(worst, abs(diff))
            print(f"fidelity {model:9s} {mode:9s} plain {plain:.3f}x harness {h['speedup']:.3f}x "
                  f"[{h['low']:.3f}, {h['high']:.3f}] diff {diff:+.2%} ({h['source']})", flush=True)
        else:
            print(f"fidelity {model:9s} {mode:9s} plain {plain:.3f}x (no harness figure)", flush=True)
    if harness:
        print(f"fidelity worst |difference| {worst:.2%} (target: within 3%)", flush=True)
    # good practice against the seeds' plain code: the same loop without channels_last and with the
    # optimizer's default (foreach) implementation instead of the fused one
    for model, mode in GAP_CELLS:
        dtype = get_mode(mode).autocast_dtype
        good = plain_of.get((model, mode)) or plain_speedup(model, dtype)  # measured above for the CELLS
        seeds = plain_speedup(model, dtype, good_practice=False)
        print(f"practice {model:9s} {mode:9s} good practice {good:.3f}x, seeds' plain code {seeds:.3f}x: "
              f"good practice is {good / seeds - 1:+.1%} (both against the same plain fp32 loop)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
