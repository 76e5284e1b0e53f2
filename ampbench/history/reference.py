"""What a speed cell is judged against when a history is kept: its baseline entry, with each ratio's level
and learned spread taken from the cell's runs on this GPU model (``learn``). A distributed cell learns
its speedups the same way from its runs on the same N GPUs (``DISTRIBUTED_CELLS``).

The level of a ratio is the geometric mean of the cell's counted runs since its last accepted change;
its noise is pooled over all of them and, where the committed baseline file holds a spread learned from
other runs, over those too (``spread.prior_of``). A cell the history has not yet seen is judged by the
file as before, or, on a GPU model without a file, records and says it is learning. The same overlay
makes ``ampbench baselines export``: the reviewable file written from the history.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Hashable, Mapping

from ampbench.baselines import spread
from ampbench.baselines.entries import DistributedEntry, FlatEntry, SpeedEntry
from ampbench.baselines.store import BaselineStore
from ampbench.history.learn import LEARNED, LEARNING, CellBaseline, learn
from ampbench.history.statuses import Status
from ampbench.history.series import Series
from ampbench.history.store import History
from ampbench.settings import DEFAULT_TOLERANCE

# each ratio a speed entry holds, by its prefix
RATIOS = ((spread.WALL, ""), (spread.DEVICE, "device_"), (spread.VERSUS, "versus_"))
SPEED = "test_speed["
# what an entry takes from the cell's latest counted run where the baseline file has no entry of it:
# how its figures were measured, and what its messages compare (the kernels); names of a speed record
FROM_RECORD = ("device_method", "device_fallback", "versus", "versus_method", "kernels", "batch_size",
               "cudnn_benchmark", "block_seconds", "idle_share", "host_bound", "memory_ratio", "peak_mem_bytes")
# what a distributed entry takes from the cell's latest counted run where the file has none of it
FROM_DISTRIBUTED_RECORD = ("device_method", "device_fallback", "world_size", "batch_size", "block_seconds",
                           "cudnn_benchmark", "scaling_efficiency", "comm_share")


@dataclass(frozen=True)
class LearnedCells:
    """The cells of one kind whose ratios the history learns: their tests, their baseline entry's kind,
    the ratios learned (a spread figure and its prefix in the entry) and what an entry takes from the
    latest counted run where the file has none."""

    tests: tuple[str, ...]  # test-id prefixes
    entry: type[FlatEntry]
    ratios: tuple[tuple[spread.Figure, str], ...]
    from_record: tuple[str, ...]

    def holds(self, test_id: str) -> bool:
        return test_id.startswith(self.tests)


SPEED_CELLS = LearnedCells((SPEED,), SpeedEntry, RATIOS, FROM_RECORD)
# gated by device time, and by the wall clock under --perf-gate wall; the scaling efficiency is reported
DISTRIBUTED_CELLS = LearnedCells(("test_ddp_speed[", "test_fsdp2_speed["), DistributedEntry,
                                 ((spread.WALL, ""), (spread.DEVICE, "device_")), FROM_DISTRIBUTED_RECORD)
# the figures an overlay sets in a ratio, in the order an entry that lacked them gains them
_OVERLAID = ("speedup", "recorded_speedup", "between_run_sd", "between_run_count", "between_run_levels",
             "between_run_level_count", "between_card_sd", "tolerance", "between_run_runs")


def prior_for(figure: spread.Figure, entry: FlatEntry | None, series: Series) -> spread.Prior | None:
    """The file's spread of `figure`, less the runs of `series` it already counts: a file exported from
    this history (or re-recorded over it) lists the history's runs among its own, by their times, and
    counting them twice would shrink the noise for nothing."""
    prior = spread.prior_of(figure, entry) if entry is not None else None
    listed = figure.ratio(entry).between_run_runs if prior is not None else None
    if prior is None or not isinstance(listed, list):
        return prior
    times = {str(r) for r in listed}
    shared = replace(series, points=tuple(p for p in series.points if p.when in times))
    if not shared.points:
        return prior
    ours = learn(shared).pooled
    rest = spread.Prior(prior.count - ours.count, prior.mean_log, max(0.0, prior.m2 - ours.m2),
                        prior.levels - ours.levels)
    return rest if rest.count - rest.levels >= 1 else None


def overlay(entry: Mapping | None, learned: Mapping[str, CellBaseline], latest: Mapping | None,
            counted: Mapping[str, list[str]], cells: LearnedCells = SPEED_CELLS) -> dict | None:
    """`entry` (the file's figures, or None) with each ratio's level and spread from `learned` (by
    prefix), its runs listed by their times as ``ampbench spread`` lists them; the measurement's description from `latest`, the latest counted record, where the file
    has no entry. None where nothing is known: the cell is learning."""
    known = {prefix: b for prefix, b in learned.items() if b.level is not None}
    if not known:
        return dict(entry) if entry is not None else None
    if entry is None and "" not in known:
        return None  # an entry is held by its wall-clock figure too (speed_cell._checks)
    typed = cells.entry.from_figures(
        entry if entry is not None else {k: latest[k] for k in cells.from_record if latest and latest.get(k) is not None})
    for prefix, b in known.items():
        ratio = b.into(typed.ratio(prefix), stores_tolerance=bool(prefix))
        ratio = replace(ratio, between_run_runs=list(counted.get(prefix, [])))
        typed = typed.with_ratio(prefix, ratio, _OVERLAID)
    return typed.to_figures()


@dataclass
class HistoryBaselines:
    """The speed cells' baseline entries as the history has learned them, over the GPU's baseline file
    (which it wraps: recording and writing go to the file as before); the distributed cells' over the
    file of N GPUs, with `cells` DISTRIBUTED_CELLS."""

    store: BaselineStore
    history: History
    floor: float = DEFAULT_TOLERANCE
    cells: LearnedCells = SPEED_CELLS
    card: Hashable = None  # this run's card (its UUID): the level and tolerance are that card's
    _learned: dict[str, dict[str, CellBaseline]] | None = field(default=None, repr=False)
    _latest: dict[str, str] = field(default_factory=dict, repr=False)  # test id: its latest counted run
    _counted: dict[str, dict[str, list[str]]] = field(default_factory=dict, repr=False)  # their times, by prefix

    # the file's own face, for the callers that record and write
    @property
    def path(self) -> Path:
        return self.store.path

    @property
    def exists(self) -> bool:
        return self.store.exists or bool(self.learned())

    @property
    def pending(self) -> dict:
        return self.store.pending

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        self.store.record(test_id, figures, software)

    def write(self) -> Path:
        return self.store.write()

    def software(self, test_id: str) -> dict | None:
        return self.store.software(test_id)

    def learned(self) -> dict[str, dict[str, CellBaseline]]:
        """Every cell's ratios learned from the history (by test id, then prefix), read once."""
        if self._learned is None:
            self._learned = {}
            for figure, prefix in self.cells.ratios:
                for test_id, series in self.history.series_of(self.store.gpu, figure.key).items():
                    if not self.cells.holds(test_id) or not series.points:
                        continue
                    prior = prior_for(figure, self.cells.entry.of(self.store.figures(test_id)), series)
                    b = self._learned.setdefault(test_id, {})[prefix] = learn(series, prior, self.floor, card=self.card)
                    counted = [b.replay.points[s.index] for s in b.replay.statuses if s.counts]
                    self._counted.setdefault(test_id, {})[prefix] = [p.when for p in counted]
                    if counted:
                        self._latest[test_id] = counted[-1].run_id
        return self._learned

    def figures(self, test_id: str) -> dict | None:
        entry = self.store.figures(test_id)
        learned = self.learned().get(test_id)
        if not learned or not self.cells.holds(test_id):
            return entry
        latest = self.history.record(self._latest[test_id], test_id) if test_id in self._latest else None
        return overlay(entry, learned, latest, self._counted.get(test_id, {}), self.cells)

    def latest_record(self, test_id: str) -> dict | None:
        """The record of the cell's latest counted run (its extra_info), or None."""
        self.learned()
        run = self._latest.get(test_id)
        return self.history.record(run, test_id) if run else None

    def latest_software(self, test_id: str) -> dict | None:
        """The software of the cell's latest counted run: what an exported entry was measured on."""
        run = self._latest.get(test_id)
        return self.history.run(run).software if run else None

    def group_failure(self, test_id: str, prefix: str, value: float, tolerance: float) -> str | None:
        """Why a run of `test_id` whose ratio under `prefix` measured `value` fails with the runs held
        back before it (``replay.Replay.group_failure``), or None."""
        b = self.learned().get(test_id, {}).get(prefix)
        if b is None or b.replay is None:
            return None
        failure = b.replay.group_failure(value, self.card, tolerance)
        return failure.describe(b.replay.points) if failure is not None else None

    def judged(self, test_id: str, prefix: str, value: float, verdict: str | None, counts: bool) -> Status | None:
        """What the history makes of this run's `value` (its figure's `verdict`; `counts`: it did not
        fail): counted, suspect and why, or failed; None where the cell has no history."""
        b = self.learned().get(test_id, {}).get(prefix)
        if b is None or b.replay is None:
            return None
        return b.replay.preview(value, self.card, verdict, counts)

    def states(self) -> dict[str, str]:
        """Each learned cell's device-time state and sentence: 'learned: 0.9% from 4 runs; about 0.6% after 10'."""
        out = {}
        for test_id, learned in sorted(self.learned().items()):
            b = learned.get("device_")
            if b is not None:
                out[test_id] = b.sentence() if b.state != LEARNING else "learning: this run sets the level"
        return out

    def learned_share(self, at_most: float = 0.01) -> tuple[int, int]:
        """(cells whose device tolerance is learned and at most `at_most`, cells with a device figure)."""
        cells = [b["device_"] for b in self.learned().values() if "device_" in b]
        return sum(1 for b in cells if b.state == LEARNED and b.tolerance <= at_most), len(cells)
