"""Property tests of the run history's learner (``history.replay``, ``history.learn``) over any short history of
one cell with at most one stray run of any size: a learned tolerance is never looser than the unlearned
one, and a drop that persists is found. Each history is replayed as the gate judges its runs: a run fails
where its interval lies wholly below its line, or below it together with the runs held back before it
(``replay.Replay.group_failure``)."""

from __future__ import annotations

import math
import statistics

import numpy as np
from hypothesis import example, given

from ampbench.history.changes import settle
from ampbench.history.learn import learned_from
from ampbench.history.model import NEW_CARD
from ampbench.history.replay import Replay
from ampbench.history.series import Point, Series
from ampbench.tolerance import NOISE_MULTIPLIER, UNLEARNED_TOLERANCE
from tests.history_strategies import ShortHistory, short_histories

CARD = "GPU-0"
# a run's own interval: its rounds' half-width, in sds of the run-to-run noise
HALF_WIDTH = 0.5
# what the GPU model's other cells lend a cell's noise once it has shown one (``history.pooling``): a
# quick tier's cells lend 2-30 degrees of freedom; the property holds the verdict to the lesser end
LENT_DOF = 10
DROP = 8.0  # the sustained drop found within three runs, in sds of the noise


def replayed(values: list[float], noise: float, lent: int = 0) -> tuple[list[str], list[float], Replay]:
    """Each run's verdict and the tolerance it was held to, as the gate and the history judge them in turn."""
    replay = Replay(Series("simulated GPU", "test_speed[gpt-amp_fp16]", "device_speedup", ()))
    verdicts, tolerances = [], []
    for i, value in enumerate(values):
        cell = learned_from(replay, card=CARD)
        if lent:
            cell = cell.lent((lent, noise))
        low, high = value * math.exp(-HALF_WIDTH * noise), value * math.exp(HALF_WIDTH * noise)
        verdict, counts = "pass", True
        if cell.level is not None:
            reference = cell.reference("the history")
            tolerances.append(reference.tolerance)
            # the group rule holds a run its own rounds did not fail: passed or inconclusive
            # (``gate.judge.grouped``)
            if high < reference.line or replay.group_failure(value, CARD, reference.tolerance):
                verdict, counts = "regression", False
            elif low < reference.line:
                verdict = "inconclusive"
        verdicts.append(verdict)
        replay.feed(Point(f"run{i}", f"t{i:04d}", value, low, high, counts, False, CARD, verdict))
        settle(replay)
    return verdicts, tolerances, replay


@given(short_histories())
@example(ShortHistory(0.002, (0.3, 0.0, -0.4, 0.1), 1, math.log(1.10)))  # a stray second run of x1.10
@example(ShortHistory(0.002, (0.3, 0.0, -0.4, 0.1), 1, math.log(1e300)))  # and one of 1e300
def test_no_learned_tolerance_is_looser_than_the_unlearned_one(history: ShortHistory):
    _, tolerances, replay = replayed(history.values(), history.noise)
    widest = max((p.half_width or 0.0) for p in replay.points)
    ceiling = max(UNLEARNED_TOLERANCE, NOISE_MULTIPLIER * widest)
    assert all(t <= ceiling + 1e-12 for t in tolerances), (tolerances, ceiling)
    for card in (CARD, NEW_CARD):  # on its own card and, as a file serves it, on any
        assert learned_from(replay, card=card).tolerance <= ceiling + 1e-12


@given(short_histories(min_runs=8, noise=(0.0015, 0.01), later=3))
@example(ShortHistory(0.00390625, (0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0), 0, -0.0234375))
@example(ShortHistory(0.001953125, (0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 4, 0.017578125))
@example(ShortHistory(0.001953125, (0.0, -2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), 4, 0.017578125))
@example(ShortHistory(0.002, (0.3, 0.0, -0.4, 0.1, 0.2, -0.1, 0.5, 0.0, 1.0, -0.5, 0.0, 0.3, 0.0, 0.0),
                      1, math.log(1.10)))
@example(ShortHistory(0.0078125, (0.0, 0.0, 0.0, 0.0, -2.0, 0.0, -2.0, 0.0, 1.0, 0.0, 0.0), None, 0.0))
def test_a_sustained_drop_of_eight_noises_is_a_regression_within_three_runs(history: ShortHistory):
    """Eight, not five: a one-sided 0.1% prediction bound from n runs is t(n - 1) sds, 4.3 at twelve runs
    and 5.4 at eight, before a stray among them or draws of +-3 sds; a drop of five lies within a run's
    noise of its line (docs/design.md, "Few runs")."""
    values = history.values()
    runs = len(values) - 3
    # the noise its runs show (the stray left out), where the draws spread wider than the cell's own
    shown = statistics.stdev(history.noise * z for i, z in enumerate(history.draws[:runs]) if i != history.stray_at)
    dropped = values[:runs] + [v * math.exp(-DROP * max(history.noise, shown)) for v in values[runs:]]
    verdicts, tolerances, _ = replayed(dropped, history.noise, lent=LENT_DOF)
    assert "regression" in verdicts[runs:], (verdicts, tolerances[-4:])


def test_unchanged_runs_after_a_few_fail_at_most_one_cell_in_a_thousand():
    """From three to six runs of the H200's quick cells' noise (tests/test_history_pooling.py), each cell
    learning alone, the next unchanged run fails at most 1 time in 1,000 cells."""
    from tests.test_history_pooling import SIGMA

    rng = np.random.default_rng(57)
    fails = cells = 0
    for _ in range(40):
        for sigma in SIGMA:
            runs = int(rng.integers(3, 7))
            values = list(2.0 * np.exp(sigma * rng.standard_normal(runs + 1)))
            verdicts, _, _ = replayed(values, sigma)
            fails += verdicts[-1] == "regression"
            cells += 1
    assert fails <= cells // 1000, f"{fails} of {cells} unchanged runs failed"
