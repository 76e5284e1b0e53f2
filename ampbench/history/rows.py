"""A run as the history holds it, free of the database: its facts (``RunFacts``), its cells and their
figures (``RunRow``, which ``ingest`` makes from records and ``store.History.append`` writes), a run as
``History.runs`` lists it (``RunSummary``), an accepted change, and the history's times (ISO-8601 UTC).
Nothing here imports SQLAlchemy: the report's change listings read these types without a store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping


def iso_utc(moment: datetime) -> str:
    """A time as the history keeps it: ISO-8601 in UTC, to the microsecond, so that text sorts as time."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds")


def now() -> str:
    return iso_utc(datetime.now(timezone.utc))


@dataclass(frozen=True)
class FigureRow:
    name: str  # "device_speedup", "speedup", "memory_ratio", ...
    value: float
    low: float | None
    high: float | None
    verdict: str | None  # the figure's own verdict where the cell wrote one apart, else the cell's


@dataclass(frozen=True)
class CellRow:
    test_id: str
    kind: str
    model: str | None
    mode: str | None
    verdict: str | None
    injected: bool  # slowed on purpose: never a sample of the cell's level or noise
    record: Mapping[str, Any]  # the cell's extra_info
    figures: tuple[FigureRow, ...]
    # the GPU its figures' series are filed under where not the run's: a distributed cell's N GPUs
    # ("NVIDIA H200 x2"), so that two world sizes never share a series
    gpu: str | None = None


@dataclass(frozen=True)
class RunFacts:
    """What the history holds of a run besides its cells."""

    id: str
    when: str  # iso_utc
    gpu: str
    gpu_slug: str
    card_uuid: str | None
    world_size: int
    smoke: bool
    label: str | None
    suite_revision: str | None
    software: Mapping[str, Any]
    host_load: Mapping[str, Any] | None
    source: str


@dataclass(frozen=True)
class RunRow(RunFacts):
    """A run as the history holds it (``ampbench.history.ingest`` makes one from records)."""

    cells: tuple[CellRow, ...] = ()


@dataclass(frozen=True)
class RunSummary(RunFacts):
    """A run as `runs` lists it: its facts, how many cells it holds and how many of them fail."""

    cells: int = 0
    failing: int = 0  # cells whose verdict fails


@dataclass(frozen=True)
class Acceptance:
    id: int
    gpu: str
    test_id: str | None  # None: every cell of the run
    run_id: str
    reason: str
    when: str
