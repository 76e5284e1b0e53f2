#!/usr/bin/env python3
"""Tolerances and false failures of the noise pooled across a GPU model's cells (ampbench.history.pooling),
simulated on the run-to-run noise of the H200's quick speed cells (tests/test_history_pooling.py H200_SD),
scaled by a noise level and repeated to a number of cells, against each cell standing on its own runs:

    python dev/bench_pooling.py            # the table of docs/results/history.md, "Noise pooled across cells"

For n runs a cell, each cell's sample variance is drawn from its true noise; the tolerance is the
verdict's (t at 99.8% two-sided on the degrees of freedom, the 0.5% floor), and a new unchanged run
lies below its line with the normal's chance. Seeded, so a rerun prints the same.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ampbench.history.pooling import fit_prior  # noqa: E402
from ampbench.stats import t_quantile  # noqa: E402
from tests.test_history_pooling import H200_SD  # noqa: E402

FLOOR, SHARE, DRAWS = 0.005, 0.001, 300


def simulate(runs: int, level: float, copies: int,
             pooled: bool, rng: np.random.Generator) -> tuple[float, float, float]:
    """(false failures per 1,000 cell-runs, median tolerance of the quiet models' cells, of lstm_lm's)."""
    sigma = np.tile(np.array([v for m in H200_SD for v in H200_SD[m]]) * level / 100, copies)
    groups = [f"{m}{k}" for k in range(copies) for m in H200_SD for _ in range(5)]
    noisy = np.array([g.startswith("lstm_lm") for g in groups])
    cells = [f"c{i}" for i in range(len(sigma))]
    d, k = runs - 1, math.sqrt(1 + 1 / runs)
    fails, tols = [], []
    for _ in range(DRAWS):
        s2 = sigma ** 2 * rng.chisquare(d, size=len(sigma)) / d
        sd, dof = np.sqrt(s2), np.full(len(sigma), float(d))
        prior = fit_prior({c: (v, d) for c, v in zip(cells, s2)}, dict(zip(cells, groups))) if pooled else None
        if prior is not None:
            sd = np.array([prior.posterior_sd(c, s, d) for c, s in zip(cells, sd)])
            dof = dof + prior.dof
        tol = np.maximum(FLOOR, [t_quantile(SHARE, f) * s * k for s, f in zip(sd, dof)])
        fails.append(norm.cdf(np.log(1 - np.minimum(tol, 0.99)) / (sigma * k)))
        tols.append(tol)
    t = np.array(tols)
    return 1000 * float(np.mean(fails)), float(np.median(t[:, ~noisy])), float(np.median(t[:, noisy]))


def main() -> None:
    rng = np.random.default_rng(2026)
    print("| noise (x H200) | cells | runs | own: fails per 1,000 / tolerance quiet / lstm_lm | "
          "pooled: fails per 1,000 / tolerance quiet / lstm_lm |")
    print("|---|---|---|---|---|")
    for level in (1.0, 3.0):
        for copies in (1, 2):
            for runs in (3, 4, 5, 10):
                own = simulate(runs, level, copies, False, rng)
                pooled = simulate(runs, level, copies, True, rng)
                cell = lambda r: f"{r[0]:.2f} / {100 * r[1]:.2f}% / {100 * r[2]:.2f}%"  # noqa: E731
                print(f"| {level:g} | {25 * copies} | {runs} | {cell(own)} | {cell(pooled)} |")


if __name__ == "__main__":
    main()
