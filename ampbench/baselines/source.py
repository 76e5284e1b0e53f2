"""Where what a cell is judged against comes from: the face of a source of baseline entries that the cells,
their harness and the plugin read and record through. Two sources show it: the committed file of one GPU model
(or of N GPUs), ``baselines.file.BaselineFile``, and the run history over that file,
``history.baseline_source.HistoryBaselines``, which learns each speed or distributed cell's level and tolerance
from its runs and records and writes to the file it wraps. A cell annotated with ``BaselineSource``
takes either. Both give a cell's figure its ``tolerance.Reference``: the level, the tolerance computed once,
and, from the history alone, the rule that fails a run with the runs held back before it."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from ampbench.baselines.entries import FlatEntry
from ampbench.results.ratios import RatioKind
from ampbench.tolerance import Reference


@runtime_checkable
class BaselineSource(Protocol):
    """A source of baseline entries by test id: each entry's figures and the software they were measured
    on, and this run's new entries, queued by `record` and written by `write`."""

    @property
    def path(self) -> Path:
        """The baseline file: where `write` puts the entries, and what a warning names."""

    @property
    def exists(self) -> bool:
        """Whether there is anything to judge against at all (the file, or for the history, a learned cell)."""

    @property
    def pending(self) -> dict[str, dict]:
        """The entries recorded since the last `write`, by test id."""

    def figures(self, test_id: str) -> dict | None:
        """The entry's figures as the file stores them; None where the source has no entry."""

    def entry(self, test_id: str) -> FlatEntry | None:
        """The cell's entry, read by its cell's type (``entries.entry_of``); None where there is none."""

    def reference(self, test_id: str, kind: RatioKind, floor: float) -> Reference | None:
        """What the cell's ratio of `kind` is judged against under the user's `floor`: its level and its
        tolerance, computed once. None where there is no such figure."""

    def software(self, test_id: str) -> dict | None:
        """The software the entry was measured on; None where it has no entry."""

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        """Queue this run's entry for `write`."""

    def write(self) -> Path:
        """Merge the queued entries into the file, atomically; the file's path."""
