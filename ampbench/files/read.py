"""Reading a file a user named: one-line problems that name what is wrong with it, never an errno
dump, a traceback or a read that waits for ever (a FIFO). Importable without torch or pytest."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

# what a path is, where it is no regular file
_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(mode: int) -> str | None:
    """What a file of `mode` (os.stat's st_mode) is where it is no regular file ("a FIFO (named pipe)"),
    or None for a regular file."""
    return next((kind for test, kind in _NOT_REGULAR if test(mode)), None if stat.S_ISREG(mode) else "no regular file")


class UnreadableFile(ValueError):
    """A file that cannot be read as text; ``problem`` completes "<path>: ..."."""

    def __init__(self, path: Path | str, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")


class DuplicateKey(ValueError):
    """A JSON object that names one key twice: a reader keeps one of the two values, without a word."""

    problem = "appears twice in one object, and a reader keeps only one of its values"

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"key {key!r} {self.problem}")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``'s object_pairs_hook: the object as a dict, or DuplicateKey."""
    document = dict(pairs)  # at C speed: a run of 10,000 cells holds hundreds of thousands of objects
    if len(document) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return document


class OverlongInteger(ValueError):
    """A JSON integer no figure can be: beyond a float's range, where every reader of a figure would fail
    on it (and Python's int-to-text limit refuses to read one of over 4300 digits at all)."""

    def __init__(self, text: str):
        digits = len(text.lstrip("-"))
        self.problem = (f"holds an integer of {digits} digits ({text[:12]}...), beyond any number a run or "
                        "baseline holds: the file is damaged or not ampbench output")
        super().__init__(self.problem)


# the longest integer a float holds: 309 digits
_FLOAT_DIGITS = len(str(int(sys.float_info.max)))


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > _FLOAT_DIGITS:
        raise OverlongInteger(text)
    value = int(text)
    if abs(value) > sys.float_info.max:
        raise OverlongInteger(text)
    return value


def parse_json(text: str) -> Any:
    """`text` as a JSON document whose objects name each key once (DuplicateKey) and whose integers a
    float holds (OverlongInteger); json.JSONDecodeError where it is no JSON, RecursionError where it is
    nested beyond Python's stack."""
    return json.loads(text, object_pairs_hook=unique_keys, parse_int=_integer)


def _open_regular(path: Path, what: str) -> int:
    """A read-only descriptor of `path`, a regular file: checked before it is opened (opening a FIFO
    for reading waits for a writer), and opened without blocking should it change in between."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise UnreadableFile(path, "no such file") from None
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror or exc}") from None
    kind = special_kind(mode)
    if kind == "a directory":
        raise UnreadableFile(path, f"is a directory; give {what}")
    if kind is not None:
        raise UnreadableFile(path, f"is {kind}, not a regular file; give {what}")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for something else since the check
        os.close(fd)
        raise UnreadableFile(path, f"is not a regular file; give {what}")
    return fd


def read_text(path: Path | str, what: str, empty_means: str | None = None) -> str:
    """The UTF-8 text of `path`; UnreadableFile where it is missing, not a regular file (a directory,
    a FIFO, a device), unreadable, not UTF-8 text or empty. `what` says what the file should have been
    ("a baseline file"), `empty_means` what an empty one says about how it came about, where known."""
    path = Path(path)
    fd = _open_regular(path, what)
    try:
        with os.fdopen(fd, "r", encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"is not UTF-8 text (byte {exc.start}), so not {what}") from None
    if not text.strip():
        raise UnreadableFile(path, f"is empty; {empty_means}" if empty_means else f"is empty, so not {what}")
    return text
