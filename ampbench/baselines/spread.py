"""Each speed cell's spread between independent runs, learned from saved runs into its baseline entry.

A run's own 99% interval covers its rounds, which share one process and one card; between processes
and cards the same cell moves further (docs/design.md, "Where the constants come from"). ``learn_spread``
gathers, per speed entry of a baseline file, the recording's speedup and the speedup of every saved run of the same
software,
measured the same way, and ``with_spread`` stores their log standard deviation in the entry as
``between_run_sd`` (with ``between_run_count`` values behind it) and centres the entry's speedup on
their geometric mean (the recording's own value kept as ``recorded_speedup``). The device-time speedup
is learned in the same pass into the ``device_`` figures, and a compiled cell's ratio over its versus
side into the ``versus_`` ones (every ratio of a speed entry, ``spread_kinds``). The verdict's tolerance then
allows for that spread (``tolerance.BetweenRuns``), and the suite reports each speedup's interval across
runs too (``stats.across_runs``).

``--add`` (``learn_spread(..., add=True)``) adds runs to the spread an entry already holds instead: its
count, centre and sd are the sufficient statistics of the values behind it, so runs made since are
pooled with them exactly, without the earlier runs' JSON. Each entry lists the datetimes of the runs it
counted, so a run is never counted twice. A re-recording keeps the spread and starts another level
(``speed.ratio.Ratio.recorded``): runs added since join its level, and the sd pools each level's deviations.

Each run is one sample, also where several ran on one card: runs on one card land as far apart as
runs on different cards (docs/design.md), a run's offset coming from its process as much as its card.

    ampbench spread baselines/nvidia-h100-80gb-hbm3.json run1.json run2.json ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Mapping, Sequence

from ampbench.baselines.entries import FlatEntry, SpeedEntry, entry_tolerance, pooled_dof
from ampbench.baselines.file import measurement_mismatch
from ampbench.results import SPEED_RATIOS, RatioKind, Run, SpeedRecord
from ampbench.results.ratios import DEVICE, VERSUS, WALL
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.stats import finite_number, log_sd

# what must match between a baseline entry's `software` and a run's machine_info["ampbench"] for the
# run to measure the same thing: the card model and every layer of software under test
SOFTWARE_KEYS = ("device", "capability", "driver", "torch", "cuda", "cudnn")
# the compiler and fp8 stack (Inductor ships with torch): compared where the entry records them, since an
# entry without them names no version to hold a run to
COMPILE_KEYS = ("triton", "torchao")


def spread_kinds() -> list[RatioKind]:
    """The ratios of a speed entry whose spread is learned, in the order its files gained them."""
    return SpeedEntry.filed()


def recording(kind: RatioKind, entry: FlatEntry) -> float | None:
    """The value the recording measured of `entry`'s ratio of `kind`: its speedup until a spread was
    learned, then the recorded one."""
    ratio = entry.ratio(kind)
    return finite_number(ratio.speedup if ratio.recorded_speedup is None else ratio.recorded_speedup)


# the figures with_spread writes into a ratio, in the order an entry that lacked them gains them; the
# levels last, and only where there are several (one is the default)
_LEARNED = ("recorded_speedup", "speedup", "between_run_sd", "between_run_count", "between_run_runs",
            "between_run_levels", "between_run_level_count")
_LEVELS = ("between_run_levels", "between_run_level_count")
# the cell a run's slowdown plugin made slower on purpose names the fraction here (ampbench.slowdown)
INJECTED_KEY = "injected_slowdown"


@dataclass(frozen=True)
class Prior:
    """The values behind a spread an entry already holds, as their sufficient statistics."""

    count: int
    mean_log: float  # mean of ln(value) at the entry's level: the log of its centred speedup
    m2: float  # sum of squared deviations of ln(value), each from its own level's mean: sd^2 x (count - levels)
    levels: int = 1  # the levels the values lie at (a re-recording starts one, ``speed.ratio.Ratio.recorded``)
    level_count: int | None = None  # how many lie at the entry's level: `count` if None

    @property
    def at_level(self) -> int:
        return self.count if self.level_count is None else self.level_count


def prior_of(kind: RatioKind, entry: FlatEntry) -> Prior | None:
    """The spread `entry` holds for its ratio of `kind`, where ``with_spread`` wrote one (centred, with its
    count), or a re-recording kept one (``speed.ratio.Ratio.recorded``): then the recording alone opens
    another level."""
    ratio = entry.ratio(kind)
    sd, count = finite_number(ratio.between_run_sd), ratio.between_run_count
    levels = 1 if ratio.between_run_levels is None else ratio.between_run_levels
    at_level, centre = ratio.between_run_level_count, finite_number(ratio.speedup)
    if (sd is None or not isinstance(count, int) or isinstance(count, bool) or not isinstance(levels, int)
            or count - levels < 1 or centre is None or centre <= 0):
        return None
    m2 = sd * sd * (count - levels)
    lent, pooled_sd = pooled_dof(ratio), ratio.between_run_pooled_sd
    # the posterior's own part: what the cell's runs gave, without the prior they were pooled with (a ratio
    # lent degrees of freedom has their sd)
    if lent and pooled_sd is not None:
        m2 = max(0.0, sd * sd * (count - levels + lent) - lent * float(pooled_sd) ** 2)
    if finite_number(ratio.recorded_speedup) is None:
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
    # per ratio's series name (``RatioKind.history``), the entries with at least one run beside the recording
    figures: dict[str, dict[str, CellSpread]] = field(default_factory=lambda: {k.history: {} for k in spread_kinds()})
    # (run, test id, why) of run cells that do not count
    left_out: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def cells(self) -> dict[str, CellSpread]:
        """The wall-clock speedup's spreads."""
        return self.figures[WALL.history]

    @property
    def device_cells(self) -> dict[str, CellSpread]:
        """The device-time speedup's spreads."""
        return self.figures[DEVICE.history]

    @property
    def versus_cells(self) -> dict[str, CellSpread]:
        """The spreads of compiled cells' ratios over their versus sides."""
        return self.figures[VERSUS.history]


def software_difference(entry_software: Mapping, machine: Mapping) -> str | None:
    """A sentence naming what differs between a baseline entry's software and a run's, or None."""
    keys = SOFTWARE_KEYS + tuple(k for k in COMPILE_KEYS if k in entry_software)
    differ = [f"{key} {entry_software.get(key)} in the baseline, {machine.get(key)} in the run"
              for key in keys if str(entry_software.get(key)) != str(machine.get(key))]
    return "other software: " + "; ".join(differ) if differ else None


def _why_not(entry: Mapping, run: Run, cell: SpeedRecord) -> str | None:
    """Why `cell` of `run` is no sample of the cell that `entry` (of the document) recorded, or None if
    it is one."""
    wall = cell.ratio(WALL).speedup
    if wall is None or wall <= 0:
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
    return measurement_mismatch(SpeedEntry.from_figures(entry["figures"]), measured_with)


def _figure_why_not(kind: RatioKind, entry: SpeedEntry, cell: SpeedRecord) -> tuple[bool, str | None]:
    """(whether `cell` gives its ratio of `kind` a value, why not where that is worth saying). An entry or
    a cell without the ratio (recorded or run before device time was measured) silently gives nothing."""
    recorded, measured = recording(kind, entry), cell.ratio(kind).speedup
    if recorded is None or recorded <= 0 or measured is None or measured <= 0:
        return False, None
    if kind.over:
        ours, theirs = cell.versus, entry.versus
        if ours != theirs:
            return False, (f"{kind.noun} over {ours} in the run and over {theirs} in the baseline: "
                           "another ratio, not a sample of its spread")
    if kind.same_method:
        ours, theirs = cell.ratio(kind).method, entry.ratio(kind).method
        if ours != theirs:
            return False, (f"{kind.noun} measured by {ours} in the run and by {theirs} in the baseline: "
                           "another measurement, not a sample of its spread")
    return True, None


def _samples(entries: Mapping[str, Mapping], typed: dict[str, SpeedEntry], runs: Sequence[Run], add: bool,
             learned: Learned) -> tuple[dict, dict]:
    """Per ratio's series name and test id, the values of `runs` that count and the runs they came from;
    what does not count goes to `learned`'s left_out, with why."""
    samples: dict[str, dict[str, list[float]]] = {k.history: {} for k in spread_kinds()}
    counted: dict[str, dict[str, list[str]]] = {k.history: {} for k in spread_kinds()}
    seen: dict[str, str] = {}
    for run in runs:
        name = str(run.path)
        if run.datetime and run.datetime in seen:
            learned.left_out.append((name, "*", f"the same run as {seen[run.datetime]} (same datetime)"))
            continue
        if run.datetime:
            seen[run.datetime] = name
        for cell in run.of_kind(SpeedRecord):
            entry = typed.get(cell.test_id)
            if entry is None or finite_number(entry.ratio(WALL).speedup) is None:
                learned.left_out.append((name, cell.test_id, "no speed entry in the baseline file"))
                continue
            why = _why_not(entries[cell.test_id], run, cell)
            if why:
                learned.left_out.append((name, cell.test_id, why))
                continue
            for kind in spread_kinds():
                counts, why = _figure_why_not(kind, entry, cell)
                if counts and add and run.datetime in (entry.ratio(kind).between_run_runs or ()):
                    counts, why = False, f"{kind.noun}: counted in the entry's spread already"
                if why:
                    learned.left_out.append((name, cell.test_id, why))
                if counts:
                    speedup = cell.ratio(kind).speedup
                    assert speedup is not None, "a ratio that counts was measured (_figure_why_not)"
                    samples[kind.history].setdefault(cell.test_id, []).append(speedup)
                    counted[kind.history].setdefault(cell.test_id, []).append(run.datetime or name)
    return samples, counted


def learn_spread(entries: Mapping[str, Mapping], runs: Sequence[Run], add: bool = False) -> Learned:
    """Each speed entry's ratios (``spread_kinds``) across the recording and `runs`, with why
    any run's cell does not count. A run given twice (the same pytest-benchmark datetime) counts once.
    With `add`, the runs are added to the spread each entry already holds (``prior_of``), and a run the
    entry lists as counted is left out."""
    learned = Learned()
    typed = {test_id: SpeedEntry.from_figures(entry["figures"]) for test_id, entry in entries.items()}
    samples, counted = _samples(entries, typed, runs, add, learned)
    for kind in spread_kinds():
        cells = {}
        for test_id, values in sorted(samples[kind.history].items()):
            entry = typed[test_id]
            prior = prior_of(kind, entry) if add else None
            counted_runs = tuple(counted[kind.history][test_id])
            if prior is None:
                recorded = recording(kind, entry)
                assert recorded is not None, "an entry a run counts towards holds its recording (_figure_why_not)"
                cells[test_id] = CellSpread(test_id, (recorded, *values), runs=counted_runs)
            else:
                earlier = tuple(entry.ratio(kind).between_run_runs or ())
                cells[test_id] = CellSpread(test_id, tuple(values), prior, earlier + counted_runs)
        learned.figures[kind.history] = cells
    return learned


def with_spread(document: Mapping, learned: Learned) -> dict:
    """A copy of the baseline `document` whose learned entries carry the between-run spread of each
    figure learned for them, its figure centred on the geometric mean of the recording and the runs; an
    entry's `recorded` stamp is kept, since its recording is unchanged."""
    entries = {}
    for test_id, entry in document["entries"].items():
        typed = SpeedEntry.from_figures(entry["figures"])
        for kind in spread_kinds():
            spread = learned.figures[kind.history].get(test_id)
            if spread is not None:
                typed = _learned_into(typed, kind, spread)
        for kind in (k for k in SPEED_RATIOS.values() if k.stores_tolerance):
            ratio = typed.ratio(kind)
            if finite_number(ratio.speedup) is not None:
                # what the verdict will now use under the default floor, so the file says what is guarded
                tolerance = entry_tolerance(kind, DEFAULT_TOLERANCE, ratio)
                typed = typed.with_ratio(kind, replace(ratio, tolerance=tolerance), ("tolerance",))
        figures = typed.to_figures()
        if figures != entry["figures"]:
            entry = dict(entry, figures=figures)
        entries[test_id] = entry
    return dict(document, entries=entries)


def _learned_into(entry: SpeedEntry, kind: RatioKind, spread: CellSpread) -> SpeedEntry:
    """`entry` with its ratio of `kind`'s spread learned: its speedup the centre of every value, the recording's own
    value beside it (the mean is a better baseline than any one value, and learned_spread's bound
    assumes it; the next learning reads the recording). One level is the default: an entry learned
    afresh drops an earlier learning's levels."""
    old, several = entry.ratio(kind), spread.levels > 1
    ratio = replace(old, recorded_speedup=recording(kind, entry), speedup=spread.centre,
                    between_run_pooled_dof=None, between_run_pooled_sd=None,  # learned afresh: no prior pooled in
                    between_run_sd=spread.sd, between_run_count=spread.count, between_run_runs=list(spread.runs),
                    between_run_levels=spread.levels if several else None,
                    between_run_level_count=spread.level_count if several else None)
    return entry.with_ratio(kind, ratio, _LEARNED, moved=_LEVELS)
