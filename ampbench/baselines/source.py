"""Where a cell's reference comes from: the face of a store of baseline entries that the cells, their
harness and the plugin read and record through. Two stores show it: the committed file of one GPU model
(or of N GPUs), ``baselines.store.BaselineStore``, and the run history over that file,
``history.reference.HistoryBaselines``, which learns each speed or distributed cell's level and tolerance
from its runs and records and writes to the file it wraps. A cell annotated with ``ReferenceSource``
takes either; what only the history can answer (``group_failure``: a run failing with the runs held back
before it) is asked of it where present."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


@runtime_checkable
class ReferenceSource(Protocol):
    """A store of baseline entries by test id: each entry's figures and the software they were measured
    on, and this run's new entries, queued by `record` and written by `write`."""

    @property
    def path(self) -> Path:
        """The baseline file: where `write` puts the entries, and what a warning names."""

    @property
    def exists(self) -> bool:
        """Whether there is a reference at all (the file, or for the history, a learned cell)."""

    @property
    def pending(self) -> dict[str, dict]:
        """The entries recorded since the last `write`, by test id."""

    def figures(self, test_id: str) -> dict | None:
        """The entry's figures a cell is held against; None where the store has no entry."""

    def software(self, test_id: str) -> dict | None:
        """The software the entry was measured on; None where it has no entry."""

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        """Queue this run's entry for `write`."""

    def write(self) -> Path:
        """Merge the queued entries into the file, atomically; the file's path."""
