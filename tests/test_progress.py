"""The progress line: drawn after the terminal's current line and taken back without a trace, fed by
a speed cell's rounds and a memory search's steps, and on only where a person watches a terminal."""

from __future__ import annotations

import pytest
import torch

from ampbench import progress
from ampbench.memory import find_largest_batch
from ampbench.plugin.progress import wanted
from ampbench.speed.timing import PairedTimer

pytest_plugins = ("pytester",)


class Terminal:
    """One terminal line as the characters written to it leave it: backspace moves the cursor left,
    anything else overwrites the cell under the cursor and moves it right."""

    def __init__(self, text: str = "", width: int = 80):
        self.cells, self.cursor, self.width = list(text), len(text), width
        self.writes: list[str] = []

    def write(self, chunk: str) -> None:
        self.writes.append(chunk)
        for ch in chunk:
            if ch == "\b":
                self.cursor = max(0, self.cursor - 1)
                continue
            if self.cursor == len(self.cells):
                self.cells.append(ch)
            else:
                self.cells[self.cursor] = ch
            self.cursor += 1
        assert len(self.cells) < self.width, "the line wrapped"

    def room(self) -> int:
        return self.width - self.cursor - 1

    @property
    def shown(self) -> str:
        return "".join(self.cells).rstrip()


class Clock:
    def __init__(self, tick: float = 0.0):
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


@pytest.fixture(autouse=True)
def own_scopes(monkeypatch):
    """Scopes of these tests' own: the running pytest's progress plugin has opened one for the running test."""
    monkeypatch.setattr(progress, "_scopes", [])


@pytest.fixture
def terminal():
    """A terminal line that pytest wrote two dots to, and a display on it whose clock moves a second
    between updates."""
    term = Terminal("perf/test_speed.py ..")
    before = progress.install(progress.Line(term.write, term.room, clock=Clock(tick=1.0)))
    yield term
    progress.install(before)


def test_a_line_is_drawn_after_the_dots_and_the_cursor_goes_back(terminal):
    with progress.scope("resnet50-amp_bf16"), progress.scope("device time"):
        progress.update("round 9, 2.413x so far")
    assert terminal.shown == "perf/test_speed.py .. resnet50-amp_bf16: device time: round 9, 2.413x so far"
    assert terminal.cursor == len("perf/test_speed.py ..")
    progress.update("round 10")  # shorter: what the longer one left is blanked
    assert terminal.shown == "perf/test_speed.py .. round 10"
    progress.clear()
    assert terminal.shown == "perf/test_speed.py .." and terminal.cursor == len("perf/test_speed.py ..")
    terminal.write(".")  # pytest's next dot lands where it would have without the progress
    assert terminal.shown == "perf/test_speed.py ..."


def test_the_line_is_cut_to_the_room_left_and_waits_where_there_is_too_little():
    term = Terminal("x" * 60, width=80)
    line = progress.Line(term.write, term.room)
    line.show("a" * 50)
    assert len(term.shown) == 79 and term.cursor == 60  # the last column stays free: writing there may wrap
    line.clear()
    full = Terminal("x" * 72, width=80)
    line = progress.Line(full.write, full.room)
    line.show("round 3")
    assert full.writes == [] and full.shown == "x" * 72


def test_updates_from_a_loop_are_drawn_at_most_every_min_interval():
    term, clock = Terminal(), Clock()
    line = progress.Line(term.write, term.room, clock=clock)
    line.show("round 1", often=True)
    clock.now = progress.MIN_INTERVAL / 2
    line.show("round 2", often=True)
    assert term.shown == " round 1"
    line.show("preparing fp32 reference")  # not from a loop: always drawn
    assert term.shown == " preparing fp32 reference"
    clock.now = 2 * progress.MIN_INTERVAL
    line.show("round 3", often=True)
    assert term.shown == " round 3"


def test_without_a_display_nothing_is_drawn_and_scopes_unwind():
    before = progress.install(None)
    try:
        assert not progress.active()
        with pytest.raises(RuntimeError), progress.scope("cell"):
            progress.update("round 1")
            raise RuntimeError
        assert progress._scopes == []
    finally:
        progress.install(before)


def test_a_speed_cells_rounds_say_how_far_they_are(terminal):
    timer = PairedTimer(lambda: 2.0, lambda: 0.8, 1, 1)
    with progress.scope("mlp-amp_bf16"):
        timer.rounds(3)
    assert terminal.shown == "perf/test_speed.py .. mlp-amp_bf16: round 3, 2.500x so far"


def test_a_memory_search_says_which_batch_it_tries():
    term = Terminal("perf/test_memory.py ", width=120)
    shown = []

    def step(batch: int) -> float:
        shown.append(term.shown)  # what the terminal says while the step runs
        if batch > 300:
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return 1e6 * batch

    before = progress.install(progress.Line(term.write, term.room))
    try:
        result = find_largest_batch(step, cap_bytes=400e6, first_batch=64)
    finally:
        progress.install(before)
    assert shown[0] == "perf/test_memory.py  largest batch: trying 64 (fits -, fails -; step 1 of at most 24)"
    assert shown[-1].startswith(f"perf/test_memory.py  largest batch: trying {result.probes[-1].batch} (fits ")
    assert len(shown) == len(result.probes) > 2


@pytest.mark.parametrize("choice, tty, verbosity, capture, ci, drawn", [
    ("auto", True, 0, "fd", False, True),
    ("auto", False, 0, "fd", False, False),  # a log
    ("auto", True, -1, "fd", False, False),  # -q
    ("auto", True, 0, "no", False, False),  # -s: the tests' output would cut into it
    ("auto", True, 0, "fd", True, False),  # $CI
    ("on", False, -1, "no", True, True),
    ("off", True, 0, "fd", False, False),
])
def test_auto_draws_only_for_a_person_at_a_terminal(choice, tty, verbosity, capture, ci, drawn):
    assert wanted(choice, tty, verbosity, capture, ci) is drawn


UPDATING = """
from ampbench import progress

def test_cell():
    progress.update("round 9, 2.413x so far")
"""


@pytest.mark.parametrize("choice, drawn", [("ON", True), ("auto", False), ("off", False)])
def test_the_option_draws_on_pytests_terminal(pytester, capfd, choice, drawn):
    pytester.makepyfile(UPDATING)
    before = progress.install(None)
    try:
        result = pytester.runpytest_inprocess("-p", "ampbench.plugin.progress", "-p", "no:cacheprovider",
                                              "--perf-progress", choice)
    finally:
        progress.install(before)
    result.assert_outcomes(passed=1)
    out = result.stdout.str() + capfd.readouterr().out
    text = " test_cell: round 9, 2.413x so far"
    assert (text + "\b" * len(text) in out) is drawn, out
    assert (" " * len(text) + "\b" * len(text) in out) is drawn, "drawn and never taken back"
