"""What cuDNN's autotuning (``torch.backends.cudnn.benchmark``) costs and buys per model and mode.

    python3 -m scripts.diag_cudnn off resnet50:fp32,amp_bf16 wide_resnet28_10:amp_bf16
    python3 -m scripts.diag_cudnn on  resnet50:fp32,amp_bf16 wide_resnet28_10:amp_bf16

One setting per process: PyTorch caches cuDNN's execution plans by shape, dtype and layout, not by how
they were chosen, so in one process whichever setting runs first decides the plans of both (the first
version of this script compared heuristics with heuristics that way). Prints, per cell, the seconds of
the first 3 steps (autotuning happens there) and the median step time of 6 blocks of 4 steps after;
compare the two processes' lines.
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


def measure(model: str, mode_name: str, blocks: int = 6, block_steps: int = 4) -> tuple[float, float]:
    """(seconds of the first 3 steps, median ms per step after them)."""
    spec, mode, dev = get_model(model), get_mode(mode_name), torch.device("cuda", torch.cuda.current_device())
    trainer = Trainer(spec, mode, dev)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    trainer.run(3)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    trainer.run(5)
    times = [time_block(dev, lambda: trainer.run(block_steps)) / block_steps * 1e3 for _ in range(blocks)]
    trainer = None  # noqa: F841 - the last reference, dropped before the cache is emptied
    torch.cuda.empty_cache()
    return first, statistics.median(times)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("on", "off"):
        print(__doc__, file=sys.stderr)
        return 2
    torch.backends.cudnn.benchmark = argv[0] == "on"
    for arg in argv[1:]:
        model, modes = arg.split(":")
        for m in modes.split(","):
            first, step_ms = measure(model, m)
            print(f"cudnn benchmark={argv[0]:3s} {model:18s} {m:9s} first 3 steps {first:6.2f}s  step {step_ms:7.2f}ms",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
