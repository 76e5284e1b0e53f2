"""The history's replay of a series (ampbench.history.replay) and its card-aware model (ampbench.history.model):
which runs count and which are held back as suspect, when later runs clear them, when a run that passes
alone fails with the held-back runs, where the gate saw the level move, and the cards' levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ampbench.history.changes import find_changes, settle
from ampbench.history.learn import learn, learned_from
from ampbench.history.model import NEW_CARD, Moments, fit
from ampbench.history.replay import Replay
from ampbench.history.series import Point, Series
from ampbench.history.statuses import COUNTED, FAILED, SUSPECT

SD = 0.002  # a device-time speedup's between-run spread, in ln units


def point(log: float, i: int, card: str | None = None, verdict: str = "pass", counts: bool = True,
          restart: bool = False) -> Point:
    return Point(f"run{i}", f"2026-03-01T{i:02d}:00:00Z", math.exp(log), None, None, counts, restart, card, verdict)


def series(logs, cards=None, verdicts=None) -> Series:
    cards = cards or [None] * len(logs)
    verdicts = verdicts or ["pass"] * len(logs)
    return Series("NVIDIA H100 80GB HBM3", "test_speed[gpt-amp_fp16]", "device_speedup",
                  tuple(point(x, i, c, v, v != "regression") for i, (x, c, v) in enumerate(zip(logs, cards, verdicts))))


CLEAN = SD * np.array([0.3, -0.8, 0.5, -0.2, 1.1, -0.6, 0.1, -0.4, 0.9, -1.0])  # ten runs within noise


def test_runs_within_noise_all_count_and_a_run_far_below_is_held_back_and_named():
    replay = Replay(series([*CLEAN, -0.01]))
    assert [s.state for s in replay.statuses[:-1]] == [COUNTED] * 10
    last = replay.statuses[-1]
    assert last.state == SUSPECT and last.alone and "below its level" in last.reason and replay.pending == [10]
    # held back, it moves neither the level nor the noise
    assert learn(series([*CLEAN, -0.01])).pooled == learn(series(list(CLEAN))).pooled


def test_a_suspect_run_is_cleared_once_later_runs_that_count_show_the_level_held():
    stray = [*CLEAN, -0.007, 0.0004, -0.0006]
    replay = Replay(series(stray))
    assert replay.statuses[10].state == COUNTED and "cleared by the 2 runs after it" in replay.statuses[10].reason
    # the runs of a step clear nothing: they are held back too
    step = [*CLEAN, -0.007, -0.0075, -0.0068, -0.0072]
    replay = Replay(series(step))
    assert [s.state for s in replay.statuses[10:]] == [SUSPECT] * 4 and replay.pending == [10, 11, 12, 13]


def test_before_its_noise_is_learned_runs_held_back_below_a_level_of_one_run_outvote_it():
    # two GPUs over a network: a first run that lay high, every later run inconclusive below it
    values = [1.434, 1.43, 1.425, 1.407, 1.386, 1.428]
    verdicts = ["pass"] + ["inconclusive"] * 5
    replay = Replay(series([math.log(v) for v in values], verdicts=verdicts))
    assert replay.statuses[0].reason.startswith("above the 3 runs after it")
    assert "3 runs outvote a level of one run" in replay.statuses[1].reason
    assert learned_from(replay).between_runs is not None, "the cell learns its noise: no run is held back for good"
    assert sum(s.counts for s in replay.statuses) >= 4
    # two runs held back are not enough: the level of one run stands
    replay = Replay(series([math.log(v) for v in values[:3]], verdicts=verdicts[:3]))
    assert [s.state for s in replay.statuses] == [COUNTED, SUSPECT, SUSPECT]


def test_a_failed_run_never_counts_and_a_step_it_begins_is_where_the_gate_saw_the_level_move():
    logs = [*CLEAN, -0.008, -0.0078, -0.0083]
    verdicts = ["pass"] * 10 + ["regression", "pass", "regression"]
    replay = Replay(series(logs, verdicts=verdicts))
    assert [s.state for s in replay.statuses[10:]] == [FAILED, SUSPECT, FAILED]
    assert replay.moved_from() == 10
    assert [c.index for c in find_changes(replay.as_series(), replay=replay)] == [10]
    # the level came back: the step is no longer the gate's current one
    back = Replay(series([*logs, 0.0003], verdicts=[*verdicts, "pass"]))
    assert back.moved_from() is None


def test_a_run_that_passes_alone_fails_with_the_held_back_runs_where_their_drop_is_not_shown_within():
    logs = [*CLEAN, -0.0095, -0.0100]  # a step of about 1%
    replay = Replay(series(logs, verdicts=["pass"] * 10 + ["regression", "pass"]))
    failure = replay.group_failure(math.exp(-0.0055), None, 0.007)  # this run alone: 0.55%, within 0.7%
    assert failure is not None and failure.drop < -0.007 and failure.runs[-1] == -1
    assert "not shown within the tolerance" in failure.describe(replay.points)
    # a run back at its level does not fail with them, nor does any run where none is held back
    assert replay.group_failure(math.exp(0.0), None, 0.007) is None
    assert Replay(series(list(CLEAN))).group_failure(math.exp(-0.0055), None, 0.007) is None


def test_a_failed_run_far_below_says_nothing_of_a_run_within_its_noise():
    replay = Replay(series([*CLEAN, -0.1, -0.0025], verdicts=["pass"] * 10 + ["regression", "pass"]))
    assert replay.statuses[11].state == COUNTED


def test_what_follows_an_unaccepted_change_the_detector_finds_is_held_back():
    # an improvement of 2%: its runs pass and lie above the level; they wait, as a drop's do
    logs = [*CLEAN, *(0.02 + CLEAN[:6])]
    replay = Replay(series(logs))
    settle(replay)
    assert all(s.state == SUSPECT for s in replay.statuses[10:]) and learned_from(replay).level == pytest.approx(
        math.exp(np.mean(CLEAN)), rel=1e-9)
    # accepted, the level restarts there and the noise is kept
    accepted = series(logs)
    points = list(accepted.points)
    points[10] = Point(**{**points[10].__dict__, "restart": True})
    cell = learn(Series(accepted.gpu, accepted.test_id, accepted.figure, tuple(points)))
    assert cell.level == pytest.approx(math.exp(np.mean(logs[10:])), rel=1e-9) and cell.pooled.levels == 2


def test_three_close_first_runs_do_not_hold_back_every_run_after_them_for_good():
    rng = np.random.default_rng(3)
    logs = [0.0, 0.0001, -0.0001, *(SD * rng.standard_normal(17))]  # the first three agree by chance
    replay = Replay(series(logs))
    # the two held while the noise was young, and the run at 12 (+0.74%), 6 sds of the noise these draws
    # show (0.12%), held as a stray above its level is: kept out, not cleared by the runs after it
    assert sum(s.state == SUSPECT for s in replay.statuses) <= 3, [s.reason for s in replay.statuses]
    assert all(s.state == COUNTED for s in replay.statuses[13:]), [s.reason for s in replay.statuses]


def test_a_card_of_many_runs_is_held_to_its_own_level_and_a_new_card_to_the_segments():
    rng = np.random.default_rng(5)
    cards, logs = [], []
    for i in range(40):  # two cards 0.4% apart, runs 0.1% apart on each
        card = "A" if i % 2 else "B"
        cards.append(card)
        logs.append((0.002 if card == "A" else -0.002) + 0.001 * rng.standard_normal())
    model = Replay(series(logs, cards)).model
    a, new = model.predict("A"), model.predict(NEW_CARD)
    assert a.own_card and a.level == pytest.approx(0.002 - logs[0], abs=0.0006)  # shifted by the first value
    assert a.sd < 0.0015 < new.sd and not new.own_card
    assert model.tau == pytest.approx(0.0028, abs=0.0012)
    # a runner that kept to one card: its first run on another is judged wider than its own card's runs
    one = Replay(series(list(CLEAN), ["A"] * 10)).model
    assert one.one_card and one.predict("B").sd > one.predict("A").sd * 1.3


def test_the_model_reduces_to_the_single_level_rule_on_one_card():
    groups = {(0, None): Moments()}
    for y in CLEAN:
        groups[(0, None)].add(float(y))
    model = fit(groups, 0)
    sd = float(np.std(CLEAN, ddof=1))
    assert model.sigma == pytest.approx(sd) and model.predict(None).sd == pytest.approx(sd * math.sqrt(1.1))


@pytest.mark.parametrize("card", ["a", "b"])
def test_once_two_runs_failed_at_a_level_a_third_at_that_level_fails_with_them(card):
    """Four clean runs (sd 0.06%, tolerance about 0.7%), two runs the gate failed 0.8% down, then a third
    at that level whose own interval straddles its line: it fails with the failed runs, on their card or
    another; a run back at the level does not."""
    four = list(0.0006 * np.array([0.5, -1.0, 0.8, -0.3]))
    logs = [*four, -0.0080, -0.0081]
    s = series(logs, cards=["a"] * 6, verdicts=["pass"] * 4 + ["regression"] * 2)
    b = learn(s)
    assert [st.state for st in b.replay.statuses[4:]] == [FAILED, FAILED]
    failure = b.replay.group_failure(math.exp(-0.0081), card, 0.0069)
    assert failure is not None and failure.runs == (4, 5, -1), failure
    assert b.replay.group_failure(math.exp(0.0001), card, 0.0069) is None
