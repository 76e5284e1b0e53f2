"""What a saved run must hold before the history files it, beyond what a report reads (``results.load_run``):
a report shows a file as it is, the history keeps it for good and learns from it. A run names its GPU
model (its series are filed under it, and its baseline file by its stem), a time no later than a day from
now (the newest run is the level's latest), at least one cell, and only kinds and modes this version
knows. And a run id already in the history is the same run imported again, or a clash: another run
carrying it, which is refused, naming both. Nothing here imports torch or SQLAlchemy."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from ampbench.history.rows import RunRow, iso_utc
from ampbench.modes import MODES
from ampbench.printable import plural
from ampbench.results import KINDS, OtherRecord, PairedRecord, Run, model_slug, slug_problem
from ampbench.results.run import UNNAMED

if TYPE_CHECKING:
    from ampbench.history.store import History

# how far past now a run's time may lie: runners' clocks and time zones disagree by hours, never by days;
# a run dated in the future would stay the newest of its series until that date
FUTURE_SLACK = timedelta(days=1)
# the modes a cell may name: each of the table's, a compiled cell's ("amp_bf16 compiled"), and none (a
# cell whose test id names no mode, as the underflow check's)
KNOWN_MODES = (*MODES, *(f"{m} compiled" for m in MODES), UNNAMED)
# what a cell's device is called where a run names no GPU model: an index, never a model
_DEVICE_INDEX = re.compile(r"(cuda|cpu|hip|mps|xpu)(:\d+)?", re.IGNORECASE)


def run_time(run: Run, now: datetime) -> tuple[str | None, str | None]:
    """(the run's time as the history keeps it, or None; why it cannot be filed, or None)."""
    if not isinstance(run.datetime, str) or not run.datetime.strip():
        return None, "holds no datetime (pytest-benchmark writes when the run was made): the history orders runs by it"
    try:
        when = datetime.fromisoformat(run.datetime.strip().replace("Z", "+00:00"))
    except ValueError:
        return None, f"its datetime {run.datetime[:40]!r} is no ISO 8601 time (as pytest-benchmark writes it)"
    when = when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
    if when > now + FUTURE_SLACK:
        return None, (f"its datetime {run.datetime[:40]} lies in the future (now is {iso_utc(now)[:19]} UTC): it "
                      "would stay the newest run of its series until then")
    return iso_utc(when), None


def _gpu_problems(run: Run) -> list[str]:
    if run.smoke:
        return []
    device = run.machine.get("device")
    if not isinstance(device, str) or not device.strip():
        return ["machine_info.ampbench.device is missing: the run names no GPU model, whose series its cells join "
                f"(its cells name only {run.gpu!r})"]
    if _DEVICE_INDEX.fullmatch(device.strip()):
        return [f"machine_info.ampbench.device {device!r} is a device index, not a GPU model's name"]
    slug = run.machine.get("gpu_slug")
    if slug is None:  # the history gives it the stem its name makes, where the name makes one
        try:
            model_slug(device)
        except ValueError as exc:
            return [f"machine_info.ampbench.device: {exc}"]
        return []
    problem = slug_problem(slug, device)
    return [f"machine_info.ampbench.{problem}"] if problem else []


def _cell_problems(run: Run) -> list[str]:
    if not run.cells:
        return ["holds no cell: every test of its run was skipped, deselected or not ampbench's; nothing to file"]
    problems = []
    filed = [k for k in KINDS if k != PairedRecord.KIND]
    kinds = sorted({c.kind or "(none)" for c in run.cells if isinstance(c, OtherRecord)})
    if kinds:
        problems.append(f"cells of unknown kind {', '.join(kinds)}; the history files {', '.join(filed)}")
    # an A/B run's figures are of two trees at once: no series of one tree's cell may learn from them
    if run.of_kind(PairedRecord):
        problems.append("is an A/B run (ampbench ab): its cells hold head over base, not one tree's figures; the "
                        f"history files runs of the suite ({', '.join(filed)})")
    modes = sorted({str(c.mode) for c in run.cells if c.mode not in KNOWN_MODES})
    if modes:
        problems.append(f"cells of unknown mode {', '.join(modes)}; the modes are {', '.join(MODES)} (and each "
                        "'<mode> compiled')")
    return problems


def admission(run: Run, now: datetime | None = None) -> tuple[str | None, list[str]]:
    """(the run's time as the history keeps it, or None; every reason the history cannot file `run`)."""
    when, problem = run_time(run, now or datetime.now(timezone.utc))
    return when, _gpu_problems(run) + ([problem] if problem else []) + _cell_problems(run)


def _figures(row: RunRow) -> dict[str, dict[str, float]]:
    return {c.test_id: {f.name: f.value for f in c.figures} for c in row.cells}


def clash(history: History, row: RunRow) -> str | None:
    """Why `row` is not the run the history holds under its id, or None where it is (the run the plugin
    appended, or a file imported before). The history's copy may lack a figure the file holds (a pytest
    session leaves implausible ones out), never hold one the file does not, or another value."""
    held = history.run(row.id)
    theirs = history.figures_of_run(row.id)
    ours = _figures(row)
    differences = []
    if held.gpu != row.gpu:
        differences.append(f"GPU {held.gpu!r} there, {row.gpu!r} here")
    if held.card_uuid and row.card_uuid and held.card_uuid != row.card_uuid:
        differences.append(f"card {held.card_uuid} there, {row.card_uuid} here")
    if set(theirs) != set(ours):
        differences.append(f"{plural(len(theirs), 'cell')} there, {len(ours)} here, "
                           f"{len(set(theirs) ^ set(ours))} of them not in both")
    else:
        moved = [(t, name, value, ours[t].get(name)) for t, figures in theirs.items() for name, value in figures.items()
                 if ours[t].get(name) is None or not math.isclose(value, ours[t][name], rel_tol=1e-12)]
        if moved:
            t, name, there, here = moved[0]
            differ = "differs" if len(moved) == 1 else "differ"
            differences.append(f"{plural(len(moved), 'figure')} {differ}, e.g. {name} of {t}: {there:g} there, "
                               f"{'none' if here is None else f'{here:g}'} here")
    if not differences:
        return None
    return (f"run id {row.id} is already in the history {history.name} as another run ({held.source}, "
            f"{held.when[:19]}): {'; '.join(differences)}; nothing of this one written (a run id belongs to one "
            "run: was the file edited, or copied from another?)")
