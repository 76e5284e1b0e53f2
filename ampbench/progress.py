"""One line of progress for the stretches where pytest prints nothing for seconds: a speed cell's
preparation and rounds, a memory search's steps. The harness calls ``update`` wherever it is (cheap,
and silent while no display is installed); ``ampbench.plugin.progress`` installs a ``Line`` on pytest's
terminal. Nothing here imports pytest."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Callable, Iterator

# the least time between two updates drawn from a loop (``update(..., often=True)``): a CPU smoke
# cell's rounds take milliseconds, and a terminal need not be redrawn faster than it is read
MIN_INTERVAL = 0.2
# fewer free columns than this on the current line and the progress waits for the next line
MIN_ROOM = 12


class Line:
    """Text drawn after what the terminal's current line already holds, the cursor put back where it
    was, so that whatever is written next starts where it would have; ``clear`` blanks it. Only
    spaces and backspaces move the cursor: no escape sequences, nothing that scrolls. The owner calls
    ``clear`` before anything else writes to the terminal."""

    def __init__(self, write: Callable[[str], None], room: Callable[[], int], min_interval: float = MIN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic):
        self.write, self.room, self.min_interval, self.clock = write, room, min_interval, clock
        self.shown = 0  # columns of the text drawn now
        self.last = float("-inf")  # when it was drawn

    def show(self, text: str, often: bool = False) -> None:
        now = self.clock()
        if often and now - self.last < self.min_interval:
            return
        room = self.room() - 1  # a separating space
        text = " " + text[:room] if room >= MIN_ROOM else ""
        blank = max(0, self.shown - len(text))
        if text or blank:
            self.write(text + " " * blank + "\b" * (len(text) + blank))
        self.shown, self.last = len(text), now

    def clear(self) -> None:
        if self.shown:
            self.write(" " * self.shown + "\b" * self.shown)
            self.shown = 0


_line: Line | None = None
_scopes: list[str] = []  # what the work under way belongs to, outermost first: the cell, then the figure


def install(line: Line | None) -> Line | None:
    """Draw updates on `line` from now on (None: draw nothing); the line drawn on before."""
    global _line
    before = _line
    if before is not None:
        before.clear()
    _line = line
    return before


def active() -> bool:
    """Whether an update would be drawn: a caller can skip working out its text."""
    return _line is not None


def update(text: str, often: bool = False) -> None:
    """Show `text`, after the labels of the scopes it runs in. `often`: from a loop, drawn at most
    every MIN_INTERVAL seconds."""
    if _line is not None:
        _line.show(": ".join([*_scopes, text]), often)


def clear() -> None:
    if _line is not None:
        _line.clear()


@contextmanager
def scope(label: str) -> Iterator[None]:
    """Updates inside are prefixed with `label` ("resnet50-amp_bf16", then "device time")."""
    _scopes.append(label)
    try:
        yield
    finally:
        _scopes.pop()
