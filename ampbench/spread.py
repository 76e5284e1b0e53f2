"""Each speed cell's spread between independent runs, learned from saved runs into its baseline entry.

A run's own 99% interval covers its rounds, which share one process and one card; between processes
and cards the same cell moves further (1-5% between H100s). ``learn`` gathers, per speed entry of a
baseline file, the recording's speedup and the speedup of every saved run of the same software,
measured the same way, and ``with_spread`` stores their log standard deviation in the entry as
``between_run_sd`` (with ``between_run_count`` values behind it). The device-time speedup is learned
in the same pass into ``device_between_run_sd`` and ``device_between_run_count`` (``FIGURES``). The
suite then reports each speedup's interval across runs too (``stats.across_runs``).

    ampbench spread baselines/nvidia-h100-80gb-hbm3.json run1.json run2.json ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ampbench.baselines import measurement_mismatch
from ampbench.report.run import Cell, Run
from ampbench.stats import finite_number, log_sd
from ampbench.verdict import DEFAULT_TOLERANCE, Verdict, tolerance_for, trusted_between_run_sd

# what must match between a baseline entry's `software` and a run's machine_info["ampbench"] for the
# run to measure the same thing: the card model and every layer of software under test
SOFTWARE_KEYS = ("device", "capability", "driver", "torch", "cuda", "cudnn")
# the compiler and fp8 stack (Inductor ships with torch): compared where the entry records them, since an
# entry without them names no version to hold a run to
COMPILE_KEYS = ("triton", "torchao")


@dataclass(frozen=True)
class Figure:
    """A speedup whose between-run spread is learned: where a run cell and a baseline entry keep it,
    and where the entry stores its spread."""

    key: str  # the speedup in a run cell's extra_info and in the entry's figures
    sd_key: str  # the entry's figure for the standard deviation of ln(speedup)
    count_key: str  # the entry's figure for how many values it came from
    label: str  # what messages call it
    method_key: str | None = None  # a figure that must have been measured the same way in the run and the entry


WALL = Figure("speedup", "between_run_sd", "between_run_count", "wall-clock speedup")
DEVICE = Figure("device_speedup", "device_between_run_sd", "device_between_run_count", "device-time speedup",
                method_key="device_method")
FIGURES = (WALL, DEVICE)

# the figures this module owns in a speed entry
SPREAD_FIGURES = (WALL.sd_key, WALL.count_key)
DEVICE_SPREAD_FIGURES = (DEVICE.sd_key, DEVICE.count_key)


@dataclass(frozen=True)
class CellSpread:
    test_id: str
    # the recording's speedup first, then one per card: the geometric mean of that card's runs (a run
    # whose machine_info names no card counts as a card of its own)
    speedups: tuple[float, ...]

    @property
    def sd(self) -> float:
        """Standard deviation of ln(speedup) over the recording and the runs."""
        return log_sd(self.speedups)


@dataclass
class Learned:
    # per figure key, the entries with at least one run beside the recording
    figures: dict[str, dict[str, CellSpread]] = field(default_factory=lambda: {f.key: {} for f in FIGURES})
    left_out: list[tuple[str, str, str]] = field(default_factory=list)  # (run, test id, why) of run cells that do not count

    @property
    def cells(self) -> dict[str, CellSpread]:
        """The wall-clock speedup's spreads."""
        return self.figures[WALL.key]

    @property
    def device_cells(self) -> dict[str, CellSpread]:
        """The device-time speedup's spreads."""
        return self.figures[DEVICE.key]


def software_difference(entry_software: Mapping, machine: Mapping) -> str | None:
    """A sentence naming what differs between a baseline entry's software and a run's, or None."""
    keys = SOFTWARE_KEYS + tuple(k for k in COMPILE_KEYS if k in entry_software)
    differ = [f"{key} {entry_software.get(key)} in the baseline, {machine.get(key)} in the run"
              for key in keys if str(entry_software.get(key)) != str(machine.get(key))]
    return "other software: " + "; ".join(differ) if differ else None


def _why_not(entry: Mapping, run: Run, cell: Cell) -> str | None:
    """Why `cell` of `run` is no sample of the cell that `entry` recorded, or None if it is one."""
    speedup = cell.number("speedup")
    if speedup is None or speedup <= 0:
        return "no speedup (the test failed before measuring one)"
    if cell.get("recording") is True:
        return "this run recorded the baseline, whose speedup is counted already"
    if cell.verdict == Verdict.REGRESSION.value:
        return "its verdict was a regression: a changed cell is no sample of its run-to-run spread"
    software = software_difference(entry.get("software") or {}, run.machine)
    if software:
        return software
    measured_with = {name: cell.get(name) for name in ("cudnn_benchmark", "block_seconds")}
    return measurement_mismatch(entry["figures"], measured_with)


def _figure_why_not(figure: Figure, entry: Mapping, cell: Cell) -> tuple[bool, str | None]:
    """(whether `cell` gives `figure` a value, why not where that is worth saying). An entry or a cell
    without the figure (recorded or run before device time was measured) silently gives nothing."""
    recorded, measured = finite_number(entry["figures"].get(figure.key)), cell.number(figure.key)
    if recorded is None or recorded <= 0 or measured is None or measured <= 0:
        return False, None
    if figure.method_key is not None:
        ours, theirs = cell.get(figure.method_key), entry["figures"].get(figure.method_key)
        if ours != theirs:
            return False, (f"{figure.label} measured by {ours} in the run and by {theirs} in the baseline: "
                           "another measurement, not a sample of its spread")
    return True, None


def _per_card(recorded: float, by_card: Mapping[str, list[float]]) -> tuple[float, ...]:
    """Runs on one card share that card's offset, so they are one sample of the spread between cards,
    not several: each card's runs are pooled into their geometric mean."""
    return (recorded, *(v[0] if len(v) == 1 else math.exp(sum(map(math.log, v)) / len(v)) for v in by_card.values()))


def learn(entries: Mapping[str, Mapping], runs: Sequence[Run]) -> Learned:
    """Each speed entry's speedups (``FIGURES``) across the recording and the cards of `runs`, with why
    any run's cell does not count. A run given twice (the same pytest-benchmark datetime) counts once."""
    learned = Learned()
    samples: dict[str, dict[str, dict[str, list[float]]]] = {f.key: {} for f in FIGURES}
    seen: dict[str, str] = {}
    for run in runs:
        name = str(run.path)
        if run.datetime and run.datetime in seen:
            learned.left_out.append((name, "*", f"the same run as {seen[run.datetime]} (same datetime)"))
            continue
        if run.datetime:
            seen[run.datetime] = name
        card = str(run.machine.get("uuid") or f"run {name}")
        for cell in run.of_kind("speed"):
            entry = entries.get(cell.test_id)
            if entry is None or finite_number(entry["figures"].get("speedup")) is None:
                learned.left_out.append((name, cell.test_id, "no speed entry in the baseline file"))
                continue
            why = _why_not(entry, run, cell)
            if why:
                learned.left_out.append((name, cell.test_id, why))
                continue
            for figure in FIGURES:
                counts, why = _figure_why_not(figure, entry, cell)
                if why:
                    learned.left_out.append((name, cell.test_id, why))
                if counts:
                    samples[figure.key].setdefault(cell.test_id, {}).setdefault(card, []).append(cell.number(figure.key))
    for figure in FIGURES:
        learned.figures[figure.key] = {
            test_id: CellSpread(test_id, _per_card(float(entries[test_id]["figures"][figure.key]), by_card))
            for test_id, by_card in sorted(samples[figure.key].items())
        }
    return learned


def with_spread(document: Mapping, learned: Learned) -> dict:
    """A copy of the baseline `document` whose learned entries carry the between-run spread of each
    figure learned for them; an entry's `recorded` stamp is kept, since its own figures are unchanged."""
    entries = {}
    for test_id, entry in document["entries"].items():
        figures = dict(entry["figures"])
        for figure in FIGURES:
            spread = learned.figures[figure.key].get(test_id)
            if spread is not None:
                figures.update({figure.sd_key: spread.sd, figure.count_key: len(spread.speedups)})
        if finite_number(figures.get("device_speedup")) is not None:
            # what the device verdict will now use under the default floor, so the file says what is guarded
            figures["device_tolerance"] = tolerance_for(DEFAULT_TOLERANCE, figures.get("device_noise"),
                                                        trusted_between_run_sd(figures, "device_"))
        if figures != entry["figures"]:
            entry = dict(entry, figures=figures)
        entries[test_id] = entry
    return dict(document, entries=entries)


def carried_device(previous: Mapping | None, comparable: bool) -> dict:
    """As ``carried``, for the device-time speedup's spread: kept only where the previous entry's
    device time was measured the same way (`comparable`)."""
    if previous is None or not comparable:
        return {}
    return {name: previous[name] for name in DEVICE_SPREAD_FIGURES if name in previous}


def carried(previous: Mapping | None, comparable: bool) -> dict:
    """The spread figures a re-recorded entry keeps: its old entry's, when that was recorded on the
    same software, measured the same way (``speed.comparable_recording``), else none, because a new
    version's spread must be learned from its own runs."""
    if previous is None or not comparable:
        return {}
    return {name: previous[name] for name in SPREAD_FIGURES if name in previous}
