"""Asking the system about a process by its pid: whether it still runs, and its /proc fields. The
torchrun launches (``distributed.launch``) and the report's stale-folder cleanup (``report.build``) ask
the same questions."""

from __future__ import annotations

import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...); None where unreadable.
    The name is in parentheses and may hold spaces and parentheses itself, hence the last ")"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs; a zombie awaiting its parent counts as gone. A process that cannot be asked
    (another user's) counts as running: not ours to touch."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    fields = stat_fields(pid)
    return not fields or fields[0] != "Z"
