"""Timed records for the tests, written with each figure of a ratio under the name a record of schema 1
gave it ("device_speedup", "wall_verdict", "versus_tolerance"): read by the records' own reader of that
schema into their ratios (``results.timed.TimedRecord``), as a saved run of it is."""

from __future__ import annotations

from typing import Any, TypeVar

from ampbench.results import DistributedRecord, SpeedRecord, TimedRecord
from ampbench.results.schema import FLAT_RATIOS_SCHEMA, KIND_KEY, SCHEMA_KEY

T = TypeVar("T", bound=TimedRecord)


def flat(kind: type[T], test_id: str = "", **figures: Any) -> T:
    """A record of `kind` holding `figures`, each ratio's under its schema-1 name."""
    return kind.from_info({SCHEMA_KEY: FLAT_RATIOS_SCHEMA, KIND_KEY: kind.KIND, **figures}, test_id)


def speed(test_id: str = "", **figures: Any) -> SpeedRecord:
    return flat(SpeedRecord, test_id, **figures)


def distributed(test_id: str = "", **figures: Any) -> DistributedRecord:
    return flat(DistributedRecord, test_id, **figures)
