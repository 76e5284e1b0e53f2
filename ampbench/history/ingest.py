"""A run's records as the rows of the history: the run (GPU model, card, software, revision, label, host
load), each cell with its whole record, and each cell's figures with their intervals and verdicts. The
pytest plugin hands over the session's records; ``import_runs`` reads saved run JSONs
(``ampbench.results.load_run``).

Both go through the same ``Run``, and the plugin writes its run id, label, suite revision and host load
into ``machine_info["ampbench"]`` (``RUN_KEYS``), so a run's JSON imported later is the run the plugin
appended, not a second one. A JSON written without a run id is known by a hash of its content, so that
importing it twice adds nothing. Nothing here imports torch or pytest.

A learned ratio that no measurement gives (``plausible``) never reaches a series: an imported run holding
one is refused whole, naming it (the file can be mended and imported again).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from ampbench.baselines.spread import INJECTED_KEY
from ampbench.history.admit import admission, clash
from ampbench.history.plausible import Implausible, Levels, out_of_bounds, refused
from ampbench.history.rows import CellRow, FigureRow, RunRow, iso_utc
from ampbench.results import (
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PipelineRecord,
    Record,
    Run,
    RunError,
    TimedRecord,
    cluster_name,
    load_run,
    model_slug,
    slug_problem,
)

# what the plugin adds to machine_info["ampbench"] for the history
RUN_KEYS = ("run_id", "label", "suite_revision", "host_load")
# the software fingerprint of a run: what tells two runs' stacks apart; with the GPU's compute capability,
# which a baseline entry exported from the history carries for `ampbench spread`
RUN_SOFTWARE = ("torch", "cuda", "cudnn", "driver", "triton", "torchao", "capability")

if TYPE_CHECKING:  # SQLAlchemy only where runs are imported: the series' names are read without it
    from ampbench.history.store import History


# each ratio of a timed record is a figure of its own, with its interval and verdict, named by its kind
# (``RatioKind.history``); the other kinds' figures
# (each the record's field of that name; its verdict is the cell's)
FIGURES: dict[type[Record], tuple[str, ...]] = {
    MemoryRecord: ("memory_ratio", "max_batch_ratio"),
    ConvergenceRecord: ("accuracy_delta",),  # the mode's accuracy minus fp32's
    PipelineRecord: ("loader_ratio",),
}


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _verdict(verdict: Any) -> str | None:
    return None if verdict is None else str(verdict)


def figures_of(record: Record) -> tuple[FigureRow, ...]:
    """The figures a record measured, with their intervals and verdicts; none it left unmeasured. A timed
    record's are its ratios (a device-time one first, as its table orders them), each with its own
    verdict where the cell wrote one apart."""
    if isinstance(record, TimedRecord):
        ratios = [(kind.history, record.ratio(kind), record.verdict_of(kind)) for kind in record.RATIOS.values()]
        return tuple(FigureRow(name, value, _finite(r.speedup_low), _finite(r.speedup_high), _verdict(verdict))
                     for name, r, verdict in ratios if (value := _finite(r.speedup)) is not None)
    rows = [(name, _finite(getattr(record, name))) for name in FIGURES.get(type(record), ())]
    return tuple(FigureRow(name, value, None, None, _verdict(record.verdict))
                 for name, value in rows if value is not None)


def series_gpu(record: Record, gpu: str | None) -> str | None:
    """The GPU `record`'s series are filed under where not the run's `gpu`: a distributed cell's N GPUs."""
    if gpu and isinstance(record, DistributedRecord) and isinstance(record.world_size, int) and record.world_size > 1:
        return cluster_name(gpu, record.world_size, record.nodes if isinstance(record.nodes, int) else 1)
    return None


def cell_row(record: Record, gpu: str | None = None) -> CellRow:
    """`record` as the history holds it, in a run on `gpu`."""
    return CellRow(test_id=record.test_id, kind=record.kind, model=record.model, mode=record.mode,
                   verdict=None if record.verdict is None else str(record.verdict),
                   injected=bool(record.value(INJECTED_KEY)), record=record.to_info(), figures=figures_of(record),
                   gpu=series_gpu(record, gpu))


def _slug(gpu: str, machine: Mapping[str, Any]) -> str:
    """The stem of the GPU's baseline file: the one its name makes, whatever a run's file says (an import
    refuses one that differs: ``admit``)."""
    slug = machine.get("gpu_slug")
    return slug if isinstance(slug, str) and slug_problem(slug, gpu) is None else model_slug(gpu)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _revision(run: Run) -> str | None:
    """The suite's revision: the plugin's, else the commit pytest-benchmark saw."""
    own = _text(run.machine.get("suite_revision"))
    commit = run.commit.get("id") if isinstance(run.commit, dict) else None
    if own or not isinstance(commit, str) or commit in ("", "unknown", "unversioned"):
        return own
    return commit[:12] + ("-dirty" if run.commit.get("dirty") else "")


def run_row(run: Run, *, run_id: str, when: str, source: str) -> RunRow:
    """`run` as the history holds it."""
    machine = run.machine
    gpu = "cpu" if run.smoke else run.gpu
    ranks = [c.world_size for c in run.of_kind(DistributedRecord) if isinstance(c.world_size, int)]
    host_load = machine.get("host_load")
    return RunRow(id=run_id, when=when, gpu=gpu, gpu_slug="cpu" if run.smoke else _slug(gpu, machine),
                  card_uuid=_text(machine.get("uuid")), world_size=max(ranks, default=1), smoke=run.smoke,
                  label=_text(machine.get("label")), suite_revision=_revision(run),
                  software={k: machine.get(k) for k in RUN_SOFTWARE},
                  host_load=host_load if isinstance(host_load, dict) else None, source=source,
                  cells=tuple(cell_row(c, gpu) for c in run.cells))


def session_run(records: Iterable[Record], machine: Mapping[str, Any], when: datetime) -> RunRow:
    """The run of a pytest session: its records, and machine_info["ampbench"] holding RUN_KEYS."""
    run = Run(path=Path("pytest"), machine=dict(machine), datetime=None, commit={}, cells=list(records))
    return run_row(run, run_id=str(machine["run_id"]), when=iso_utc(when), source="pytest")


CONTENT_PREFIX = "sha256-"  # the id of a run known by its content (the plugin's are UUIDs)


def _canonical(value: Any) -> Any:
    """`value` as every writer of the same JSON reads back: a whole float as the integer it is (1.0 and 1)."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def content_id(document: Any) -> str:
    """The id of a run JSON without the plugin's run id: a hash of its content in one canonical form (keys
    sorted, no whitespace, whole numbers as integers), the same on every import of the file or of a copy
    another tool wrote again, indented or ordered otherwise."""
    text = json.dumps(_canonical(document), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return CONTENT_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def bytes_id(path: Path) -> str:
    """The id an older ampbench gave a run JSON without a run id: a hash of its bytes."""
    return CONTENT_PREFIX + hashlib.sha256(path.read_bytes()).hexdigest()[:32]


def run_content_id(row: RunRow) -> str:
    """The id of a run without the plugin's run id: a hash of what the history holds of it (its time,
    machine, software and each cell's record as the current schema writes it), so that the file, a copy
    another tool wrote again, and its ``ampbench export --format pytest-benchmark`` (the same cells in
    another layout) are one run."""
    return content_id({"when": row.when, "gpu": row.gpu, "card": row.card_uuid, "smoke": row.smoke,
                       "label": row.label, "revision": row.suite_revision, "software": dict(row.software),
                       "cells": {c.test_id: dict(c.record) for c in row.cells}})


def former_ids(path: Path) -> tuple[str, ...]:
    """The ids older versions gave the run JSON at `path` where it had no run id: by its bytes, then by
    its whole document."""
    return bytes_id(path), content_id(json.loads(path.read_bytes()))


def _file_row(path: Path) -> tuple[RunRow, list[Implausible]]:
    """A saved run JSON as the history holds it, with its learned ratios out of bounds (``out_of_bounds``);
    RunError where the history cannot file it (``admit.admission``)."""
    run = load_run(path)  # the file is valid JSON from here on
    when, problems = admission(run)
    if when is None or problems:
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise RunError(path, "; ".join(problems[:3]) + more + ": the history does not file it")
    own = _text(run.machine.get("run_id"))
    row = run_row(run, run_id=own or "", when=when, source=path.name)
    row = row if own else replace(row, id=run_content_id(row))
    return row, out_of_bounds(run.cells, row.id)


def file_run(path: Path) -> RunRow:
    """A saved run JSON as the history holds it; RunError naming the file where it is no usable run, or
    where a learned ratio of it is no plausible measurement (``out_of_bounds``)."""
    row, problems = _file_row(path)
    if problems:
        raise RunError(path, refused(problems))
    return row


@dataclass(frozen=True)
class Refused:
    """A run read whole whose learned ratios include some no measurement gives: imported never, though
    it may be in the history already (a pytest session appends its run less such figures, and its JSON
    holds them)."""

    row: RunRow
    problems: list[Implausible]


@dataclass(frozen=True)
class Imported:
    """What became of one file given to ``import_runs``."""

    path: Path
    run_id: str | None
    appended: bool  # False: already in the history, or unreadable (``error``)
    cells: int = 0
    error: str | None = None  # one line naming the file


def read_runs(paths: Iterable[Path]) -> list[tuple[Path, RunRow | Refused | str]]:
    """Each run JSON of `paths` read as the history would hold it (``Refused`` where a learned ratio of
    it is out of bounds), or the one line saying why it is no usable run; a file named twice is read
    once. Nothing touches a store, so bad input alone makes none."""
    read: list[tuple[Path, RunRow | Refused | str]] = []
    for path in dict.fromkeys(Path(p) for p in paths):
        try:
            row, problems = _file_row(path)
        except (RunError, OSError) as error:
            read.append((path, str(error).splitlines()[0]))
            continue
        read.append((path, Refused(row, problems) if problems else row))
    return read


def append_runs(history: History, read: list[tuple[Path, RunRow | Refused | str]]) -> list[Imported]:
    """Append each run ``read_runs`` read, each in its own transaction; a run already in the history is
    left as it is, a file that was no usable run is reported, and so is a run with a learned figure out of
    bounds or far off its cell's level (``Levels``), nothing of it written."""
    outcomes, levels = [], Levels(history)
    for path, got in read:
        if isinstance(got, str):
            outcomes.append(Imported(path, None, False, error=got))
            continue
        row, problems = (got.row, got.problems) if isinstance(got, Refused) else (got, [])
        # a run id of the plugin's names one run: another run carrying it is refused, not taken for it
        other = None if row.id.startswith(CONTENT_PREFIX) or not history.has_run(row.id) else clash(history, row)
        if other is not None:
            outcomes.append(Imported(path, row.id, False, cells=len(row.cells), error=f"{path}: {other}"))
            continue
        # a store an older ampbench filled knows a file without a run id by another hash of it
        there = row.id.startswith(CONTENT_PREFIX) and any(history.has_run(i) for i in former_ids(path))
        if not there and not problems:
            problems = levels.check(row)
        if problems and not there and not history.has_run(row.id):
            outcomes.append(Imported(path, row.id, False, cells=len(row.cells), error=f"{path}: {refused(problems)}"))
            continue
        appended = not there and not problems and history.append(row)
        if appended:
            levels.add(row)
        outcomes.append(Imported(path, row.id, appended, cells=len(row.cells)))
    return outcomes


def import_runs(history: History, paths: Iterable[Path]) -> list[Imported]:
    """Append each run JSON of `paths`, each in its own transaction: a malformed file is reported and
    nothing of it written, the others are imported; a run already in the history is left as it is."""
    return append_runs(history, read_runs(paths))
