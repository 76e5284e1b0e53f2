"""Progress, for the stretches where nothing else is printed for seconds.

- The suite's one line on pytest's terminal, during a speed cell's preparation and rounds or a memory
  search's steps: the harness calls ``update`` wherever it is (cheap, and silent while no display is
  installed); ``ampbench.plugin.progress`` installs a ``Line`` on pytest's terminal.
- The ``ampbench`` command's stages on large runs (``Progress``): a line on stderr as each stage of
  ``ampbench report`` or ``ampbench compare`` starts, and every few seconds while one lasts, so a report
  of a hundred thousand cells never sits silent. Runs of fewer than MANY_CELLS cells take a few seconds
  and print nothing.

Nothing here imports pytest or torch."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO

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


# -- a command's stages ------------------------------------------------------------------------------

MANY_CELLS = 2000  # a run this large takes long enough that silence reads as a hang
EVERY_S = 2.0  # the longest a stage stays silent
CELL_BYTES = 3000  # about the fewest bytes a cell takes in a run JSON: what tells a large file before it is read


class Progress:
    """Says what a command is doing on a run of `cells` cells, when there are MANY_CELLS or more. Used as
    a context manager, it also repeats the stage under way every `every_s` seconds (from a thread, as a
    stage may be one long call: rendering a page, reading a file)."""

    def __init__(self, command: str, cells: int, stream: TextIO | None = None, every_s: float = EVERY_S):
        self.command = command
        self.on = cells >= MANY_CELLS
        self.stream = stream
        self.every_s = every_s
        self.start = time.monotonic()
        self.last = -every_s
        self.stage = ""
        self.count = ""
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._beat: threading.Thread | None = None

    @classmethod
    def for_files(cls, command: str, paths: Iterable[Path | None]) -> Progress:
        """Progress of a command about to read `paths`: on where one of them is large enough to hold
        MANY_CELLS cells (count them with `cells` once read)."""
        size = 0
        for path in paths:
            try:
                size = max(size, path.stat().st_size if path is not None and path.is_file() else 0)
            except OSError:
                pass  # the reader names what is wrong with it
        return cls(command, size // CELL_BYTES)

    def cells(self, count: int) -> None:
        """The runs read hold at most `count` cells: progress from here on only for MANY_CELLS or more."""
        self.on = count >= MANY_CELLS

    def __call__(self, stage: str, done: int | None = None, total: int | None = None) -> None:
        """`stage` is under way, `done` of `total` items through it: a line when the stage is new, else at
        most every `every_s` seconds."""
        if not self.on:
            return
        with self._lock:
            self.count = f" {done:,} of {total:,}" if done is not None and total is not None else ""
            if stage != self.stage or time.monotonic() - self.last >= self.every_s:
                self.stage = stage
                self._say()

    def _say(self) -> None:
        self.last = time.monotonic()
        print(f"ampbench {self.command}: {self.stage}{self.count} ({self.last - self.start:.0f} s)",
              file=self.stream or sys.stderr, flush=True)

    def _repeat(self) -> None:
        while not self._done.wait(self.every_s / 4):
            with self._lock:
                if self.on and self.stage and time.monotonic() - self.last >= self.every_s:
                    self._say()

    def __enter__(self) -> Progress:
        self._beat = threading.Thread(target=self._repeat, name="ampbench-progress", daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._beat is not None:
            self._beat.join()


QUIET = Progress("", 0)  # for callers that want no progress
