"""``ampbench history changes``: every change point in the history's series (``changes.find_changes``),
each with the runs around it, what differs between them and the kernels that moved
(``report_changes.describe_change``). Reads the store; the detection and the wording are pure."""

from __future__ import annotations

from typing import Iterator

from ampbench.history.changes import Change, find_changes
from ampbench.history.report_changes import describe_change, segment_kernels
from ampbench.history.store import History

NEAR = 5  # runs of each segment, nearest the change, whose kernel lists are compared


def changes_in(history: History, gpu: str, figures: tuple[str, ...],
               cells: set[str] | None = None) -> Iterator[Change]:
    """The changes of every series of `gpu` in `figures` (as the history names them: ``cli.history.figures``; only
    `cells`' where given), cell by cell."""
    for figure in figures:
        for test_id, series in sorted(history.series_of(gpu, figure).items()):
            if cells is None or test_id in cells:
                yield from find_changes(series)


def describe(history: History, change: Change) -> list[str]:
    """The lines `history changes` prints of `change`."""
    test_id, points = change.series.test_id, change.series.points
    kernels = [[history.kernels(points[i].run_id, test_id) for i in seg]
               for seg in (change.before[-NEAR:], change.after[:NEAR])]
    return describe_change(change, history.run(change.run_before.run_id), history.run(change.run_after.run_id),
                           segment_kernels(kernels[0]), segment_kernels(kernels[1]))

