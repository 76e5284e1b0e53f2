"""Card admission of one speed cell (``history.cards``): its fp32 device time per step against the GPU
model's level, from the cell's baseline entry (its recorded fp32 step, where measured on this software by
the same method) and the history's other cards, as the record's ``card`` figures. It informs: the
cell's verdict is its ratios' alone."""

from __future__ import annotations

import math

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import BaselineFile
from ampbench.baselines.source import BaselineSource
from ampbench.history.baseline_source import HistoryBaselines
from ampbench.history.cards import card_standing, fleet_times, fp32_step, stack_of
from ampbench.history.connect import HistoryError
from ampbench.results import SpeedRecord
from ampbench.results.ratios import DEVICE
from ampbench.results.timed import CardFigures


def _file_level(file: BaselineFile, test_id: str, method: str | None, software: dict) -> float | None:
    """The entry's recorded fp32 device step (ms), where it was timed by `method` on this run's stack."""
    entry = file.entry(test_id)
    if not isinstance(entry, SpeedEntry) or entry.ratio(DEVICE).method != method:
        return None
    if stack_of(file.software(test_id)) != stack_of(software):
        return None
    step = entry.ratio(DEVICE).step_ms_ref
    return step if isinstance(step, (int, float)) and step > 0 else None


def admit(record: SpeedRecord, test_id: str, source: BaselineSource | None, software: dict,
          uuid: str | None) -> CardFigures:
    """The card's figures in `record`'s cell (`test_id`), against `source` (a baseline file, or the history
    over one); a history that cannot be read leaves the card unchecked, saying why."""
    step, method = fp32_step(record)
    if step is None:
        return CardFigures(uuid=uuid, unchecked="no fp32 device time was measured")
    if source is None:
        return CardFigures(uuid=uuid, step_ms=step, runs=1, unchecked="no baseline file or history to compare with")
    history, file = ((source.history, source.file) if isinstance(source, HistoryBaselines)
                     else (None, source if isinstance(source, BaselineFile) else None))
    file_ms = _file_level(file, test_id, method, software) if file is not None else None
    times = []
    if history is not None and file is not None and uuid is not None and file.gpu:
        try:
            times = [t for t in fleet_times(history, file.gpu, test_id)
                     if t.method == method and t.stack == stack_of(software)]
        except HistoryError as error:
            return CardFigures(uuid=uuid, step_ms=step, runs=1, unchecked=str(error))
    found = card_standing(times, uuid, now=step, file_ms=file_ms)
    where = " and ".join(w for w, used in ((str(history), bool(times)), (str(source.path), file_ms is not None))
                         if used)
    if found is None:
        return CardFigures(uuid=uuid, step_ms=step, runs=1,
                           unchecked="no other card's fp32 step on this software and device-time method")
    return CardFigures(uuid=uuid, step_ms=round(math.exp(found.card), 6), runs=found.runs,
                       level_ms=round(math.exp(found.level), 6), cards=found.cards, off=found.off,
                       z=found.z, spread=found.spread, outlier=found.outlier, source=where)
