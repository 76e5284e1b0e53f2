"""The level of each cell read from the run history, for ``bisect --history`` (reading only: a bisect never
writes to it), and the cells a measurer's figures are named by. A bisect without a history sets no level:
its steps are paired against the good side (``bisect.pairs``)."""

from __future__ import annotations

import math

from ampbench.bisect.cells import named_cell
from ampbench.bisect.judge import Level, level_of
from ampbench.bisect.measure import COMMAND_CELL, CommandMeasurer, StepFigure, SuiteMeasurer
from ampbench.results.ratios import SPEED_RATIOS

HISTORY_RUNS = 10  # the latest counted runs of the history's level a bisect's level takes


class LevelError(ValueError):
    """No level could be set: the message names the cell and why."""


def keys_of(measurer: SuiteMeasurer | CommandMeasurer) -> list[str]:
    """The cells the measurer's figures are named by: the speed cells' test ids, or the step command's."""
    if isinstance(measurer, SuiteMeasurer):
        return [named_cell(c).test_id for c in measurer.cells]
    return [COMMAND_CELL]


def history_levels(url: str, gpu: str | None, keys: list[str], floor: float, gate: str = "device",
                   runs: int = HISTORY_RUNS) -> dict[str, Level]:
    """Each cell's level from the history at `url`: the geometric mean of its latest counted runs on `gpu`
    since its level last restarted (an accepted change), `runs` at most."""
    from ampbench.history.connect import HistoryError
    from ampbench.history.store import open_history

    try:
        history = open_history(url, create=False, read_only=True)
    except HistoryError as exc:
        raise LevelError(str(exc)) from None
    if gpu is None:
        gpus = history.series_gpus()
        if len(gpus) != 1:
            raise LevelError(f"history {url}: holds runs of {', '.join(gpus) or 'no GPU'}; name one with --gpu")
        gpu = gpus[0]
    figure = SPEED_RATIOS["wall" if gate == "wall" else "device"].history
    levels = {}
    for key in keys:
        series = history.series(gpu, key, figure)
        segments = series.segments()
        points = [series.points[i] for i in (segments[-1] if segments else ())]
        counted = [p for p in points if p.counts and not p.excluded and p.value > 0 and math.isfinite(p.value)]
        if not counted:
            raise LevelError(f"history {url}: no counted run of {key} {figure} on {gpu} to set its level")
        latest = counted[-runs:]
        kernels = history.kernels(latest[-1].run_id, key) or None
        found = [StepFigure(p.value, p.low or p.value, p.high or p.value) for p in latest]
        level = level_of(key, found, floor, f"history: {len(latest)} runs on {gpu}")
        levels[key] = Level(level.cell, level.speedup, level.tolerance, level.values, level.source, kernels)
    return levels
