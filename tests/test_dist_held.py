"""A distributed cell's held device blocks (speed_worker.HeldBlocks): every rank takes each decision
together, a block counts only where every rank queued it whole, and one that no try queues is measured
by the profiler's busy time, which the record names. Ranks and GPU are faked: the bookkeeping is checked
here, the timing on GPUs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import ampbench.distributed.speed_worker as worker
from ampbench.speed import held


@pytest.fixture
def ranks(monkeypatch):
    """One rank whose peers agree with it unless `others_missed` says a peer missed its try."""
    state = SimpleNamespace(others_missed=[], agreed=[], holds=[])

    def agree_max(value, device):
        state.agreed.append(value)
        if value in (0.0, 1.0) and state.others_missed:  # the 'did any rank miss' vote
            return max(value, 1.0 if state.others_missed.pop(0) else 0.0)
        return value

    monkeypatch.setattr(worker, "agree_max", agree_max)
    monkeypatch.setattr(worker, "together", lambda device: None)
    monkeypatch.setattr(worker, "launch_queue_depth", lambda device, launch_one, most: None)
    monkeypatch.setattr(worker, "profile_steps", lambda side, steps: SimpleNamespace(busy_ms=7.0))
    return state


def _held(monkeypatch, state, queued):
    blocks = worker.HeldBlocks(torch.device("cuda", 0))
    answers = list(queued)

    def time(launch):
        state.holds.append(blocks.queue.stats.hold_s)
        return 0.040, answers.pop(0)

    monkeypatch.setattr(blocks.queue, "time", time)
    return blocks


def test_a_block_every_rank_queued_whole_counts(ranks, monkeypatch):
    blocks = _held(monkeypatch, ranks, [True])
    assert blocks.block(object(), 4) == pytest.approx(0.010)
    assert (blocks.queue.stats.held, blocks.queue.stats.retried) == (1, 0)
    assert worker.device_method_fields(blocks)["device_method"] == worker.HELD


def test_a_block_another_rank_missed_is_tried_again_on_every_rank(ranks, monkeypatch):
    ranks.others_missed = [True, False]
    blocks = _held(monkeypatch, ranks, [True, True])
    assert blocks.block(object(), 4) == pytest.approx(0.010)
    assert (blocks.queue.stats.held, blocks.queue.stats.retried) == (1, 1)


def test_a_block_no_try_queues_falls_back_to_the_profiler_and_the_record_says_why(ranks, monkeypatch):
    blocks = _held(monkeypatch, ranks, [False] * held.TRIES)
    assert blocks.block(object(), 4) == pytest.approx(0.007)
    fields = worker.device_method_fields(blocks)
    assert fields["device_method"] == "kernels" and "could not be queued whole on every rank" in fields["device_fallback"]
    assert blocks.block(object(), 4) == pytest.approx(0.007)  # the cell's later blocks too: measured alike


def test_every_chunk_of_a_try_waits_behind_the_hold_the_ranks_agreed(ranks, monkeypatch):
    monkeypatch.setattr(worker, "launch_queue_depth", lambda device, launch_one, most: 4)  # chunks of 2
    blocks = _held(monkeypatch, ranks, [True, True, True])
    blocks.queue.stats.hold_s = 0.02
    assert blocks.block(object(), 6) == pytest.approx(3 * 0.040 / 6)
    assert ranks.holds == [0.02, 0.02, 0.02] and blocks.queue.stats.chunk == 2
