"""What cuDNN's autotuning (``torch.backends.cudnn.benchmark``) costs and buys per mode: for each
model and mode, a trainer under cuDNN's heuristics and one under autotuning, the seconds the tuned
one's first steps take, then interleaved blocks of both, reported as step times and their ratio.

    python3 -m scripts.diag_cudnn resnet50:fp32,tf32,amp_fp16,amp_bf16 wide_resnet28_10:amp_bf16
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from ampbench.modes import get_mode
from ampbench.timing import time_block
from ampbench.train import Trainer
from models import get_model


def compare(model: str, mode_name: str, blocks: int = 6, block_steps: int = 4) -> None:
    spec, mode, dev = get_model(model), get_mode(mode_name), torch.device("cuda", torch.cuda.current_device())
    torch.backends.cudnn.benchmark = False
    heur = Trainer(spec, mode, dev)
    heur.run(3)
    torch.cuda.synchronize()
    torch.backends.cudnn.benchmark = True
    tuned = Trainer(spec, mode, dev)
    t0 = time.perf_counter()
    tuned.run(3)
    torch.cuda.synchronize()
    tune_s = time.perf_counter() - t0
    times = {"heuristics": [], "tuned": []}
    for r in range(blocks):
        order = [("heuristics", heur, False), ("tuned", tuned, True)]
        for name, trainer, flag in (order if r % 2 == 0 else order[::-1]):
            torch.backends.cudnn.benchmark = flag
            times[name].append(time_block(dev, lambda: trainer.run(block_steps)) / block_steps * 1e3)
    h, t = statistics.median(times["heuristics"]), statistics.median(times["tuned"])
    print(f"cudnn {model:18s} {mode_name:9s} first 3 tuned steps {tune_s:6.1f}s | step heuristics {h:7.2f}ms "
          f"tuned {t:7.2f}ms | tuned/heuristics {t / h:.3f}", flush=True)
    del heur, tuned
    torch.cuda.empty_cache()


def main(argv: list[str]) -> int:
    for arg in argv:
        model, modes = arg.split(":")
        for m in modes.split(","):
            compare(model, m)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
