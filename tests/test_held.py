"""Held device blocks (ampbench.speed.held): a block counts only where it was queued whole before the GPU
began it; a block the host fell behind on is timed again behind a longer hold, and one that cannot be
queued whole is timed by events around each replay, and says so. The GPU is faked: these tests check
the bookkeeping and the decisions; the timing itself is checked on a GPU by the profiled held block."""

from __future__ import annotations

import pytest
import torch

import ampbench.speed.held as held
from ampbench.speed.devicetime import IDLE_GAP_NS, idle_inside


class FakeEvent:
    """A CUDA event whose start is reached (or not) by the time the block is launched."""

    reached: list[bool] = []  # popped once per block: was the start event reached when queried
    elapsed_ms = 10.0

    def __init__(self, enable_timing: bool = True):
        self.done = None

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return FakeEvent.reached.pop(0)

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, other: "FakeEvent") -> float:
        return FakeEvent.elapsed_ms


@pytest.fixture
def fake_gpu(monkeypatch):
    holds: list[float] = []
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(held, "spin", lambda device, seconds: holds.append(seconds))
    return holds


def test_a_block_queued_whole_is_timed_once_behind_the_floor_hold(fake_gpu):
    FakeEvent.reached = [False]
    queue = held.BlockQueue(torch.device("cuda"))
    launched = []
    seconds = queue.replays(launched.append, 1, lambda n: pytest.fail("no fallback expected"))
    assert seconds == pytest.approx(0.010) and launched == [1]
    assert (queue.stats.blocks, queue.stats.held, queue.stats.retried, queue.stats.per_replay) == (1, 1, 0, 0)
    assert fake_gpu == [held.HOLD_FLOOR_S]
    assert queue.stats.describe().startswith("1 of 1 blocks queued whole behind a hold")


def test_a_block_the_host_fell_behind_on_is_timed_again_behind_a_hold_twice_as_long(fake_gpu):
    FakeEvent.reached = [True, True, False]  # two misses, then queued whole
    queue = held.BlockQueue(torch.device("cuda"))
    launched = []
    queue.replays(launched.append, 1, lambda n: pytest.fail("no fallback expected"))
    assert len(launched) == 3 and fake_gpu[0] == held.HOLD_FLOOR_S
    assert fake_gpu[1] >= 2 * fake_gpu[0] and fake_gpu[2] >= 2 * fake_gpu[1]
    assert (queue.stats.held, queue.stats.retried, queue.stats.per_replay) == (1, 2, 0)
    assert "2 timed again after the host fell behind" in queue.stats.describe()


def test_a_block_that_cannot_be_queued_whole_falls_back_to_events_around_each_replay_and_says_why(fake_gpu):
    FakeEvent.reached = [True] * held.TRIES
    queue = held.BlockQueue(torch.device("cuda"))
    assert queue.replays(lambda n: None, 4, lambda n: 0.5) == 0.5
    assert queue.fallen_back and queue.stats.per_replay == 1 and queue.stats.held == 0
    assert "could not be queued whole" in queue.stats.why
    # the cell's later blocks go straight to the fallback: both sides stay measured alike
    assert queue.replays(lambda n: pytest.fail("no held try after the fallback"), 4, lambda n: 0.25) == 0.25
    assert queue.stats.per_replay == 2 and "2 by events around each replay" in queue.stats.describe()


def test_the_hold_grows_to_cover_the_host_time_of_the_last_launches(fake_gpu, monkeypatch):
    FakeEvent.reached = [False]
    clock = iter([0.0, 0.003])  # the launches took 3 ms of host time
    monkeypatch.setattr(held.time, "perf_counter", lambda: next(clock))
    queue = held.BlockQueue(torch.device("cuda"))
    queue.time(lambda: None)
    assert queue.stats.hold_s == pytest.approx(held.HOLD_MARGIN * 0.003)


def test_after_a_miss_the_hold_covers_the_launches_that_missed(fake_gpu, monkeypatch):
    FakeEvent.reached = [True, False]
    clock = iter([0.0, 0.030, 0.0, 0.001])  # the missed launches took 30 ms of host time
    monkeypatch.setattr(held.time, "perf_counter", lambda: next(clock))
    queue = held.BlockQueue(torch.device("cuda"))
    queue.replays(lambda n: None, 1, lambda n: pytest.fail("no fallback expected"))
    assert fake_gpu[1] == pytest.approx(held.HOLD_MARGIN * 0.030) and queue.stats.launch_s == pytest.approx(0.030)


def test_a_block_too_long_for_the_launch_queue_is_timed_in_held_chunks_summed(fake_gpu):
    FakeEvent.reached = [False] * 4
    queue = held.BlockQueue(torch.device("cuda"))
    launched = []
    seconds = queue.replays(launched.append, 10, lambda n: pytest.fail("no fallback expected"), chunk=3)
    assert launched == [3, 3, 3, 1] and seconds == pytest.approx(4 * 0.010)
    assert (queue.stats.blocks, queue.stats.held, queue.stats.per_replay, queue.stats.chunk) == (1, 1, 0, 3)
    assert len(fake_gpu) == 4  # every chunk behind a hold of its own
    assert "held chunks of 3+ replays" in queue.stats.describe()


def test_a_chunk_that_cannot_be_queued_leaves_the_rest_of_its_block_to_events_around_each_replay(fake_gpu):
    FakeEvent.reached = [False] + [True] * held.TRIES
    queue = held.BlockQueue(torch.device("cuda"))
    rest = []
    seconds = queue.replays(lambda n: None, 8, lambda n: rest.append(n) or 0.5, chunk=4)
    assert rest == [4] and seconds == pytest.approx(0.010 + 0.5)
    assert queue.fallen_back and queue.stats.per_replay == 1 and queue.stats.held == 0


class FakeHold:
    """The event after a probe's hold: the GPU leaves the hold once `after` launches were queued."""

    def __init__(self, after: int):
        self.after, self.launched = after, 0

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return self.launched >= self.after


@pytest.mark.parametrize("blocked_s, expected", [(0.02, 5), (0.0001, None)])
def test_the_launch_queue_depth_is_where_a_launch_waited_for_the_gpu_to_leave_the_hold(
        fake_gpu, monkeypatch, blocked_s, expected):
    hold = FakeHold(after=6)
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: hold)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    ticks = iter([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 5.0 + blocked_s])  # each launch's start, then the sixth's end
    monkeypatch.setattr(held.time, "perf_counter", lambda: next(ticks))

    def launch_one():
        hold.launched += 1

    # the sixth launch returned once the GPU had left the hold: five fit; a quick one means the launches
    # outlasted the hold, which says nothing of the queue
    assert held.launch_queue_depth(torch.device("cuda"), launch_one, 10) == expected
    assert fake_gpu == [held.PROBE_HOLD_S]
    hold2 = FakeHold(after=99)
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: hold2)
    ticks = iter([0.0] * 20)
    monkeypatch.setattr(held.time, "perf_counter", lambda: next(ticks))
    assert held.launch_queue_depth(torch.device("cuda"), lambda: None, 10) is None  # all ten fit


def test_a_profiled_block_is_held_but_never_retried(fake_gpu):
    FakeEvent.reached = [True]
    queue = held.BlockQueue(torch.device("cuda"))
    assert queue.profiled(lambda: None) is False
    assert (queue.stats.blocks, queue.stats.held, queue.stats.retried) == (1, 0, 0)


def test_idle_inside_a_block_counts_only_gaps_longer_than_a_launch():
    us = 1_000
    spans = [(0, 100 * us), (102 * us, 200 * us), (200 * us + IDLE_GAP_NS + 1, 400 * us)]
    idle = idle_inside(spans, queued=True)
    assert idle.idle_ms == pytest.approx((IDLE_GAP_NS + 1) / 1e6)
    assert idle.longest_gap_us == pytest.approx((IDLE_GAP_NS + 1) / 1e3)
    assert idle.span_ms == pytest.approx(0.4)
    quiet = idle_inside([(0, 10), (5, 20), (21, 30)], queued=True)  # overlapping and back-to-back kernels
    assert quiet.idle_ms == 0 and quiet.share == 0.0


def test_only_the_hold_ahead_of_a_block_is_left_out_of_its_activities():
    from ampbench.speed.devicetime import _after_the_hold

    acts = [("spin_kernel(long)", 0, 50), ("gemm", 60, 100), ("spin_kernel(long)", 100, 110), ("relu", 110, 120)]
    # an injected spin inside the block (ampbench.slowdown) is work of the block, not a gap
    kept = _after_the_hold(acts)
    assert [name for name, _, _ in kept] == ["gemm", "spin_kernel(long)", "relu"]
    assert idle_inside([(a, b) for _, a, b in kept], queued=True).idle_ms == 0
