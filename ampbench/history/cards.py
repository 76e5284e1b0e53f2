"""Card admission: whether a card's absolute fp32 device time per step lies beyond the spread of its GPU
model's cards. The speedups cancel most of what tells one card of a model from another; the fp32 side's
own step time does not, so it is what names a slow card (docs/design.md, "Card admission").

The rule (``standing``), per speed cell, on y = ln(fp32 device ms per step):

- the card's level is the median of its runs' y (this run's among them): one throttled run does not move it;
- the model's level is the median of the other cards' levels, a baseline file's recorded fp32 step counted
  as one card more: the card is held against the others, never against itself, and one outlier among
  them does not move the level;
- the spread is the others' robust sd (``stats.robust_sd``: the median absolute deviation scaled to a
  normal's sd, the statistic the gate's rounds and the history's replay floor their noise with), once
  MIN_SPREAD_CARDS cards give it, and never below SPREAD_FLOOR;
- the card is an outlier card where its level lies more than OUTLIER_Z spreads from the model's.

Only runs on the same software (``STACK``: torch, CUDA, cuDNN) and timed by the same device-time method
are compared: an upgrade moves every card's absolute time, which no card should answer for. Admission
informs: it names the card, it fails nothing. Nothing here imports torch; SQLAlchemy only where a
store is read (``fleet_times``).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Hashable, Iterable, Mapping, Sequence

from ampbench.results import FP32_SIDE, SpeedRecord
from ampbench.results.ratios import DEVICE
from ampbench.stats import median, robust_sd

if TYPE_CHECKING:  # SQLAlchemy only where a store is read
    from ampbench.history.store import History

# how many spreads from its model's level a card's fp32 step lies before it is named (dev/bench_cards.py)
OUTLIER_Z = 3.5
# the least spread (sd of ln) a card is measured in: other cards that by chance agree within 0.1% must not
# make a card 2% off an outlier, and a model's level from a baseline file alone comes with no spread
SPREAD_FLOOR = 0.015
# the fewest other cards whose robust sd is taken for the spread: fewer leave SPREAD_FLOOR alone
MIN_SPREAD_CARDS = 4
# the software whose runs a card is compared across: what moves an absolute step time on every card
STACK = ("torch", "cuda", "cudnn")


def stack_of(software: Mapping | None) -> tuple:
    """The run's software that its absolute times depend on (``STACK``)."""
    return tuple(str((software or {}).get(k)) for k in STACK)


@dataclass(frozen=True)
class Standing:
    """Where one card's fp32 step lies against its model's level, in ln."""

    card: float  # ln of the card's level (ms)
    runs: int  # the card's runs behind it
    level: float  # ln of the model's level (ms)
    cards: int  # levels behind the model's level: the other cards, a baseline file's as one
    spread: float  # the sd of ln the distance is measured in

    @property
    def z(self) -> float:
        """How many spreads the card lies from its model's level (positive: slower)."""
        return (self.card - self.level) / self.spread

    @property
    def off(self) -> float:
        """The card's step over the model's, less one: 0.08 for a card 8% slower."""
        return math.exp(self.card - self.level) - 1.0

    @property
    def outlier(self) -> bool:
        return abs(self.z) > OUTLIER_Z

    def describe(self) -> str:
        """'fp32 step 12.30 ms against the model's 8.20 ms from 3 cards: +50.0%, 27.0 spreads of 1.5%'."""
        return (f"fp32 step {math.exp(self.card):.3f} ms against the model's {math.exp(self.level):.3f} ms from "
                f"{self.cards} card{'s' * (self.cards != 1)}: {self.off:+.1%}, {self.z:+.1f} spreads of "
                f"{self.spread:.1%}")


def standing(card: Sequence[float], others: Sequence[float]) -> Standing | None:
    """The card whose runs measured `card` (ms per step, one per run) against the levels of its model's
    other cards (`others`, ms: each card's median, a baseline file's figure as one); None where either is empty."""
    if not card or not others:
        return None
    logs = [math.log(v) for v in others]
    spread = SPREAD_FLOOR if len(logs) < MIN_SPREAD_CARDS else max(SPREAD_FLOOR, robust_sd(logs))
    return Standing(median([math.log(v) for v in card]), len(card), median(logs), len(logs), spread)


@dataclass(frozen=True)
class FleetTime:
    """One run's fp32 device time per step in one speed cell, on one card."""

    test_id: str
    card: str
    run_id: str
    when: str
    step_ms: float
    method: str | None  # the device-time method (graph, kernels, wall): one figure per method
    stack: tuple  # ``stack_of`` the run's software


def fp32_step(record: SpeedRecord) -> tuple[float | None, str | None]:
    """A speed record's fp32 device ms per step and the method that timed it (None where not measured)."""
    ratio = record.ratio(DEVICE)
    step = ratio.side(FP32_SIDE).step_ms
    return (step if step is not None and step > 0 else None), ratio.method


def fleet_times(history: History, gpu: str, test_id: str | None = None) -> list[FleetTime]:
    """Every fp32 device step time the history holds of `gpu`'s speed cells (of `test_id`, where given) on a
    named card (its UUID), oldest first; smoke runs and cells slowed on purpose left out."""
    import sqlalchemy as sa

    from ampbench.history.schema import CELLS_TABLE, RUNS_TABLE

    query = (sa.select(CELLS_TABLE.c.test_id, CELLS_TABLE.c.record, RUNS_TABLE.c.id, RUNS_TABLE.c.run_at,
                       RUNS_TABLE.c.card_uuid, RUNS_TABLE.c.software)
             .join(RUNS_TABLE, RUNS_TABLE.c.id == CELLS_TABLE.c.run_id)
             .where(RUNS_TABLE.c.gpu == gpu, RUNS_TABLE.c.smoke.is_(False), RUNS_TABLE.c.card_uuid.is_not(None),
                    CELLS_TABLE.c.kind == SpeedRecord.KIND, CELLS_TABLE.c.injected.is_(False))
             .order_by(RUNS_TABLE.c.run_at, RUNS_TABLE.c.id))
    if test_id is not None:  # a cell asks for its own: the other cells' records are not parsed
        query = query.where(CELLS_TABLE.c.test_id == test_id)
    with history.transaction() as conn:
        rows = conn.execute(query).all()
    out = []
    for r in rows:
        step, method = fp32_step(SpeedRecord.from_info(json.loads(r.record), r.test_id))
        if step is not None:
            stack = stack_of(json.loads(r.software))
            out.append(FleetTime(r.test_id, r.card_uuid, r.id, r.run_at, step, method, stack))
    return out


def by_card(times: Iterable[FleetTime]) -> dict[Hashable, list[float]]:
    """Each card's fp32 step times (ms), in order."""
    cards: dict[Hashable, list[float]] = defaultdict(list)
    for t in times:
        cards[t.card].append(t.step_ms)
    return dict(cards)


def card_standing(times: Iterable[FleetTime], card: Hashable, now: float | None = None,
                  file_ms: float | None = None) -> Standing | None:
    """`card` against its model's other cards in one cell, over `times` (one stack and method), with
    `now` (this run's, not in the history yet) among the card's and `file_ms` (a baseline file's level)
    among the others."""
    cards = by_card(times)
    own = [*cards.pop(card, []), *([now] if now is not None else [])]
    others = [median(v) for v in cards.values()] + ([file_ms] if file_ms is not None else [])
    return standing(own, others)


@dataclass(frozen=True)
class CardRow:
    """One card in one cell of `ampbench history cards`."""

    gpu: str
    test_id: str
    card: str
    runs: int
    step_ms: float  # the card's median
    standing: Standing | None  # None: the only card of its cell


def fleet(history: History, gpu: str) -> list[CardRow]:
    """Each card of `gpu` in each speed cell, against the others on the software and method of the cell's
    latest run (``card_standing``), by cell then card."""
    cells: dict[str, list[FleetTime]] = defaultdict(list)
    for t in fleet_times(history, gpu):
        cells[t.test_id].append(t)
    rows = []
    for test_id in sorted(cells):
        latest = cells[test_id][-1]
        same = [t for t in cells[test_id] if t.stack == latest.stack and t.method == latest.method]
        for card, steps in sorted(by_card(same).items()):
            rows.append(CardRow(gpu, test_id, str(card), len(steps), median(steps), card_standing(same, card)))
    return rows
