"""The baseline file's schema: what each kind of entry (the test id's name before "[") may and must
hold, checked on load and on record (``validate``). Errors name the file and the field.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from ampbench.baselines.entries import ENTRY_TYPES, MemoryEntry, entry_kind
from ampbench.baselines.rules import Rule, is_number  # noqa: F401 - Rule is read from here too

SCHEMA_VERSION = 1
ENTRY_FIELDS = frozenset({"figures", "software", "recorded"})
# when an entry was recorded: UTC, ISO 8601, to the second
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
STAMP_EXPECTED = "a UTC ISO 8601 time such as \"2026-01-31T17:02:11Z\""
_SCALAR = (int, float, str, bool, type(None))
# figures that may hold a list of {"name": str, "ms": number} instead of a scalar
ALLOWED_STRUCTURED = frozenset({"kernels"})
# figures that hold a list of strings end so: the datetimes of the runs a learned spread counted, one
# list per figure whose spread ampbench.baselines.spread learns ("between_run_runs", "device_between_run_runs", ...)
STRING_LIST_SUFFIX = "between_run_runs"


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the field."""

    def __init__(self, path: Path, field_name: str | None, problem: str):
        """`field_name` None: the file as a whole is another kind of file."""
        self.path, self.field = path, field_name
        super().__init__(f"baseline file {path}: " + (f"field {field_name!r}: " if field_name else "") + problem)


def is_stamp(value: Any) -> bool:
    """Whether `value` is a UTC time as the writers stamp it (STAMP_FORMAT): the stamps are compared as
    strings to find the entry recorded last, which holds only for this one format."""
    if not isinstance(value, str) or len(value) != 20:
        return False
    try:
        datetime.strptime(value, STAMP_FORMAT)
    except ValueError:
        return False
    return True


def entry_schemas() -> dict[str, dict[str, Rule]]:
    """One schema per kind of entry, keyed by the test id's name before "[": the figures each test reads
    back from its entry (ampbench.suite.speed: the fields of ``entries.SpeedEntry``, its ratios' among them;
    ampbench.suite.distributed: those of ``entries.DistributedEntry``; ampbench.suite.memory with
    memory.judge and memory.search_start; ampbench.suite.convergence), so that a figure a test would
    misread stops the run up front instead. Figures not named here are stored for the report only and
    are free, so a test can add one without touching this table. ampbench.suite.pipeline reads no
    baseline; a kind not listed here gets the checks every entry gets. Read off the entries' types when
    asked: a new kind of ratio is a row of its table (``results.ratios``)."""
    schemas = {kind: entry.rules() for kind, entry in ENTRY_TYPES.items()}
    schemas["test_memory"] = {**MemoryEntry.rules(), "max_batch_recorded": Rule(is_stamp, STAMP_EXPECTED)}
    return schemas


def _describe(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return json.dumps(value) if isinstance(value, (str, bool, type(None))) else repr(value)


def _kernel_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return None
    if not isinstance(value, list):
        return f"{_describe(value)} is neither a string nor a list of {{\"name\": string, \"ms\": number}}"
    for i, item in enumerate(value):
        if not (isinstance(item, dict) and isinstance(item.get("name"), str) and is_number(item.get("ms"))):
            return f"item {i} ({item!r}) is not an object with a string \"name\" and a finite number \"ms\""
    return None


def figure_problem(rules: dict[str, Rule], name: str, value: Any) -> str | None:
    """Why `value` cannot be figure `name` of an entry whose kind has `rules` (``entry_schemas``), or None."""
    if name in ALLOWED_STRUCTURED:
        return _kernel_problem(value)
    if name.endswith(STRING_LIST_SUFFIX):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else f"{_describe(value)} is not a list of strings"
    if not isinstance(value, _SCALAR):
        return f"{_describe(value)} is not a number, string, boolean or null"
    rule = rules.get(name)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{_describe(value)} is not {rule.expected if rule else 'a finite number'}"
    if rule is not None and not rule.check(value):
        return f"{_describe(value)} is not {rule.expected}"
    return None


def validate_entry(test_id: str, entry: Any, path: Path, schemas: dict | None = None) -> None:
    """Raise BaselineError naming `path` and the field where `entry` breaks its kind's schema."""
    where = f"entries.{test_id}"
    if not isinstance(entry, dict):
        raise BaselineError(path, where, "not an object")
    figures = entry.get("figures")
    if not isinstance(figures, dict):
        raise BaselineError(path, f"{where}.figures", "missing or not an object")
    kind = entry_kind(test_id)
    rules = (schemas or entry_schemas()).get(kind, {})
    for name, rule in rules.items():
        if rule.required and name not in figures:
            raise BaselineError(path, f"{where}.figures.{name}", f"missing; a {kind} entry needs {rule.expected} here")
    for name, value in figures.items():
        problem = figure_problem(rules, name, value)
        if problem:
            raise BaselineError(path, f"{where}.figures.{name}", problem)
    software = entry.get("software", {})
    if not isinstance(software, dict):
        raise BaselineError(path, f"{where}.software", "not an object")
    for name, value in software.items():
        if not (value is None or isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))):
            raise BaselineError(path, f"{where}.software.{name}",
                                f"{_describe(value)} is not a string, an integer or null")
    if "recorded" in entry and not is_stamp(entry["recorded"]):
        raise BaselineError(path, f"{where}.recorded", f"{_describe(entry['recorded'])} is not {STAMP_EXPECTED}")
    unknown = sorted(set(entry) - ENTRY_FIELDS)
    if unknown:
        raise BaselineError(path, f"{where}.{unknown[0]}",
                            f"not a field of an entry ({', '.join(sorted(ENTRY_FIELDS))})")


def validate(document: Any, path: Path) -> None:
    """Raise BaselineError on anything but a schema-1 baseline document whose entries each meet their
    kind's schema (``entry_schemas``)."""
    if not isinstance(document, dict):
        raise BaselineError(path, "<top level>", f"expected a JSON object, got {type(document).__name__}")
    version = document.get("schema_version")
    if "schema_version" not in document and isinstance(document.get("benchmarks"), list):
        raise BaselineError(path, None, "is a run JSON (pytest --benchmark-json), not a baseline file "
                                        "(baselines/<gpu-slug>.json); `ampbench report` reads a run")
    if "schema_version" not in document:
        raise BaselineError(path, "schema_version", f"missing; a baseline file holds schema {SCHEMA_VERSION}")
    if version != SCHEMA_VERSION:
        raise BaselineError(
            path, "schema_version", f"is {version!r}; this ampbench reads schema {SCHEMA_VERSION} only"
        )
    if not isinstance(document.get("gpu"), str):
        raise BaselineError(path, "gpu", "missing or not a string")
    entries = document.get("entries")
    if not isinstance(entries, dict):
        raise BaselineError(path, "entries", "missing or not an object")
    schemas = entry_schemas()  # the rules of every kind, read off the entry types once per file
    for test_id, entry in entries.items():
        validate_entry(test_id, entry, path, schemas)
