"""Each speed cell's spread between independent runs, learned from saved runs into its baseline entry.

A run's own 99% interval covers its rounds, which share one process and one card; between processes
and cards the same cell moves further (1-5% between H100s). ``learn`` gathers, per speed entry of a
baseline file, the recording's speedup and the speedup of every saved run of the same software,
measured the same way, and ``with_spread`` stores their log standard deviation in the entry as
``between_run_sd`` (with ``between_run_count`` values behind it). The suite then reports each
speedup's interval across runs too (``stats.across_runs``).

    ampbench spread baselines/nvidia-h100-80gb-hbm3.json run1.json run2.json ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ampbench.baselines import measurement_mismatch
from ampbench.report import Cell, Run
from ampbench.stats import finite_number, log_sd
from ampbench.verdict import Verdict

# what must match between a baseline entry's `software` and a run's machine_info["ampbench"] for the
# run to measure the same thing: the card model and every layer of software under test
SOFTWARE_KEYS = ("device", "capability", "driver", "torch", "cuda", "cudnn")
# the figures this module owns in a speed entry
SPREAD_FIGURES = ("between_run_sd", "between_run_count")


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
    cells: dict[str, CellSpread] = field(default_factory=dict)  # entries with at least one run beside the recording
    left_out: list[tuple[str, str, str]] = field(default_factory=list)  # (run, test id, why) of run cells that do not count


def software_difference(entry_software: Mapping, machine: Mapping) -> str | None:
    """A sentence naming what differs between a baseline entry's software and a run's, or None."""
    differ = [f"{key} {entry_software.get(key)} in the baseline, {machine.get(key)} in the run"
              for key in SOFTWARE_KEYS if str(entry_software.get(key)) != str(machine.get(key))]
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


def _per_card(recorded: float, by_card: Mapping[str, list[float]]) -> tuple[float, ...]:
    """Runs on one card share that card's offset, so they are one sample of the spread between cards,
    not several: each card's runs are pooled into their geometric mean."""
    return (recorded, *(v[0] if len(v) == 1 else math.exp(sum(map(math.log, v)) / len(v)) for v in by_card.values()))


def learn(entries: Mapping[str, Mapping], runs: Sequence[Run]) -> Learned:
    """The speedups of each speed entry across the recording and the cards of `runs`, with why any
    run's cell does not count. A run given twice (the same pytest-benchmark datetime) counts once."""
    learned = Learned()
    samples: dict[str, dict[str, list[float]]] = {}
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
            samples.setdefault(cell.test_id, {}).setdefault(card, []).append(cell.number("speedup"))
    learned.cells = {
        test_id: CellSpread(test_id, _per_card(float(entries[test_id]["figures"]["speedup"]), by_card))
        for test_id, by_card in sorted(samples.items())
    }
    return learned


def with_spread(document: Mapping, learned: Learned) -> dict:
    """A copy of the baseline `document` whose learned entries carry their between-run spread; an
    entry's `recorded` stamp is kept, since its own figures are unchanged."""
    entries = {}
    for test_id, entry in document["entries"].items():
        spread = learned.cells.get(test_id)
        if spread is not None:
            figures = dict(entry["figures"], between_run_sd=spread.sd, between_run_count=len(spread.speedups))
            entry = dict(entry, figures=figures)
        entries[test_id] = entry
    return dict(document, entries=entries)


DEVICE_SPREAD_FIGURES = ("device_between_run_sd", "device_between_run_count")


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
