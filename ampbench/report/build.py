"""Every file of a report made in memory (build_report), then written all at once (write_report): the
folder is swapped in atomically and lists what it wrote in its marker file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from ampbench.distributed.processes import alive
from ampbench.files.write import write_error
from ampbench.progress import QUIET, Progress
from ampbench.report.charts import comparison_chart, run_charts
from ampbench.report.html import render_html
from ampbench.report.markdown import render_markdown
from ampbench.results import Run

if TYPE_CHECKING:  # compare imports the run reader; rendering only needs its types
    from ampbench.report.compare import Comparison
    from ampbench.report.trends import Trends


# ---------------------------------------------------------------------------------------------------
# writing


def build_report(run: Run, comparison: "Comparison | None" = None,
                 failures: Sequence[tuple[str, str]] = (), progress: Progress = QUIET,
                 trends: "Trends | None" = None, paired_table: Sequence[str] = ()) -> dict[str, bytes]:
    """Every file of the report, by name, in memory: nothing touches the disk until all are made.
    `trends` (``report.trends.read_trends``) adds a trend chart per cell and the tolerances learned;
    `paired_table` (``render_markdown``'s) leads summary.md."""
    progress("drawing the charts")
    charts = run_charts(run)
    compare_charts = []
    if comparison is not None:
        chart = comparison_chart(comparison)
        if chart is not None:
            compare_charts.append(chart)
    trend_charts = []
    if trends is not None:
        from ampbench.report.trends import trend_charts as draw

        progress(f"drawing {len(trends.cells)} trend charts")
        trend_charts = draw(trends)
    files: dict[str, bytes] = {c.filename: c.png for c in [*charts, *compare_charts, *trend_charts]}
    progress("rendering index.html")
    files["index.html"] = render_html(run, charts, comparison, compare_charts, failures,
                                      trends, trend_charts).encode("utf-8")
    progress("rendering summary.md")
    files["summary.md"] = render_markdown(run, comparison, failures, trends, paired_table).encode("utf-8")
    return files


REPORT_MARKER = ".ampbench-report.json"  # lists the files a report wrote: all it may ever replace


def _foreign_entries(directory: Path) -> list[str]:
    """What in an existing `directory` a report did not write, by its marker: every entry when the marker
    is missing or unreadable (a folder without one was not made by ``ampbench report``)."""
    entries = sorted(directory.iterdir(), key=lambda p: p.name)
    if not entries:
        return []
    owned: set[str] = set()
    try:
        marker = json.loads((directory / REPORT_MARKER).read_text(encoding="utf-8"))
        listed = marker.get("files") if isinstance(marker, dict) else None
        if isinstance(listed, list):
            owned = {n for n in listed if isinstance(n, str) and n == Path(n).name}
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    foreign = []
    for p in entries:
        if p.name == REPORT_MARKER and owned:
            continue
        # a folder or link under one of our names is still not ours to delete
        if p.name in owned and p.is_file() and not p.is_symlink():
            continue
        foreign.append(p.name + ("/" if p.is_dir() and not p.is_symlink() else ""))
    return foreign


def _clean_leftovers(directory: Path, parent: Path) -> None:
    """Remove what a report into `directory` killed halfway left beside it: the temp folders
    ``.<name>.<pid>.<random>.tmp`` and ``.old`` whose writer (its pid) is no longer running. Where the kill
    came between moving the previous report aside and the new one in, the previous one is put back first."""
    prefix = f".{directory.name}."
    for entry in sorted(parent.iterdir(), key=lambda p: p.name):
        name = entry.name
        if not (name.startswith(prefix) and name.endswith((".tmp", ".old"))):
            continue
        pid = name[len(prefix):].split(".", 1)[0]
        if not pid.isascii() or not pid.isdigit() or int(pid) <= 0 or alive(int(pid)):
            continue
        if not entry.is_dir() or entry.is_symlink():
            continue
        previous = entry / "report"
        if name.endswith(".old") and not directory.exists() and previous.is_dir() and not previous.is_symlink():
            os.replace(previous, directory)
        shutil.rmtree(entry, ignore_errors=True)


def write_report(directory: Path | str, files: Mapping[str, bytes]) -> Path:
    """Write the report into a temp folder beside `directory`, then swap it in, so a reader never
    sees half a report and a failure leaves the previous one in place. The report lists its files in
    REPORT_MARKER; an existing `directory` is replaced only if it is empty or holds nothing but what
    its marker lists, so files of anyone else are never deleted. The temp folders of a report into the
    same folder that was killed halfway are removed first. Returns the folder."""
    directory = Path(directory)
    if REPORT_MARKER in files or any(name != Path(name).name for name in files):
        raise ValueError(f"report file names must be plain names other than {REPORT_MARKER}: {sorted(files)}")
    if directory.is_symlink():
        raise FileExistsError(f"{directory} is a symbolic link; give the folder itself as -o")
    if directory.exists():
        if not directory.is_dir():
            raise FileExistsError(f"{directory} exists and is not a directory; choose another -o")
        foreign = _foreign_entries(directory)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise FileExistsError(
                f"{directory} does not look like an ampbench report: it holds {shown}, which no ampbench "
                f"report there wrote (by its {REPORT_MARKER}); nothing was changed. Choose another -o, or move "
                "those away"
            )
    parent = directory.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _clean_leftovers(directory, parent)
        return _swap_in(directory, parent, files)
    except OSError as exc:
        raise write_error(exc, directory) from None  # the folder asked for, not a temp folder beside it


def _swap_in(directory: Path, parent: Path, files: Mapping[str, bytes]) -> Path:
    # the writer's pid in the temp folders' names tells a later report which ones were left by a kill
    prefix = f".{directory.name}.{os.getpid()}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=parent))
    old = None
    swapped = False
    try:
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        marker = {"ampbench_report": 1, "files": sorted(files)}
        (tmp / REPORT_MARKER).write_bytes(json.dumps(marker, indent=1).encode("utf-8"))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a report is meant to be shared
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=prefix, suffix=".old", dir=parent))
            os.replace(directory, old / "report")
        os.replace(tmp, directory)
        swapped = True
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and (old / "report").exists() and not directory.exists():
            os.replace(old / "report", directory)
        raise
    finally:
        # the previous report goes only once the new one is in place or the old one is back
        if old is not None and (swapped or not (old / "report").exists()):
            shutil.rmtree(old, ignore_errors=True)
    return directory
