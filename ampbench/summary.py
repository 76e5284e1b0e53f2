"""The speed cells of a run as one table for the end of pytest's terminal output: a glance at both
speedups, their verdicts and how far each step waited on the host, without opening the JSON.

Torch-free: ``conftest.py`` gathers the ``("ampbench_speed", {...})`` user properties that
``perf/test_speed.py`` attaches to its reports and writes the lines this module makes.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

SPEED_PROPERTY = "ampbench_speed"  # the user property a speed cell reports itself under

# (header, key of the cell's property dict)
COLUMNS = (
    ("model", "model"),
    ("mode", "mode"),
    ("device speedup", "device"),
    ("device verdict", "device_verdict"),
    ("wall speedup", "wall"),
    ("wall verdict", "wall_verdict"),
    ("idle", "idle_share"),
    ("host-bound", "host_bound"),
    ("method", "method"),
)
MISSING = "-"


def _show(key: str, value: object) -> str:
    if value is None:
        return MISSING
    if key == "idle_share":
        # a share of the eager step's wall time the device sat waiting for the host
        return f"{value:.0%}" if isinstance(value, (int, float)) and math.isfinite(value) else MISSING
    if key == "host_bound":
        return "yes" if value else "no"
    return str(value)


def speed_table(cells: Iterable[Mapping[str, object]]) -> list[str]:
    """Lines of a table with one row per speed cell (model, mode, device-time speedup with its
    interval and verdict, wall-clock speedup with its interval and verdict, idle share, host-bound,
    device-time method), in the order given; no lines where no speed cell ran. A missing value
    shows as "-", so a cell from an older test still gets its row."""
    rows = [[_show(key, cell.get(key)) for _, key in COLUMNS] for cell in cells]
    if not rows:
        return []
    headers = [header for header, _ in COLUMNS]
    widths = [max(len(text) for text in column) for column in zip(headers, *rows)]

    def line(texts: list[str]) -> str:
        return "  ".join(text.ljust(width) for text, width in zip(texts, widths)).rstrip()

    title = f"ampbench: speed cells ({len(rows)}), speedups over fp32 with their intervals"
    return [title, line(headers), line(["-" * w for w in widths]), *map(line, rows)]


def speed_cells(reports: Iterable[object]) -> list[Mapping[str, object]]:
    """The speed cells' property dicts of pytest reports, in the order the tests ran (pytest's
    terminal reporter keeps its reports by outcome): those of a test's call phase only, since the
    teardown report repeats the test's user properties."""
    cells = []
    for report in sorted(reports, key=lambda r: getattr(r, "start", 0.0) or 0.0):
        if getattr(report, "when", None) != "call":
            continue
        for name, value in getattr(report, "user_properties", ()) or ():
            if name == SPEED_PROPERTY and isinstance(value, Mapping):
                cells.append(value)
    return cells
