"""Held blocks against the alternatives, on a quiet host and a busy one (GPU only).

For each model and mode given, one warmed-up trainer's step is captured as a CUDA graph and timed in
blocks of replays three ways, interleaved: plain (events around the block, launched as it comes), held
(``ampbench.speed.held``: queued whole behind a spin kernel) and per-replay (events around each replay,
summed). Then the same with 2 x CPU-count busy-loop processes. Prints, per way, the mean ms per step,
the spread between blocks and the worst block against the quiet held median, and one profiled held
block's idle time. Usage: python dev/held_check.py [model:mode ...] [--blocks N]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from ampbench import models  # noqa: E402
from ampbench.modes import get_mode  # noqa: E402
from ampbench.speed.devicetime import block_idle, capture  # noqa: E402
from ampbench.speed.held import BlockQueue  # noqa: E402
from ampbench.speed.timing import steps_per_block, time_block, warm_up  # noqa: E402
from ampbench.train import Trainer  # noqa: E402


def busy_loop() -> None:
    while True:
        pass


def measure(graph, steps: int, blocks: int) -> dict[str, list[float]]:
    device = graph.trainer.device
    queue = BlockQueue(device)
    ways = {
        "plain": lambda: time_block(device, lambda: graph.replay(steps)) / steps,
        "held": lambda: queue.replays(lambda: graph.replay(steps), lambda: graph.replay_each_timed(steps)) / steps,
        "per-replay": lambda: graph.replay_each_timed(steps) / steps,
    }
    out: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(blocks):
        for name, way in ways.items():
            out[name].append(way() * 1e3)
    out["_queue"] = queue.stats.describe()  # type: ignore[assignment]
    return out


def row(label: str, ms: list[float], ref: float) -> str:
    mean, sd = statistics.fmean(ms), statistics.stdev(ms)
    return (f"  {label:<16} mean {mean:8.4f} ms  sd {sd / mean:6.3%}  worst {max(ms) / ref - 1:+7.3%}  "
            f"median {statistics.median(ms) / ref - 1:+7.3%}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cells", nargs="*", default=["mlp:amp_bf16", "gpt:amp_bf16", "lstm_lm:amp_fp16"])
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda")
    for cell in args.cells:
        model, mode = cell.split(":")
        trainer = Trainer(models.get_model(model), get_mode(mode), device, smoke=False)
        step_s = warm_up(trainer, min_steps=5, min_seconds=0.3)
        graph = capture(trainer)
        steps = steps_per_block(step_s, 0.1)
        quiet = measure(graph, steps, args.blocks)
        quiet_idle = block_idle(graph, steps, BlockQueue(device))
        procs = [mp.Process(target=busy_loop, daemon=True) for _ in range(2 * (os.cpu_count() or 1))]
        for p in procs:
            p.start()
        try:
            busy = measure(graph, steps, args.blocks)
            busy_idle = block_idle(graph, steps, BlockQueue(device))
        finally:
            for p in procs:
                p.terminate()
        ref = statistics.median(quiet["held"])
        print(f"{model} {mode}: {steps} steps per block, {args.blocks} blocks per way; against the quiet held median")
        for host, res, idle in (("quiet", quiet, quiet_idle), ("busy", busy, busy_idle)):
            for way in ("plain", "held", "per-replay"):
                print(row(f"{host} {way}", res[way], ref))
            print(f"  {host} queue: {res['_queue']}")
            print(f"  {host} profiled held block: idle {idle.share:.4%} ({idle.idle_ms:.3f} of {idle.span_ms:.1f} ms), "
                  f"longest gap {idle.longest_gap_us:.1f} us, queued whole {idle.queued}")
        del graph, trainer
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
