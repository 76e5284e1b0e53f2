#!/usr/bin/env python3
"""What the run history makes of steps, noise, stray runs and card changes, simulated with the suite's own
code (``tests/history_simulation.py``) on the noise of the committed H100 file's quick speed cells:

    python dev/bench_history.py                    # the tables of docs/results/history.md (~20 min on one core)
    python dev/bench_history.py --series 100       # a quicker look
    python dev/bench_history.py --ablate           # holding back after detected changes, the robust floor: each off

Per step size (1x, 1.5x, 2x, 3x the tolerance the first moved run is held to), `--series` series of 4-8
clean runs and 10 moved runs, each cell of the file in turn, from an empty history and with the file's
spread of the cell (20 runs) pooled in: the moved runs that pass and that count, when `history changes`
reports the step at its first moved run, and how much wider the tolerance ends than that of the clean
runs alone. Then pure noise with card changes (20 runs a series, 4 cards), with and without stray runs:
failing runs per 1,000 and false changes per 1,000 series. Prints markdown tables; seeded, so a rerun
prints the same.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ampbench.verdict import Verdict  # noqa: E402
from tests.history_simulation import Scenario, noise_of, simulate, widening  # noqa: E402

STEPS = (1.0, 1.5, 2.0, 3.0)
PASSING = (Verdict.PASS, Verdict.IMPROVED)


def steps_table(cells, series: int, base: Scenario, seed0: int) -> list[str]:
    lines = ["| step (x tolerance) | moved runs that pass | that count | found at its run by the 1st moved run | "
             "by the 2nd | by the 10th | tolerance wider after, mean / 99th pct / max (pp) |",
             "|---|---|---|---|---|---|---|"]
    for step in STEPS:
        passed = counted = runs = 0
        found, wider = [], []
        for k in range(series):
            seed = seed0 + 10_000 * int(step * 2) + k
            scenario = replace(base, clean=4 + k % 5, moved=10, step=step)
            out, w = widening(cells[k % len(cells)], scenario, seed)
            moved = out.verdicts[scenario.clean:]
            passed += sum(v in PASSING for v in moved)
            counted += sum(out.counted[scenario.clean:])
            runs += len(moved)
            found.append(out.found_after or 99)
            wider.append(100 * w)
        share = lambda n: f"{sum(f <= n for f in found) / series:.3f}"  # noqa: E731
        lines.append(f"| {step:g} | {passed}/{runs} ({passed / runs:.1%}) | {counted} | {share(1)} | {share(2)} | "
                     f"{share(10)} | {np.mean(wider):.3f} / {np.percentile(wider, 99):.3f} / {max(wider):.3f} |")
    return lines


def noise_table(cells, series: int, base: Scenario, seed0: int) -> list[str]:
    lines = ["| pure noise, 20 runs a series, 4 cards | failing runs per 1,000 | false changes per 1,000 series |",
             "|---|---|---|"]
    for label, stray in (("no stray runs", 0.0), ("3% stray runs, 4-8 sd off", 0.03)):
        fails = runs = changes = 0
        for k in range(series):
            out = simulate(cells[k % len(cells)], replace(base, clean=20, moved=0, stray=stray), seed0 + k)
            fails += sum(v.failing for v in out.verdicts)
            runs += len(out.verdicts)
            changes += out.changes
        lines.append(f"| {label} | {1000 * fails / runs:.2f} ({fails} of {runs}) | "
                     f"{1000 * changes / series:.2f} ({changes} of {series}) |")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--series", type=int, default=500, metavar="N", help="series per step size (default: 500)")
    p.add_argument("--noise-series", type=int, default=1000, metavar="N", help="pure-noise series (default: 1000)")
    p.add_argument("--file", type=Path, default=ROOT / "baselines" / "nvidia-h100-80gb-hbm3.json", metavar="JSON",
                   help="the baseline file whose cells' noise is simulated (default: the committed H100 file)")
    p.add_argument("--card-share", type=float, default=0.5, metavar="F",
                   help="the share of a cell's between-run variance that lies between cards (default: 0.5)")
    p.add_argument("--ablate", action="store_true", help="also each of settle and the robust floor off")
    args = p.parse_args()
    cells = noise_of(json.loads(args.file.read_text())["entries"], args.card_share)
    t0 = time.perf_counter()
    variants = [("as the suite runs", Scenario(0, 0))]
    if args.ablate:
        variants += [("no holding back after a detected change", Scenario(0, 0, settle=False)),
                     ("no robust floor", Scenario(0, 0, robust=False))]
    for label, base in variants:
        for history, prior in (("an empty history", 0), ("the file's spread (20 runs) pooled in", 20)):
            print(f"\n### {label}: steps, from {history}\n")
            print("\n".join(steps_table(cells, args.series, replace(base, prior_runs=prior), 1)))
        print(f"\n### {label}: noise, from an empty history\n")
        print("\n".join(noise_table(cells, args.noise_series, base, 500_000)))
    print(f"\n{len(cells)} cells of {args.file.name}, card share {args.card_share}; {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
