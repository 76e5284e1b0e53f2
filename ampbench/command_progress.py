"""Progress of `ampbench report` and `ampbench compare` on large runs: a line on stderr as each stage
starts, and every few seconds while one lasts, so a report of a hundred thousand cells never sits
silent. Runs of fewer than MANY_CELLS cells take a few seconds and print nothing. (The suite's own
progress line, during a speed cell or a memory search, is ``ampbench.progress``'s.)"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Iterable, TextIO

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
