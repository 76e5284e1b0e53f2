"""Simulated run histories of one speed cell, judged by the suite's own code: the sequential verdict
(``speed.ratio.Ratio`` timed over simulated rounds), the history's replay and learning (``replay``, ``learn``)
and the change detection (``changes``), over the runs they will meet: run-to-run noise, cards of one
model that lie apart, stray runs, and a step that persists.

A cell's noise comes from a baseline file (``noise_of``): its learned between-run spread of the
device-time speedup (runs on several cards: the total), split into a within-card and a between-card
part by `card_share`, and one round's spread from its recorded interval. A series starts from an empty
history (the hardest case: every tolerance learned from the series' own runs), runs `clean` unchanged
runs, each on a card of the fleet drawn at random, then `moved` runs whose true speedup is lower by
`step` times the tolerance the gate held the first moved run to. ``dev/bench_history.py`` prints the
tables of docs/design.md; ``tests/test_history_simulation.py`` asserts the goals on a seeded sample.

It lives with its users, not in the package: it drives the speed harness (torch), which the run history
itself never needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Mapping

import numpy as np

from ampbench.baselines.spread import Prior
from ampbench.history.changes import find_changes, settle
from ampbench.history.learn import learned_from
from ampbench.history.model import NEW_CARD
from ampbench.history.replay import Replay
from ampbench.history.series import Point, Series
from ampbench.results.ratios import DEVICE
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.speed.clocks import Clock
from ampbench.speed.ratio import Ratio
from ampbench.speed.sides import SpeedPolicy
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.stats import median_interval_ranks
from ampbench.verdict import SpeedupCheck, Verdict

GPU = "simulated GPU"
# the speed cells of the quick tier whose noise the committed H100 file holds (``noise_of``)
QUICK_MODELS = ("mlp", "wide_resnet28_10", "resnet50", "lstm_lm", "gpt")
QUICK_MODES = ("amp_fp16", "amp_bf16", "fp16_master", "fp16", "bf16")
# the verdicts' rounds as the speed cells take them on a GPU: first look at 5, at most 48
POLICY = SpeedPolicy(0, 0.0, 0.1, RoundsPolicy(8, 20, 0.0025, math.inf), RoundsPolicy(8, 8, 1.0, math.inf),
                     extend_to=48, first_look=5, decide_seconds=math.inf)


@dataclass(frozen=True)
class CellNoise:
    """How one cell's device-time speedup moves."""

    name: str
    between_sd: float  # sd of ln(speedup) between runs on any card of the model: within and between cards
    round_sd: float  # sd of one round's ln ratio within a run
    card_share: float = 0.5  # the share of between_sd^2 that lies between cards

    @property
    def within_sd(self) -> float:
        return self.between_sd * math.sqrt(1.0 - self.card_share)

    @property
    def card_sd(self) -> float:
        return self.between_sd * math.sqrt(self.card_share)


def round_sd_of(half_width: float, rounds: int, confidence: float = 0.99) -> float:
    """One round's sd from a recorded interval of the median of `rounds` normal rounds: the expected
    distance of its lower order statistic from the median (Blom's approximation)."""
    lo, _ = median_interval_ranks(rounds, confidence)
    z = -NormalDist().inv_cdf((lo + 1 - 0.375) / (rounds + 0.25))
    return half_width / z


def noise_of(entries: Mapping[str, Mapping], card_share: float = 0.5) -> list[CellNoise]:
    """The noise of the quick tier's 16-bit speed cells an H100-style baseline file's `entries` hold a
    learned device-time spread for."""
    cells = []
    for model in QUICK_MODELS:
        for mode in QUICK_MODES:
            figures = entries.get(f"test_speed[{model}-{mode}]", {}).get("figures", {})
            sd, low, high, rounds = (figures.get(k) for k in ("device_between_run_sd", "device_ci_low",
                                                              "device_ci_high", "device_rounds"))
            if not sd or not low or not high or not rounds:
                continue
            cells.append(CellNoise(f"{model}-{mode}", float(sd), round_sd_of(0.5 * math.log(high / low), int(rounds)),
                                   card_share))
    return cells


@dataclass(frozen=True)
class Scenario:
    clean: int  # unchanged runs before the step
    moved: int  # runs after it (0: pure noise)
    step: float = 0.0  # the drop, in multiples of the tolerance the first moved run is held to
    cards: int = 4  # the fleet's cards of the model, each run on one drawn at random
    stray: float = 0.0  # share of runs 4-8 sds off (a throttled card, a busy host), either way
    floor: float = DEFAULT_TOLERANCE
    settle: bool = True  # hold back what follows a change the detector finds (``changes.settle``)
    prior_runs: int = 0  # runs behind a baseline file's spread of the cell pooled in (0: an empty history alone)
    robust: bool = True  # the runs' robust scale floors the replay's noise (``Replay.robust_scale``)


@dataclass
class SeriesOutcome:
    """What the suite made of one simulated series."""

    verdicts: list[Verdict] = field(default_factory=list)  # each run's
    counted: list[bool] = field(default_factory=list)  # each run, counted at the end
    tolerance_before: float | None = None  # the fleet's tolerance before the first moved run
    tolerance_after: float | None = None  # and after the last
    step_tolerance: float | None = None  # the tolerance the first moved run was held to
    found_after: int | None = None  # moved runs after which `history changes` reports the step at its run
    changes: int = 0  # changes `history changes` reports in the whole series (pure noise: each a false one)


def _rounds(rng: np.random.Generator, true: float, round_sd: float) -> PairedTimer:
    """A paired timer whose rounds measure ln ratio `true` with noise `round_sd`."""
    return PairedTimer(lambda: 1.0, lambda: math.exp(-(true + round_sd * rng.standard_normal())), 1, 1)


def simulate(cell: CellNoise, scenario: Scenario, seed: int) -> SeriesOutcome:
    """One series of `scenario` for `cell`, its random draws from `seed`: run i draws from its own
    generator, so the series with and without the step share every draw but the step (``widening``)."""
    prior = (Prior(scenario.prior_runs, 0.0, cell.between_sd ** 2 * (scenario.prior_runs - 1), 1)
             if scenario.prior_runs > 1 else None)
    replay = Replay(Series(GPU, f"test_speed[{cell.name}]", "device_speedup", ()), prior, scenario.robust)
    offsets = np.random.default_rng([seed, 0]).standard_normal(scenario.cards) * cell.card_sd
    out, shift = SeriesOutcome(), 0.0
    start = scenario.clean
    for i in range(scenario.clean + scenario.moved):
        rng = np.random.default_rng([seed, 1, i])
        card = f"card{rng.integers(scenario.cards)}"
        learned = learned_from(replay, scenario.floor, card=card)
        if i == start:
            out.tolerance_before = learned_from(replay, scenario.floor, card=NEW_CARD).tolerance
            out.step_tolerance = learned.tolerance
            shift = math.log(1.0 - scenario.step * learned.tolerance)
        true = cell.within_sd * rng.standard_normal() + offsets[int(card[4:])] + (shift if i >= start else 0.0)
        if rng.random() < scenario.stray:
            true += rng.choice((-1.0, 1.0)) * rng.uniform(4.0, 8.0) * cell.between_sd
        check = None
        if learned.level is not None:
            rule = lambda v, tol, c=card: _group_failure(replay, v, c, tol)  # noqa: E731
            check = SpeedupCheck(cell.name, "simulated", learned.level, learned.tolerance, group_failure=rule)
        clock = lambda _, t=true, r=rng: _rounds(r, t, cell.round_sd)  # noqa: E731
        ratio = Ratio(DEVICE, check=check, clock=Clock(clock)).time(POLICY, True)
        est, verdict = ratio.estimate, ratio.verdict
        out.verdicts.append(verdict)
        replay.feed(Point(f"run{i}", f"t{i:04d}", est.speedup, est.low, est.high, not verdict.failing, False, card,
                          str(verdict)))
        if scenario.settle:
            settle(replay)
        if i >= start and out.found_after is None and scenario.step and _found(replay, start):
            out.found_after = i - start + 1
    out.tolerance_after = learned_from(replay, scenario.floor, card=NEW_CARD).tolerance
    out.counted = [s.counts for s in replay.statuses]
    out.changes = len(find_changes(replay.as_series(), replay=replay))
    return out


def widening(cell: CellNoise, scenario: Scenario, seed: int) -> tuple[SeriesOutcome, float]:
    """The series of `scenario` and how much wider its tolerance ends than that of its clean runs alone
    (the same draws, no moved run after them): what the moved runs did to the tolerance, which should
    be nothing."""
    moved = simulate(cell, scenario, seed)
    control = simulate(cell, replace(scenario, moved=0), seed)
    return moved, moved.tolerance_after - control.tolerance_after


def _group_failure(replay: Replay, value: float, card: str, tolerance: float) -> str | None:
    failure = replay.group_failure(value, card, tolerance)
    return None if failure is None else failure.describe(replay.points)


def _found(replay: Replay, start: int) -> bool:
    """Whether `history changes` lists a change at run `start` in the runs so far."""
    return any(c.index == start for c in find_changes(replay.as_series(), replay=replay))


