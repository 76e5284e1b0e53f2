"""Each speed cell's spread between independent runs, learned from saved runs into its baseline entry.

A run's own 99% interval covers its rounds, which share one process and one card; between processes
and cards the same cell moves further (1-5% between H100s). ``learn`` gathers, per speed entry of a
baseline file, the recording's speedup and the speedup of every saved run of the same software,
measured the same way, and ``with_spread`` stores their log standard deviation in the entry as
``between_run_sd`` (with ``between_run_count`` values behind it) and centres the entry's speedup on
their geometric mean (the recording's own value kept as ``recorded_speedup``). The device-time speedup
is learned in the same pass into the ``device_`` figures, and a compiled cell's ratio over its versus
side into the ``versus_`` ones (``FIGURES``). The verdict's tolerance then
allows for that spread (``verdict.BetweenRuns``), and the suite reports each speedup's interval across
runs too (``stats.across_runs``).

``--add`` (``learn(..., add=True)``) adds runs to the spread an entry already holds instead: its
count, centre and sd are the sufficient statistics of the values behind it, so runs made since are
pooled with them exactly, without the earlier runs' JSON. Each entry lists the datetimes of the runs it
counted, so a run is never counted twice. A re-recording keeps the spread and starts another level
(``kept_on_rerecording``): runs added since join its level, and the sd pools each level's deviations.

Each run is one sample, also where several ran on one card: on one H100 two runs minutes apart put
the MLP's fp16 device-time speedup 0.9% apart, as far as runs on different cards land, so a run's
offset comes from its process (memory placement, clocks, kernel choice) as much as from its card.

    ampbench spread baselines/nvidia-h100-80gb-hbm3.json run1.json run2.json ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Mapping, Sequence

from ampbench.baselines.entries import RatioEntry
from ampbench.baselines.store import measurement_mismatch
from ampbench.results import Run, SpeedRecord
from ampbench.stats import finite_number, log_sd
from ampbench.verdict import DEFAULT_TOLERANCE, entry_tolerance

# what must match between a baseline entry's `software` and a run's machine_info["ampbench"] for the
# run to measure the same thing: the card model and every layer of software under test
SOFTWARE_KEYS = ("device", "capability", "driver", "torch", "cuda", "cudnn")
# the compiler and fp8 stack (Inductor ships with torch): compared where the entry records them, since an
# entry without them names no version to hold a run to
COMPILE_KEYS = ("triton", "torchao")


@dataclass(frozen=True)
class Figure:
    """A speedup whose between-run spread is learned: where a baseline entry keeps it and its spread,
    and which of a speed record's two speedups it is."""

    key: str  # the speedup in the entry's figures
    sd_key: str  # the entry's figure for the standard deviation of ln(speedup)
    count_key: str  # the entry's figure for how many values it came from
    label: str  # what messages call it
    recorded_key: str  # where the entry keeps the recording's own value once `key` holds the mean of the runs
    # how it was measured (graph, kernels), under the same name in the entry and the speed record, which a
    # run must match; None for the wall-clock speedup
    method_key: str | None = None
    runs_key: str = ""  # the entry's figure listing the datetimes of the runs its spread counted
    # what the ratio is over, under the same name in both, which a run must match ("versus": compiled
    # amp_bf16 for fp8); None where it is always fp32
    over_key: str | None = None
    levels_key: str = ""  # the entry's figure for the levels its values lie at (``verdict.BetweenRuns``)
    level_count_key: str = ""  # the entry's figure for how many of them lie at the figure's level

    def measured(self, cell: SpeedRecord) -> float | None:
        """A run's value: the speed record's field of the same name as the entry's."""
        return getattr(cell, self.key)

    def method(self, cell: SpeedRecord) -> str | None:
        return getattr(cell, self.method_key) if self.method_key else None

    @property
    def spread_keys(self) -> tuple[str, str, str, str]:
        """The figures of the entry that hold its learned spread: sd, count, the runs counted and the
        levels they lie at (how many lie at the figure's level is the level's own)."""
        return self.sd_key, self.count_key, self.runs_key, self.levels_key

    @property
    def prefix(self) -> str:
        """The prefix of the figure's names in an entry ("", "device_", "versus_"), as learned_spread reads them."""
        return self.key[: -len("speedup")]

    def recording(self, figures: Mapping) -> float | None:
        """The value the recording measured: `key` until a spread was learned, then `recorded_key`."""
        return finite_number(figures.get(self.recorded_key, figures.get(self.key)))


def _figure(prefix: str, label: str, method: bool = True, over: bool = False) -> Figure:
    return Figure(f"{prefix}speedup", f"{prefix}between_run_sd", f"{prefix}between_run_count", label,
                  f"{prefix}recorded_speedup", f"{prefix}method" if method else None, f"{prefix}between_run_runs",
                  "versus" if over else None, f"{prefix}between_run_levels", f"{prefix}between_run_level_count")


WALL = _figure("", "wall-clock speedup", method=False)
DEVICE = _figure("device_", "device-time speedup")
# a compiled cell's second ratio (ampbench.speed.compiled), in device time
VERSUS = _figure("versus_", "ratio over the versus side", over=True)
FIGURES = (WALL, DEVICE, VERSUS)

# the figures this module owns in a speed entry
SPREAD_FIGURES, DEVICE_SPREAD_FIGURES, VERSUS_SPREAD_FIGURES = (f.spread_keys for f in FIGURES)
# the cell a run's slowdown plugin made slower on purpose names the fraction here (ampbench.slowdown)
INJECTED_KEY = "injected_slowdown"


@dataclass(frozen=True)
class Prior:
    """The values behind a spread an entry already holds, as their sufficient statistics."""

    count: int
    mean_log: float  # mean of ln(value) at the entry's level: the log of its centred speedup
    m2: float  # sum of squared deviations of ln(value), each from its own level's mean: sd^2 x (count - levels)
    levels: int = 1  # the levels the values lie at (a re-recording starts one, ``kept_on_rerecording``)
    level_count: int | None = None  # how many lie at the entry's level: `count` if None

    @property
    def at_level(self) -> int:
        return self.count if self.level_count is None else self.level_count


def prior_of(figure: Figure, figures: Mapping) -> Prior | None:
    """The spread `figures` hold for `figure`, where ``with_spread`` wrote one (centred, with its count),
    or a re-recording kept one (``kept_on_rerecording``): then the recording alone opens another level."""
    sd, count = finite_number(figures.get(figure.sd_key)), figures.get(figure.count_key)
    levels, at_level = figures.get(figure.levels_key, 1), figures.get(figure.level_count_key)
    centre = finite_number(figures.get(figure.key))
    if (sd is None or not isinstance(count, int) or isinstance(count, bool) or not isinstance(levels, int)
            or count - levels < 1 or centre is None or centre <= 0):
        return None
    m2 = sd * sd * (count - levels)
    if finite_number(figures.get(figure.recorded_key)) is None:
        return Prior(count + 1, math.log(centre), m2, levels + 1, 1)
    return Prior(count, math.log(centre), m2, levels, at_level if isinstance(at_level, int) else None)


@dataclass(frozen=True)
class CellSpread:
    test_id: str
    # the recording's speedup first, then one per run that counted; under --add only the runs added,
    # the recording being among the `prior` values
    speedups: tuple[float, ...]
    prior: Prior | None = None
    runs: tuple[str, ...] = ()  # datetimes of every run counted, the prior's listed ones included

    @cached_property
    def _pooled(self) -> tuple[int, float, float]:
        """(count, mean of ln(value) at the level, sum of squared deviations from each value's level) of
        the prior's values and `speedups`, which join the prior's level."""
        logs = [math.log(v) for v in self.speedups]
        n = len(logs)
        mean = sum(logs) / n if n else 0.0
        m2 = sum((x - mean) ** 2 for x in logs)
        if self.prior is None:
            return n, mean, m2
        p, at_level = self.prior, self.prior.at_level + n
        delta = mean - p.mean_log if n else 0.0
        return p.count + n, p.mean_log + delta * n / at_level, p.m2 + m2 + delta * delta * p.at_level * n / at_level

    @property
    def count(self) -> int:
        return self._pooled[0]

    @property
    def levels(self) -> int:
        return 1 if self.prior is None else self.prior.levels

    @property
    def level_count(self) -> int:
        """How many values lie at the centre's level."""
        return len(self.speedups) + (0 if self.prior is None else self.prior.at_level)

    @property
    def centre(self) -> float:
        """The geometric mean of every value behind the spread."""
        return math.exp(self._pooled[1])

    @property
    def sd(self) -> float:
        """Standard deviation of ln(speedup) over the recording and the runs, each from its level's mean."""
        if self.prior is None:
            return log_sd(self.speedups)
        count, _, m2 = self._pooled
        return math.sqrt(m2 / (count - self.levels))


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

    @property
    def versus_cells(self) -> dict[str, CellSpread]:
        """The spreads of compiled cells' ratios over their versus sides."""
        return self.figures[VERSUS.key]


def software_difference(entry_software: Mapping, machine: Mapping) -> str | None:
    """A sentence naming what differs between a baseline entry's software and a run's, or None."""
    keys = SOFTWARE_KEYS + tuple(k for k in COMPILE_KEYS if k in entry_software)
    differ = [f"{key} {entry_software.get(key)} in the baseline, {machine.get(key)} in the run"
              for key in keys if str(entry_software.get(key)) != str(machine.get(key))]
    return "other software: " + "; ".join(differ) if differ else None


def _why_not(entry: Mapping, run: Run, cell: SpeedRecord) -> str | None:
    """Why `cell` of `run` is no sample of the cell that `entry` recorded, or None if it is one."""
    if cell.speedup is None or cell.speedup <= 0:
        return "no speedup (the test failed before measuring one)"
    if cell.injected_slowdown:
        return f"a slowdown of {cell.injected_slowdown} was injected into it: no sample of its run-to-run spread"
    if cell.recording is True:
        return "this run recorded the baseline, whose speedup is counted already"
    # A failed cell counts: runs of unchanged software are the premise, and in such a run a failure is a
    # false alarm, exactly the spread the tolerance has yet to learn. Leaving it out would keep the
    # tolerance too tight for ever.
    software = software_difference(entry.get("software") or {}, run.machine)
    if software:
        return software
    measured_with = {"cudnn_benchmark": cell.cudnn_benchmark, "block_seconds": cell.block_seconds}
    return measurement_mismatch(entry["figures"], measured_with)


def _figure_why_not(figure: Figure, entry: Mapping, cell: SpeedRecord) -> tuple[bool, str | None]:
    """(whether `cell` gives `figure` a value, why not where that is worth saying). An entry or a cell
    without the figure (recorded or run before device time was measured) silently gives nothing."""
    recorded, measured = figure.recording(entry["figures"]), figure.measured(cell)
    if recorded is None or recorded <= 0 or measured is None or measured <= 0:
        return False, None
    if figure.over_key is not None:
        ours, theirs = getattr(cell, figure.over_key), entry["figures"].get(figure.over_key)
        if ours != theirs:
            return False, (f"{figure.label} over {ours} in the run and over {theirs} in the baseline: "
                           "another ratio, not a sample of its spread")
    if figure.method_key is not None:
        ours, theirs = figure.method(cell), entry["figures"].get(figure.method_key)
        if ours != theirs:
            return False, (f"{figure.label} measured by {ours} in the run and by {theirs} in the baseline: "
                           "another measurement, not a sample of its spread")
    return True, None


def learn(entries: Mapping[str, Mapping], runs: Sequence[Run], add: bool = False) -> Learned:
    """Each speed entry's speedups (``FIGURES``) across the recording and `runs`, with why
    any run's cell does not count. A run given twice (the same pytest-benchmark datetime) counts once.
    With `add`, the runs are added to the spread each entry already holds (``prior_of``), and a run the
    entry lists as counted is left out."""
    learned = Learned()
    samples: dict[str, dict[str, list[float]]] = {f.key: {} for f in FIGURES}
    counted: dict[str, dict[str, list[str]]] = {f.key: {} for f in FIGURES}
    seen: dict[str, str] = {}
    for run in runs:
        name = str(run.path)
        if run.datetime and run.datetime in seen:
            learned.left_out.append((name, "*", f"the same run as {seen[run.datetime]} (same datetime)"))
            continue
        if run.datetime:
            seen[run.datetime] = name
        for cell in run.of_kind(SpeedRecord):
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
                if counts and add and run.datetime in (entry["figures"].get(figure.runs_key) or ()):
                    counts, why = False, f"{figure.label}: counted in the entry's spread already"
                if why:
                    learned.left_out.append((name, cell.test_id, why))
                if counts:
                    samples[figure.key].setdefault(cell.test_id, []).append(figure.measured(cell))
                    counted[figure.key].setdefault(cell.test_id, []).append(run.datetime or name)
    for figure in FIGURES:
        cells = {}
        for test_id, values in sorted(samples[figure.key].items()):
            figures = entries[test_id]["figures"]
            prior = prior_of(figure, figures) if add else None
            runs = tuple(counted[figure.key][test_id])
            if prior is None:
                cells[test_id] = CellSpread(test_id, (figure.recording(figures), *values), runs=runs)
            else:
                earlier = tuple(figures.get(figure.runs_key) or ())
                cells[test_id] = CellSpread(test_id, tuple(values), prior, earlier + runs)
        learned.figures[figure.key] = cells
    return learned


def with_spread(document: Mapping, learned: Learned) -> dict:
    """A copy of the baseline `document` whose learned entries carry the between-run spread of each
    figure learned for them, its figure centred on the geometric mean of the recording and the runs; an
    entry's `recorded` stamp is kept, since its recording is unchanged."""
    entries = {}
    for test_id, entry in document["entries"].items():
        figures = dict(entry["figures"])
        for figure in FIGURES:
            spread = learned.figures[figure.key].get(test_id)
            if spread is not None:
                # the mean of every value is a better baseline than any one of them (learned_spread's
                # bound assumes it); the recording's own value stays beside it, for the next learning
                figures[figure.recorded_key] = figure.recording(figures)
                figures.update({figure.key: spread.centre, figure.sd_key: spread.sd, figure.count_key: spread.count,
                                figure.runs_key: list(spread.runs)})
                # one level is the default: an entry learned afresh drops an earlier learning's levels
                levels = {figure.levels_key: spread.levels, figure.level_count_key: spread.level_count}
                for key, value in levels.items():
                    figures.pop(key, None)
                    if spread.levels > 1:
                        figures[key] = value
        for figure in (DEVICE, VERSUS):
            if finite_number(figures.get(figure.key)) is not None:
                # what the verdict will now use under the default floor, so the file says what is guarded
                p = figure.prefix
                figures[f"{p}tolerance"] = entry_tolerance(DEFAULT_TOLERANCE, RatioEntry.read(figures, p))
        if figures != entry["figures"]:
            entry = dict(entry, figures=figures)
        entries[test_id] = entry
    return dict(document, entries=entries)


def kept_on_rerecording(previous: Mapping | None, measured_with: Mapping[str, object], device_method: str | None,
                        floor: float, device_noise: float) -> dict:
    """The learned-spread figures a re-recorded speed entry keeps from the entry it replaces (the wall
    and device-time speedups'), and the device tolerance they give: the spread is kept wherever the
    figure is measured the same way (the same settings, the device time by the same method), whatever
    software the recording runs on. How far a cell moves between runs belongs to the measurement on
    its GPU model, not to the level a recording accepts: a re-recording after an upgrade re-centres the
    level, and dropping the spread there would send every cell back to the unlearned tolerance. The
    recording alone is the new level, so the kept spread judges it uncentred (``BetweenRuns``)."""
    alike = previous is not None and measurement_mismatch(previous, dict(measured_with)) is None
    kept = carried(previous, alike) | carried(previous, alike and previous.get(DEVICE.method_key) == device_method,
                                              DEVICE_SPREAD_FIGURES)
    return {**kept, "device_tolerance": entry_tolerance(floor, RatioEntry.read(kept, DEVICE.prefix), device_noise)}


def carried_device(previous: Mapping | None, measured_alike: bool) -> dict:
    """As ``carried``, for the device-time speedup's spread (`measured_alike`: its device time measured
    the same way too)."""
    return carried(previous, measured_alike, DEVICE_SPREAD_FIGURES)


def carried(previous: Mapping | None, measured_alike: bool, names: Sequence[str] = SPREAD_FIGURES) -> dict:
    """The spread figures (`names`: the wall-clock speedup's by default) a re-recorded entry keeps: its
    old entry's, where that measured the figure the same way (`measured_alike`: the same settings and
    method, on any software; see ``kept_on_rerecording``), else none: a figure measured otherwise is
    another figure, whose spread must be learned from its own runs."""
    if previous is None or not measured_alike:
        return {}
    return {name: previous[name] for name in names if name in previous}
