"""Per-GPU baseline files: ``baselines/<gpu-slug>.json``, one versioned JSON document per GPU model.

Layout (schema_version 1)::

    {"schema_version": 1, "gpu": "NVIDIA H100 80GB HBM3",
     "entries": {"test_speed[resnet50-amp_bf16]": {
         "figures": {"speedup": 2.41, "ci_low": 2.40, ...},   # numbers, strings, booleans or null
         "software": {"torch": "2.11.0+cu130", ...},          # what it was recorded on
         "recorded": "2026-11-21T17:02:11Z"}}}

Writes merge entry by entry (an update never drops another test's entry) and are atomic: a temp file
in the same folder, fsync, rename.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
_SCALAR = (int, float, str, bool, type(None))


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and the field."""

    def __init__(self, path: Path, field_name: str, problem: str):
        self.path, self.field = path, field_name
        super().__init__(f"baseline file {path}: field {field_name!r}: {problem}")


def validate(document: Any, path: Path) -> None:
    """Raise BaselineError on anything but a schema-1 baseline document."""
    if not isinstance(document, dict):
        raise BaselineError(path, "<top level>", f"expected a JSON object, got {type(document).__name__}")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BaselineError(
            path, "schema_version", f"is {version!r}; this ampbench reads schema {SCHEMA_VERSION} only"
        )
    if not isinstance(document.get("gpu"), str):
        raise BaselineError(path, "gpu", "missing or not a string")
    entries = document.get("entries")
    if not isinstance(entries, dict):
        raise BaselineError(path, "entries", "missing or not an object")
    for test_id, entry in entries.items():
        where = f"entries.{test_id}"
        if not isinstance(entry, dict):
            raise BaselineError(path, where, "not an object")
        figures = entry.get("figures")
        if not isinstance(figures, dict):
            raise BaselineError(path, f"{where}.figures", "missing or not an object")
        for name, value in figures.items():
            if not isinstance(value, _SCALAR):
                raise BaselineError(path, f"{where}.figures.{name}", f"not a number, string, boolean or null: {value!r}")
        if not isinstance(entry.get("software", {}), dict):
            raise BaselineError(path, f"{where}.software", "not an object")


def load_document(path: Path) -> dict:
    try:
        text = path.read_text()
    except OSError as exc:
        raise BaselineError(path, "<file>", f"cannot be read: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(path, "<file>", f"is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    validate(document, path)
    return document


@dataclass
class BaselineStore:
    """The baselines of one GPU model, plus what this run wants to record into them."""

    path: Path
    gpu: str
    entries: dict[str, dict] = field(default_factory=dict)
    exists: bool = False
    pending: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def open(cls, directory: Path, gpu: str, slug: str) -> "BaselineStore":
        path = Path(directory) / f"{slug}.json"
        if not path.exists():
            return cls(path=path, gpu=gpu)
        document = load_document(path)
        return cls(path=path, gpu=gpu, entries=document["entries"], exists=True)

    def figures(self, test_id: str) -> dict | None:
        entry = self.entries.get(test_id)
        return entry["figures"] if entry else None

    def software(self, test_id: str) -> dict | None:
        entry = self.entries.get(test_id)
        return entry.get("software") if entry else None

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        """Queue an entry for `write()`; nothing touches the disk until then."""
        for name, value in figures.items():
            if not isinstance(value, _SCALAR):
                raise TypeError(f"{test_id}: figure {name!r} must be a scalar, got {type(value).__name__}")
        self.pending[test_id] = {
            "figures": dict(figures),
            "software": dict(software),
            "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    def write(self) -> Path:
        """Merge pending entries into the file as it is on disk now, atomically."""
        current = load_document(self.path)["entries"] if self.path.exists() else {}
        merged = merge_entries(current, self.pending)
        document = {"schema_version": SCHEMA_VERSION, "gpu": self.gpu, "entries": merged}
        write_atomic(self.path, document)
        self.entries, self.pending, self.exists = merged, {}, True
        return self.path


def merge_entries(current: dict[str, dict], updates: dict[str, dict]) -> dict[str, dict]:
    """Entries of `current` with those of `updates` replacing or adding, sorted by test id."""
    merged = dict(current)
    merged.update(updates)
    return dict(sorted(merged.items()))


def write_atomic(path: Path, document: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# How a speed cell was measured, as baselines store it. Entries recorded before these were stored
# were measured with these values.
MEASUREMENT_DEFAULTS: dict[str, object] = {"cudnn_benchmark": True, "block_seconds": 0.1}


def measurement_mismatch(baseline: dict, measured_with: dict[str, object]) -> str | None:
    """A sentence naming each setting this run measures with that differs from the baseline's, or None."""
    differ = [
        f"{name} {baseline.get(name, MEASUREMENT_DEFAULTS.get(name))} in the baseline, {value} here"
        for name, value in measured_with.items()
        if baseline.get(name, MEASUREMENT_DEFAULTS.get(name)) != value
    ]
    if not differ:
        return None
    return ("measured differently from its baseline (" + "; ".join(differ) + "): a speedup that moves may "
            "owe it to that, not to the software under test")
