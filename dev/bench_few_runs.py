#!/usr/bin/env python3
"""False failures of tolerances learned from a few runs, under the learned-tolerance caps
(ampbench.tolerance: the t quantile at most FEW_RUNS_QUANTILE, the tolerance at most the unlearned one),
simulated on the run-to-run noise of the H200's quick speed cells (tests/test_history_pooling.py SIGMA),
scaled by a noise level:

    python dev/bench_few_runs.py            # the table of docs/design.md, "Few runs"

For n runs of a cell on one card, its sample sd is drawn from its true noise; the tolerance is
max(floor, min(min(t, K) x sd x sqrt(1 + 1/n), 3%)), and a new unchanged run lies below its line with
the normal's chance (its own interval ignored: the gate's real rate is lower). Seeded.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_history_pooling import SIGMA  # noqa: E402

FLOOR, CEILING, DRAWS = 0.005, 0.03, 4000


def fails(runs: int, level: float, quantile: float, rng: np.random.Generator) -> float:
    """Unchanged runs failing per 1,000 cells."""
    sigma = np.tile(SIGMA * level, DRAWS)
    d, k = runs - 1, math.sqrt(1 + 1 / runs)
    sd = sigma * np.sqrt(rng.chisquare(d, size=sigma.size) / d)
    q = min(float(student.ppf(0.999, d)), quantile)
    tol = np.maximum(FLOOR, np.minimum(q * sd * k, CEILING))
    return 1000 * float(np.mean(norm.cdf(np.log(1 - tol) / (sigma * k))))


def main() -> None:
    rng = np.random.default_rng(2026)
    caps = (5.0, 6.0, 8.0, 10.0, math.inf)
    print("| noise (x H200) | runs | " + " | ".join(f"K={k:g}" for k in caps) + " |")
    print("|---|---|" + "---|" * len(caps))
    for level in (1.0, 2.0, 3.0, 10.0):
        for runs in (3, 4, 5, 8, 12):
            print(f"| {level:g} | {runs} | " + " | ".join(f"{fails(runs, level, k, rng):.2f}" for k in caps) + " |")


if __name__ == "__main__":
    main()
