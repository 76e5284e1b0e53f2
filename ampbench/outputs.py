"""Where a run's outputs may go, by rules the suite's run and the ``ampbench`` command share: an output
never replaces one of the suite's own inputs (the run history, a baseline file, a test module), and a
store the run appends to outlives the run. Importable without pytest, torch or SQLAlchemy."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

# the keys pytest-benchmark writes at the top of its JSON, the first of them first (machine_info); a file
# that opens with one of them is a run's JSON, which a new run's may replace, and so is an empty object
_RUN_JSON_HEAD = re.compile(rb'\A\s*\{\s*(\}\s*\Z|"(machine_info|commit_info|benchmarks|datetime|version)"\s*:)')
_HEAD_BYTES = 4096


def memory_store_problem(store: str) -> str | None:
    """Why `store` (a history's path or database URL) cannot keep a run: an in-memory SQLite database
    (``sqlite://``, ``sqlite:///:memory:``, a ``file::memory:`` or ``mode=memory`` URI) is gone when its
    connection closes, so whatever is appended to it is lost; None for any other store."""
    text = store.strip()
    scheme, sep, _ = text.partition("://")
    if not sep or not scheme.lower().startswith("sqlite"):
        return None  # a path names a file; another database keeps what it is given
    parts = urlsplit(text)
    database = parts.path[1:] if parts.path.startswith("/") else parts.path
    query = {k.lower(): [v.lower() for v in vs] for k, vs in parse_qs(parts.query).items()}
    if (not database or database == ":memory:" or database.startswith("file::memory:")
            or "memory" in query.get("mode", []) or "mode=memory" in database.lower()):
        return (f"history store {text!r}: an in-memory SQLite database keeps nothing once the run is over; "
                "give a file (a path or sqlite:///PATH)")
    return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


# the files SQLite keeps beside a database: where one lies beside a file, the file is that database, even
# an empty one (a store whose writer has not checkpointed yet holds its runs in the -wal alone)
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def _is_run_json(path: Path) -> bool:
    """Whether `path` holds what a run's --benchmark-json wrote, or nothing at all (an empty file made to
    be written, as ``mktemp`` makes one, or an empty JSON object), and is no SQLite database."""
    if any(Path(f"{path}{suffix}").exists() for suffix in SQLITE_SIDE_FILES):
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError:
        return False  # unreadable: nothing says it is a run's, so it is kept
    return not head.strip() or bool(_RUN_JSON_HEAD.match(head))


def replaced_input(target: Path, files: Sequence[tuple[str, Path]],
                   folders: Sequence[tuple[str, Path]]) -> str | None:
    """What writing a run's JSON to `target` would replace that is no run's JSON, in words, or None.

    `files` are (what it is, path) of the inputs the run reads or appends to (the history), whether or not
    they exist yet; `folders` are (what it is, folder) whose every file is such an input (the baseline
    folder). Past those, an existing file is replaced only where it is a run's JSON (``_is_run_json``):
    a test module, a database or another tool's file is never a run's output. Links are followed: a link
    to an input is that input."""
    real = _real(target)
    for what, path in files:
        if real == _real(path):
            return f"{what} {path}"
    for what, folder in folders:
        if real.is_relative_to(_real(folder)):
            return f"{target}, a file in {what} {folder}"
    if real.is_file() and not _is_run_json(real):
        return f"{target}, an existing file that is no benchmark JSON of an earlier run"
    return None
