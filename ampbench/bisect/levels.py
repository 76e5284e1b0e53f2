"""The good side's level of each cell: measured there a few times, or read from the run history (reading
only: a bisect never writes to it)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

from ampbench.bisect.cells import named_cell
from ampbench.bisect.judge import Level, level_of
from ampbench.bisect.measure import (
    COMMAND_CELL,
    CommandMeasurer,
    Measurement,
    StepFigure,
    SuiteMeasurer,
)
from ampbench.results.ratios import SPEED_RATIOS

HISTORY_RUNS = 10  # the latest counted runs of the history's level a bisect's level takes


class LevelError(ValueError):
    """No level could be set: the message names the cell and why."""


def keys_of(measurer: SuiteMeasurer | CommandMeasurer) -> list[str]:
    """The cells the measurer's figures are named by: the speed cells' test ids, or the step command's."""
    if isinstance(measurer, SuiteMeasurer):
        return [named_cell(c).test_id for c in measurer.cells]
    return [COMMAND_CELL]


def on_gpu(measurement: Measurement) -> bool:
    return bool(measurement.device) and str(measurement.device).split(":")[0] != "cpu"


def measured_levels(measurer: SuiteMeasurer | CommandMeasurer, tree: Path, revision: str, repeats: int,
                    floor: float, baseline_dir: Path | None,
                    say: Callable[[str], None]) -> tuple[dict[str, Level], list[dict]]:
    """Each cell's level from `repeats` measurements at the good side (checked out in `tree`), and a record
    of each. Given `baseline_dir`, on a GPU the second measurement also records the good side's baselines
    there, which the suite's gate then holds every step against; the CPU smoke pass records none. A
    measurement that left no figure is taken again, `repeats` times at most; one that ran past the step
    timeout is not: the level cannot be set."""
    figures: dict[str, list[StepFigure]] = {}
    runs: list[dict] = []
    failures = 0
    while len(runs) < repeats:
        record = bool(runs) and isinstance(measurer, SuiteMeasurer) and measurer.baseline_dir is not None
        if record:
            assert baseline_dir is not None, "the measurer records baselines only once set to baseline_dir below"
            record = not Path(baseline_dir).exists()
        measurement = measurer(tree, f"good{len(runs) + failures + 1}-{revision[:12]}", record_baseline=record)
        if not measurement.figures:
            failures += 1
            say(f"good side {revision[:12]}: no figure ({measurement.seconds:.1f} s): {measurement.problem}")
            if measurement.timed_out:  # each measurement more would hang as long: the level cannot be set
                raise LevelError(f"the good side {revision[:12]}: {measurement.problem}")
            if failures >= repeats:
                raise LevelError(f"the good side {revision[:12]} gave no figure in {failures} measurements: "
                                 f"{measurement.problem}")
            continue
        if (isinstance(measurer, SuiteMeasurer) and baseline_dir is not None and measurer.baseline_dir is None
                and on_gpu(measurement)):
            measurer.baseline_dir = str(baseline_dir)  # the next measurement records the good side's baselines
        for cell, figure in measurement.figures.items():
            figures.setdefault(cell, []).append(figure)
        runs.append({"cells": {c: {"speedup": f.speedup, "low": f.low, "high": f.high, "verdict": f.verdict}
                               for c, f in measurement.figures.items()},
                     "seconds": measurement.seconds, "recorded_baseline": record})
        shown = "; ".join(f"{c} {f}" for c, f in measurement.figures.items())
        say(f"good side {revision[:12]}, measurement {len(runs)} of {repeats}: {shown} ({measurement.seconds:.1f} s)"
            + (", recorded as the suite's baseline" if record else ""))
    source = f"measured {len(runs)} times at {revision[:12]}"
    missing = [c for c in keys_of(measurer) if c not in figures] if isinstance(measurer, SuiteMeasurer) else []
    if missing:
        raise LevelError(f"the good side {revision[:12]} gave no figure of {', '.join(missing)}")
    return {cell: level_of(cell, found, floor, source) for cell, found in figures.items()}, runs


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
