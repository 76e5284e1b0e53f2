"""A run as the history holds it, free of the database: its facts (``RunFacts``), its cells and their
figures (``RunRow``, which ``ingest`` makes from records and ``store.History.append`` writes), a run as
``History.runs`` lists it (``RunSummary``), an accepted change, and the history's times (ISO-8601 UTC).
Nothing here imports SQLAlchemy: the report's change listings read these types without a store."""

from __future__ import annotations

import json
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

    def values(self, run: "RunRow", cell: "CellRow") -> dict:
        """Its row of the figures table."""
        return dict(run_id=run.id, test_id=cell.test_id, figure=self.name, gpu=cell.gpu or run.gpu, value=self.value,
                    low=self.low, high=self.high, verdict=self.verdict)


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

    def values(self, run_id: str) -> dict:
        """Its row of the cells table."""
        return dict(run_id=run_id, test_id=self.test_id, kind=self.kind, model=self.model, mode=self.mode,
                    verdict=self.verdict, injected=self.injected, record=json.dumps(dict(self.record)))


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

    def values(self) -> dict:
        """Its row of the runs table, stamped with the time it is appended."""
        return dict(id=self.id, run_at=self.when, gpu=self.gpu, gpu_slug=self.gpu_slug, card_uuid=self.card_uuid,
                    world_size=self.world_size, smoke=self.smoke, label=self.label,
                    suite_revision=self.suite_revision, software=json.dumps(dict(self.software), sort_keys=True),
                    host_load=None if self.host_load is None else json.dumps(dict(self.host_load), sort_keys=True),
                    source=self.source, cell_count=len(self.cells), appended_at=now())


@dataclass(frozen=True)
class RunSummary(RunFacts):
    """A run as `runs` lists it: its facts, how many cells it holds and how many of them fail."""

    cells: int = 0
    failing: int = 0  # cells whose verdict fails

    @classmethod
    def of_row(cls, row: Any, failing: int) -> "RunSummary":
        """The summary of a row of the runs table, with its count of failing cells."""
        return cls(id=row.id, when=row.run_at, gpu=row.gpu, gpu_slug=row.gpu_slug, card_uuid=row.card_uuid,
                   world_size=row.world_size, smoke=bool(row.smoke), label=row.label,
                   suite_revision=row.suite_revision, software=json.loads(row.software),
                   host_load=json.loads(row.host_load) if row.host_load else None, source=row.source,
                   cells=row.cell_count, failing=failing)


@dataclass(frozen=True)
class Acceptance:
    id: int
    gpu: str
    test_id: str | None  # None: every cell of the run
    run_id: str
    reason: str
    when: str
