"""Per-GPU baseline files: ``baselines/<gpu-slug>.json``, one versioned JSON document per GPU model.

Layout (schema_version 1)::

    {"schema_version": 1, "gpu": "NVIDIA H100 80GB HBM3",
     "entries": {"test_speed[resnet50-amp_bf16]": {
         "figures": {"speedup": 2.41, "ci_low": 2.40, ...},   # finite numbers, strings, booleans or null
                                                              # ("kernels" also a list of {"name", "ms"})
         "software": {"torch": "2.11.0+cu130", ...},          # what it was recorded on
         "recorded": "2026-11-21T17:02:11Z"}}}

Each kind of entry (the test id's name before "[") has its figures checked by
``schema.entry_schemas`` on load and on record. Writes merge entry by entry (an update never
drops another test's entry; CARRIED_FIGURES names the figures an update that did not measure them keeps
from the entry it replaces) and are atomic: a temp file in the same folder, fsync, rename.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping

from ampbench.baselines.entries import FlatEntry, entry_of, entry_reference
from ampbench.baselines.schema import (  # noqa: F401 - the file format's names, read from here too
    SCHEMA_VERSION,
    STAMP_FORMAT,
    BaselineError,
    entry_kind,
    validate,
    validate_entry,
)
from ampbench.files.read import DuplicateKey, OverlongInteger, UnreadableFile, parse_json, read_text
from ampbench.files.write import write_atomic
from ampbench.results.clusters import is_stem
from ampbench.results.ratios import RatioKind
from ampbench.tolerance import Reference

# Figures an update of an entry keeps from the entry it replaces, by kind of entry: where the update has
# none of a group's figures, the old entry's are carried over whole, stamped `<first name>_recorded` with
# when they were measured. The quick tier measures a memory cell at its default batch only: its
# recording must not erase the largest batch a full-tier recording stored, or every later run would
# search blind and hold no largest batch until the next full recording. The cap and allocator settings
# travel with the batch, so that it is still judged by the budget it was found under.
CARRIED_FIGURES: dict[str, tuple[str, ...]] = {
    "test_memory": ("max_batch", "max_batch_ratio", "max_batch_step", "max_batch_limited", "max_batch_throughput",
                    "max_batch_throughput_ratio", "cap_bytes", "alloc_conf"),
}


def carried_stamp(group: tuple[str, ...]) -> str:
    """The figure that says when a carried group was measured: 'max_batch_recorded'."""
    return f"{group[0]}_recorded"


def carry_figures(test_id: str, old: dict | None, new: dict) -> dict:
    """`new`, an entry replacing `old`, with the groups of CARRIED_FIGURES it lacks taken from `old`."""
    group = CARRIED_FIGURES.get(entry_kind(test_id))
    if group is None or old is None or any(name in new["figures"] for name in group):
        return new
    kept = {name: old["figures"][name] for name in group if name in old["figures"]}
    if not kept:
        return new
    stamp = carried_stamp(group)
    recorded = old["figures"].get(stamp, old.get("recorded"))  # carried before: when it was measured
    if isinstance(recorded, str):  # an entry written by hand may have no stamp: then none is made up
        kept[stamp] = recorded
    return {**new, "figures": {**new["figures"], **kept}}


def load_document(path: Path) -> dict:
    try:
        text = read_text(path, "a baseline file (<gpu-slug>.json, as --perf-update-baselines writes it)")
    except UnreadableFile as exc:
        raise BaselineError(path, "<file>", exc.problem) from None
    try:
        document = parse_json(text)
    except DuplicateKey as exc:
        raise BaselineError(path, exc.key, exc.problem) from None
    except OverlongInteger as exc:
        raise BaselineError(path, "<file>", exc.problem) from None
    except json.JSONDecodeError as exc:
        stripped = text.rstrip()
        # an error at the very end, or an object that never closes, means the text stops early (a copy
        # cut short, a hand edit)
        truncated = exc.pos >= len(stripped) - 1 or (stripped[:1] == "{" and not stripped.endswith("}"))
        problem = (f"is truncated: the JSON stops at line {stripped.count(chr(10)) + 1}" if truncated
                   else f"is not valid JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno})")
        raise BaselineError(path, "<file>", problem) from None
    except RecursionError:
        raise BaselineError(path, "<file>", "is nested too deeply to be a baseline file") from None
    validate(document, path)
    return document


@dataclass
class BaselineFile:
    """The baselines of one GPU model, plus what this run wants to record into them."""

    path: Path
    gpu: str
    entries: dict[str, dict] = field(default_factory=dict)
    exists: bool = False
    pending: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def open(cls, directory: Path, gpu: str, slug: str) -> "BaselineFile":
        if not is_stem(slug):  # '../x' or '/etc/x' would name a file outside `directory`
            raise BaselineError(Path(directory) / f"{slug}.json", None,
                                f"{slug!r} is no baseline file's stem (lowercase letters, digits and dashes, as a GPU "
                                "model's name makes them): nothing is read or written by it")
        path = Path(directory) / f"{slug}.json"
        if not path.exists():
            return cls(path=path, gpu=gpu)
        document = load_document(path)
        return cls(path=path, gpu=gpu, entries=document["entries"], exists=True)

    def figures(self, test_id: str) -> dict | None:
        entry = self.entries.get(test_id)
        return entry["figures"] if entry else None

    def entry(self, test_id: str) -> FlatEntry | None:
        return entry_of(test_id, self.figures(test_id))

    def reference(self, test_id: str, kind: RatioKind, floor: float) -> Reference | None:
        """What the cell's ratio of `kind` is judged against: its entry in this file under the user's
        `floor`; None where the entry holds no such figure."""
        entry = self.entry(test_id)
        return entry_reference(kind, floor, entry.ratio(kind) if entry is not None else None, str(self.path))

    def software(self, test_id: str) -> dict | None:
        entry = self.entries.get(test_id)
        return entry.get("software") if entry else None

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        """Queue an entry for `write()`; nothing touches the disk until then. An entry its kind's schema
        refuses raises BaselineError here, in the test that recorded it: written, it would stop every
        later run at start-up."""
        entry = {
            "figures": dict(figures),
            "software": dict(software),
            "recorded": datetime.now(timezone.utc).strftime(STAMP_FORMAT),
        }
        validate_entry(test_id, entry, self.path)
        self.pending[test_id] = entry

    def write(self) -> Path:
        """Merge pending entries into the file as it is on disk now, atomically."""
        current = load_document(self.path)["entries"] if self.path.exists() else {}
        merged = merge_entries(current, self.pending)
        document = {"schema_version": SCHEMA_VERSION, "gpu": self.gpu, "entries": merged}
        write_atomic(self.path, document)
        self.entries, self.pending, self.exists = merged, {}, True
        return self.path


def merge_entries(current: dict[str, dict], updates: dict[str, dict]) -> dict[str, dict]:
    """Entries of `current` with those of `updates` replacing or adding, sorted by test id; an update
    keeps the figures of its old entry that CARRIED_FIGURES names and it did not measure."""
    merged = dict(current)
    merged.update({test_id: carry_figures(test_id, current.get(test_id), entry) for test_id, entry in updates.items()})
    return dict(sorted(merged.items()))


def latest_entries(documents: list[dict]) -> tuple[dict[str, dict], list[int]]:
    """Per test id, the entry recorded last among `documents` (the ``recorded`` stamps are UTC ISO 8601
    and sort as strings; a tie keeps the earlier document's), sorted by test id, and how many of those
    entries each document gave."""
    best: dict[str, tuple[str, int, dict]] = {}
    for index, document in enumerate(documents):
        for test_id, entry in document["entries"].items():
            stamp = entry.get("recorded", "")
            if test_id not in best or stamp > best[test_id][0]:
                best[test_id] = (stamp, index, entry)
    given = [0] * len(documents)
    for _, index, _ in best.values():
        given[index] += 1
    return {test_id: entry for test_id, (_, _, entry) in sorted(best.items())}, given


def validate_directory(directory: Path) -> list[Path]:
    """Every ``*.json`` in `directory` (none where it does not exist), each loaded and validated;
    raises BaselineError at the first that is not a valid baseline document."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    paths = sorted(directory.glob("*.json"))
    for path in paths:
        load_document(path)
    return paths


# How a speed cell was measured, as baselines store it. Entries recorded before these were stored
# were measured with these values.
MEASUREMENT_DEFAULTS: dict[str, object] = {"cudnn_benchmark": True, "block_seconds": 0.1}


def measurement_mismatch(baseline: FlatEntry, measured_with: Mapping[str, object]) -> str | None:
    """A sentence naming each setting this run measures with that differs from the `baseline` entry's,
    or None."""
    recorded = {**MEASUREMENT_DEFAULTS, **baseline.measured_with()}
    differ = [
        f"{name} {recorded.get(name)} in the baseline, {value} here"
        for name, value in measured_with.items()
        if recorded.get(name) != value
    ]
    if not differ:
        return None
    return ("measured differently from its baseline (" + "; ".join(differ) + "): a speedup that moves may "
            "owe it to that, not to the software under test")
