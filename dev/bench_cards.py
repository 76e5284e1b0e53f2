"""The error rates of card admission (``ampbench.history.cards.standing``), simulated on fleets of one GPU
model: how often a card like the others is named an outlier card, and how often a card 8% slow, or 1.5x
slow, is named one.

Each simulated card's ln(fp32 ms per step) is the model's level, plus its own offset (sd `between`, the
spread of a model's cards: 0.3% and 1%, cards that agree closely; 3%, wider than SPREAD_FLOOR allows for),
plus each run's error (sd 0.3%, an assumed run-to-run noise of the fp32 device time, to measure on a GPU).
The card under test has `runs` runs; each other card has 1 to 5. Where `file` is on, a baseline file's
figure (one more card's single run) joins the others. The last column puts a second 1.5x card among the
others: it must not hide an 8% slow one.

    python dev/bench_cards.py               # the table of docs/design.md, "Card admission" (~2 min)
    python dev/bench_cards.py --fleets 2000 # quicker, coarser
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampbench.history.cards import standing  # noqa: E402

RUN_SD = 0.003  # a card's fp32 device time from run to run
SLOW = {"like the others": 0.0, "8% slow": math.log(1.08), "1.5x slow": math.log(1.5)}


def flagged(rng: np.random.Generator, others: int, between: float, runs: int, slow: float, file: bool,
            masked: bool = False) -> bool:
    """One fleet: whether the card under test (offset `slow`) is named an outlier card; `masked`: one of
    the other cards is 1.5x slow too."""
    offsets = rng.normal(0.0, between, others + 1)
    if masked and others:
        offsets[1] += SLOW["1.5x slow"]
    card = [math.exp(offsets[0] + slow + e) for e in rng.normal(0.0, RUN_SD, runs)]
    levels = []
    for offset in offsets[1:]:
        levels.append(float(np.median(np.exp(offset + rng.normal(0.0, RUN_SD, rng.integers(1, 6))))))
    if file:
        levels.append(math.exp(rng.normal(0.0, between) + rng.normal(0.0, RUN_SD)))
    found = standing(card, levels)
    assert found is not None
    return found.outlier


def rates(fleets: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    rows = []
    for between in (0.003, 0.01, 0.03):
        for others, file in ((0, True), (2, False), (2, True), (5, True), (15, True)):
            for runs in (1, 3):
                row = [between, others, file, runs]
                for slow in SLOW.values():
                    row.append(sum(flagged(rng, others, between, runs, slow, file) for _ in range(fleets)) / fleets)
                row.append(sum(flagged(rng, others, between, runs, SLOW["8% slow"], file, masked=True)
                               for _ in range(fleets)) / fleets if others else math.nan)
                rows.append(tuple(row))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fleets", type=int, default=5000, help="simulated fleets per row (default 5000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"| between-card sd | other cards | file | card's runs | {' | '.join(f'named: {k}' for k in SLOW)} "
          "| named: 8% slow, a 1.5x card among the others |")
    print("|---|---|---|---|" + "---|" * (len(SLOW) + 1))
    for between, others, file, runs, *named in rates(args.fleets, args.seed):
        print(f"| {between:.1%} | {others} | {'yes' if file else 'no'} | {runs} | "
              + " | ".join("-" if math.isnan(r) else f"{r:.2%}" for r in named) + " |")


if __name__ == "__main__":
    main()
