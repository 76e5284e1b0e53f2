"""A distributed cell's device time from CUDA graphs (``ampbench.distributed.graphed``): every rank
captures every side whatever happened on another, a capture that failed anywhere sends every rank to the
profiler with each failing rank's reason, a held block counts only where every rank queued it whole, and
one that no try queues is timed by events around each replay, which the record names. Ranks and GPU are
faked: the bookkeeping is checked here, the timing on GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import ampbench.distributed.graphed as graphed
import ampbench.distributed.speed_worker as worker
from ampbench.distributed.figures import GRAPH_FALLBACK
from ampbench.speed import held
from ampbench.speed.devicetime import CaptureError


@pytest.fixture
def ranks(monkeypatch):
    """One rank whose peers agree with it unless `others_missed` says a peer missed its try, and whose
    peers' capture reasons are `others_why`."""
    state = SimpleNamespace(others_missed=[], agreed=[], others_why=[], barriers=0)

    def agree_max(value, device):
        state.agreed.append(value)
        if value in (0.0, 1.0) and state.others_missed:  # the 'did any rank miss' vote
            return max(value, 1.0 if state.others_missed.pop(0) else 0.0)
        return value

    def together(device):
        state.barriers += 1

    monkeypatch.setattr(graphed, "agree_max", agree_max)
    monkeypatch.setattr(graphed, "together", together)
    monkeypatch.setattr(graphed, "gather_text", lambda text: [text, *state.others_why])
    monkeypatch.setattr(graphed, "launch_queue_depth", lambda device, launch_one, most, launch_all: None)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    return state


class FakeSide:
    def __init__(self, steps_taken=0):
        self.steps_taken, self.device, self.ran = steps_taken, torch.device("cuda", 0), []

    def run(self, steps):
        self.ran.append(steps)
        self.steps_taken += steps


def _captures(monkeypatch, outcomes):
    """CapturedStep replaced: each call takes the next outcome (True: captured; a string: its error)."""
    made = []

    def fake(side, error_mode, stream):
        outcome = outcomes.pop(0)
        made.append((side, error_mode, stream))
        if outcome is not True:
            raise CaptureError(outcome)
        return SimpleNamespace(side=side)

    monkeypatch.setattr(graphed, "CapturedStep", fake)
    return made


def test_every_side_is_captured_after_the_eager_steps_ddp_needs(ranks, monkeypatch):
    made = _captures(monkeypatch, [True, True])
    ref, mode = FakeSide(steps_taken=4), FakeSide(steps_taken=20)
    graphs, why = graphed.capture_sides((ref, mode))
    assert why is None and [g.side for g in graphs] == [ref, mode]
    assert ref.ran == [graphed.EAGER_BEFORE_CAPTURE - 4] and mode.ran == []
    assert all(m[1] == graphed.CAPTURE_ERROR_MODE and m[2] == "stream" for m in made)


@pytest.mark.parametrize("taken, eager", [(0, 11), (11, 0), (96, 0), (97, 1), (196, 0), (197, 1), (300, 0)])
def test_no_side_is_captured_on_an_iteration_ddp_times(taken, eager):
    """DDP times iterations 1-10 and every hundredth with host syncs; the captured one is the third
    after the eager steps (two on the capture stream first)."""
    assert graphed.eager_before_capture(taken) == eager
    assert (taken + eager + graphed.SIDE_STREAM_WARMUP + 1) % graphed.DDP_STATS_EVERY != 0


def test_a_side_that_failed_is_followed_by_the_other_sides_eager_steps_and_capture(ranks, monkeypatch):
    made = _captures(monkeypatch, ["CUDA graph capture failed: boom", True])
    ref, mode = FakeSide(), FakeSide()
    graphs, why = graphed.capture_sides((ref, mode))
    assert graphs is None and why == "rank 0: CUDA graph capture failed: boom"
    assert len(made) == 2 and mode.ran == [graphed.EAGER_BEFORE_CAPTURE]  # the peers launch alike
    assert ranks.barriers == 2


def test_a_capture_that_failed_on_another_rank_sends_every_rank_to_the_profiler(ranks, monkeypatch):
    _captures(monkeypatch, [True, True])
    ranks.others_why = [None, "CUDA graph capture failed: sync in step"]
    graphs, why = graphed.capture_sides((FakeSide(), FakeSide()))
    assert graphs is None and why == "rank 2: CUDA graph capture failed: sync in step"


def _replays(monkeypatch, queued, per_replay_s=0.07):
    replays = graphed.RankedReplays(torch.device("cuda", 0))
    answers, holds = list(queued), []

    def time(launch):
        holds.append(replays.queue.stats.hold_s)
        return 0.040, answers.pop(0)

    monkeypatch.setattr(replays.queue, "time", time)
    graph = SimpleNamespace(replay_each_timed=lambda steps: per_replay_s)
    return replays, graph, holds


def test_a_block_every_rank_queued_whole_counts(ranks, monkeypatch):
    replays, graph, _ = _replays(monkeypatch, [True])
    assert replays.block(graph, 4) == pytest.approx(0.010)
    assert (replays.queue.stats.held, replays.queue.stats.retried) == (1, 0)


def test_a_block_another_rank_missed_is_tried_again_on_every_rank_behind_the_agreed_hold(ranks, monkeypatch):
    ranks.others_missed = [True, False]
    replays, graph, holds = _replays(monkeypatch, [True, True])
    replays.queue.stats.hold_s = 0.02
    assert replays.block(graph, 4) == pytest.approx(0.010)
    assert (replays.queue.stats.held, replays.queue.stats.retried) == (1, 1)
    assert holds == [0.02, 0.02] and 0.02 in ranks.agreed  # each try's hold went through the vote


def test_a_block_no_try_queues_is_timed_by_events_around_each_replay_and_says_so(ranks, monkeypatch):
    replays, graph, _ = _replays(monkeypatch, [False] * held.TRIES)
    assert replays.block(graph, 4) == pytest.approx(0.07 / 4)
    assert replays.block(graph, 4) == pytest.approx(0.07 / 4)  # the cell's later blocks too: measured alike
    stats = replays.queue.stats
    assert (stats.per_replay, stats.held, stats.retried) == (2, 0, held.TRIES)
    assert "could not be queued whole on every rank" in replays.describe()


def test_a_block_that_overflows_some_ranks_launch_queue_is_timed_in_the_least_ranks_chunks(ranks, monkeypatch):
    probes = []

    def depth(device, launch_one, most, launch_all):
        probes.append((most, launch_all))
        return 4  # this rank's queue took 4: chunks of 2 here, 1 where another rank's took fewer

    monkeypatch.setattr(graphed, "launch_queue_depth", depth)
    replays, graph, holds = _replays(monkeypatch, [True] * 12)
    real = graphed.agree_max
    monkeypatch.setattr(graphed, "agree_max", lambda v, d: max(v, -1.0) if v < 0 else real(v, d))
    replays.queue.stats.hold_s = 0.02
    assert replays.block(graph, 6) == pytest.approx(6 * 0.040 / 6)
    assert probes == [(6, True)] and len(holds) == 6 and set(holds) == {0.02}
    assert replays.queue.stats.chunk == 1
    replays.block(graph, 6)
    assert len(probes) == 1  # probed once per graph and block size


def test_the_record_names_graph_replays_or_why_the_profiler_measured(monkeypatch):
    timer = SimpleNamespace(ref_times=[0.1], mode_times=[0.05])
    replays = graphed.RankedReplays(torch.device("cuda", 0))
    fields = worker.DeviceBlocks(timer, "graph", None, replays).fields()
    assert fields["device_method"] == "graph" and fields["device_fallback"] is None
    assert fields["device_queue"] == "no block timed" and fields["device_mode_times"] == [0.05]
    fallback = worker.DeviceBlocks(timer, "kernels", f"{GRAPH_FALLBACK}: rank 1: boom").fields()
    assert fallback["device_queue"] is None and fallback["device_fallback"].endswith("rank 1: boom")
