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

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping

from ampbench.baselines import spread
from ampbench.baselines.entries import (
    DistributedEntry,
    FlatEntry,
    RatioEntry,
    SpeedEntry,
    entry_reference,
    learned_spread,
)
from ampbench.baselines.file import BaselineError, BaselineFile, load_document
from ampbench.history import pooling
from ampbench.history.learn import LEARNED, LEARNING, CellBaseline, learn
from ampbench.history.series import Series
from ampbench.history.statuses import Status
from ampbench.history.store import History
from ampbench.results import RatioKind
from ampbench.results.ratios import DEVICE
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.stats import finite_number
from ampbench.tolerance import Reference

SPEED = "test_speed["
# what an entry takes from the cell's latest counted run where the baseline file has no entry of it:
# how its figures were measured, and what its messages compare (the kernels); names of an entry's figures
FROM_RECORD = ("device_method", "device_fallback", "versus", "versus_method", "kernels", "batch_size",
               "cudnn_benchmark", "block_seconds", "idle_share", "host_bound", "memory_ratio", "peak_mem_bytes",
               # each side's device step (ms): the fp32 one is the level card admission holds a card to
               "device_step_ms", "device_step_ms_ref")
# what a distributed entry takes from the cell's latest counted run where the file has none of it
FROM_DISTRIBUTED_RECORD = ("device_method", "device_fallback", "device_scaling_method", "world_size", "batch_size",
                           "block_seconds", "cudnn_benchmark", "scaling_efficiency", "comm_share")


@dataclass(frozen=True)
class LearnedCells:
    """The cells of one kind whose ratios the history learns: their tests, their baseline entry's kind
    (whose table's rows say which ratios a history learns) and what an entry takes from the latest
    counted run where the file has none."""

    tests: tuple[str, ...]  # test-id prefixes
    entry: type[FlatEntry]
    from_record: tuple[str, ...]

    def covers(self, test_id: str) -> bool:
        """Whether `test_id` is one of these cells."""
        return test_id.startswith(self.tests)

    @property
    def ratios(self) -> list[RatioKind]:
        """The kinds of ratio the history learns of these cells, as their files gained them."""
        return [kind for kind in self.entry.filed() if kind.learned]


SPEED_CELLS = LearnedCells((SPEED,), SpeedEntry, FROM_RECORD)
# gated by device time, and by the wall clock under --perf-gate wall; the scaling efficiency is reported
DISTRIBUTED_CELLS = LearnedCells(("test_ddp_speed[", "test_fsdp2_speed["), DistributedEntry, FROM_DISTRIBUTED_RECORD)
# the figures an overlay sets in a ratio, in the order an entry that lacked them gains them
_OVERLAID = ("speedup", "recorded_speedup", "between_run_sd", "between_run_count", "between_run_levels",
             "between_run_level_count", "between_card_sd", "between_card_dof", "between_run_pooled_dof",
             "between_run_pooled_sd", "between_card_source", "tolerance", "between_run_runs")


def prior_for(kind: RatioKind, entry: FlatEntry | None, series: Series) -> spread.Prior | None:
    """The file's spread of its ratio of `kind`, less the runs of `series` it already counts: a file
    exported from this history (or re-recorded over it) lists the history's runs among its own, by their
    times, and counting them twice would shrink the noise for nothing."""
    prior = spread.prior_of(kind, entry) if entry is not None else None
    listed = entry.ratio(kind).between_run_runs if prior is not None and entry is not None else None
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


def _known(learned: Mapping[str, CellBaseline], cells: LearnedCells) -> dict[RatioKind, CellBaseline]:
    """The ratios of `learned` whose level the history has learned."""
    return {kind: learned[kind.name] for kind in cells.ratios
            if kind.name in learned and learned[kind.name].level is not None}


def overlay(entry: FlatEntry | None, learned: Mapping[str, CellBaseline], latest: Mapping | None,
            counted: Mapping[str, list[str]], cells: LearnedCells = SPEED_CELLS) -> FlatEntry | None:
    """`entry` (the file's, or None) with each ratio's level and spread from `learned` (by the ratio's name),
    its runs listed by their times as ``ampbench spread`` lists them; the measurement's description from
    `latest`, the latest counted record, where the file has no entry. None where nothing is known: the
    cell is learning."""
    known = _known(learned, cells)
    if not known:
        return entry
    if entry is None and not any(not kind.prefix for kind in known):
        return None  # an entry is held by its wall-clock figure too (speed.cell's gates)
    typed = entry if entry is not None else cells.entry.from_record(latest, cells.from_record)
    for kind, b in known.items():
        ratio = b.into(typed.ratio(kind), stores_tolerance=kind.stores_tolerance)
        ratio = replace(ratio, between_run_runs=list(counted.get(kind.name, [])))
        typed = typed.with_ratio(kind, ratio, _OVERLAID)
    return typed


@dataclass(frozen=True)
class CellGroupRule:
    """The group rule of one cell's figure of `kind` (``verdict.GroupRule``), from its history's replay of
    the runs held back before this one (``HistoryBaselines.group_failure``)."""

    source: "HistoryBaselines"
    test_id: str
    kind: RatioKind

    def __call__(self, value: float, tolerance: float) -> str | None:
        return self.source.group_failure(self.test_id, self.kind, value, tolerance)

@dataclass
class HistoryBaselines:
    """The speed cells' baseline entries as the history has learned them, over the GPU's baseline file
    (which it wraps: recording and writing go to the file as before); the distributed cells' over the
    file of N GPUs, with `cells` DISTRIBUTED_CELLS."""

    file: BaselineFile
    history: History
    floor: float = DEFAULT_TOLERANCE
    cells: LearnedCells = SPEED_CELLS
    card: Hashable = None  # this run's card (its UUID): the level and tolerance are that card's
    _learned: dict[str, dict[str, CellBaseline]] | None = field(default=None, repr=False)
    _latest: dict[str, str] = field(default_factory=dict, repr=False)  # test id: its latest counted run
    _counted: dict[str, dict[str, list[str]]] = field(default_factory=dict, repr=False)  # their times, by ratio
    _others: list[Mapping[str, dict]] | None = field(default=None, repr=False)  # the other GPU models' entries
    _others_ratios: dict[str, list[dict[str, RatioEntry]]] = field(default_factory=dict, repr=False)  # by kind
    # each cell's entry as read (`entry`): a cell asks for it and for each ratio's reference, and the
    # overlay reads the cell's latest record from the store; a write changes the file under it
    _entries: dict[str, FlatEntry | None] = field(default_factory=dict, repr=False)

    # the file's own face, for the callers that record and write
    @property
    def path(self) -> Path:
        return self.file.path

    @property
    def exists(self) -> bool:
        return self.file.exists or bool(self.learned())

    @property
    def pending(self) -> dict:
        return self.file.pending

    def record(self, test_id: str, figures: dict, software: dict) -> None:
        self.file.record(test_id, figures, software)

    def write(self) -> Path:
        self._entries.clear()
        return self.file.write()

    def software(self, test_id: str) -> dict | None:
        return self.file.software(test_id)

    def learned(self) -> dict[str, dict[str, CellBaseline]]:
        """Every cell's ratios learned from the history (by test id, then the ratio's name), read once: each
        ratio's noise learned from the cell's own runs, then pooled with the GPU model's other cells of the
        ratio (``pooling``)."""
        if self._learned is None:
            self._learned = {}
            for kind in self.cells.ratios:
                serieses = {test_id: series for test_id, series in
                            self.history.series_of(self.file.gpu, kind.history).items()
                            if self.cells.covers(test_id) and series.points}
                priors = {test_id: prior_for(kind, self.cells.entry.of(self.file.figures(test_id)), series)
                          for test_id, series in serieses.items()}
                own = {test_id: learn(series, priors[test_id], self.floor, card=self.card)
                       for test_id, series in serieses.items()}
                pool = self.pool(kind, own)
                cards = self.card_term(kind, own.values())
                for test_id in serieses:
                    b = own[test_id].lent((pool.dof, pool.scale[test_id]) if pool and test_id in pool.scale else None)
                    if cards is not None and not self._seen(b):  # a card it never ran on
                        b = b.on_new_card(cards)
                    self._learned.setdefault(test_id, {})[kind.name] = b
                    assert b.replay is not None, "learn() keeps the replay its baseline comes from"
                    counted = [b.replay.points[i] for i in b.replay.counted_runs()]
                    self._counted.setdefault(test_id, {})[kind.name] = [p.when for p in counted]
                    if counted:
                        self._latest[test_id] = counted[-1].run_id
        return self._learned

    def _seen(self, b: CellBaseline) -> bool:
        """Whether this run's card is one the cell's counted runs ran on."""
        return b.replay is not None and any(b.replay.points[i].card == self.card for i in b.replay.counted_runs())

    def pool(self, kind: RatioKind, own: Mapping[str, CellBaseline]) -> pooling.NoisePrior | None:
        """The prior of the cells' noise of ratio `kind`, fitted over the cells whose own runs learned a
        spread (``pooling.fit_prior``), by model, or else on the other GPU models' files; where the cells
        are too few for either, each cell's noise relative to the others' on those files, scaled to this
        model's (``pooling.transfer_prior``)."""
        # a spread shown is a pooled sd learned (``CellBaseline.spread_shown``)
        variances = {test_id: (b.pooled.sd ** 2, b.pooled.dof) for test_id, b in own.items()
                     if b.spread_shown and b.pooled.sd is not None}
        fitted = pooling.fit_prior(variances, {test_id: pooling.group_of(test_id) for test_id in own},
                                   self._elsewhere(kind, list(own)))
        return fitted if fitted is not None else pooling.transfer_prior(variances, self._noise_elsewhere(kind))

    def card_term(self, kind: RatioKind, own: Iterable[CellBaseline]) -> pooling.CardTerm | None:
        """How far a card the cells never ran on lies off (``pooling.card_term``): measured on the history's
        cards, else the other GPU models' files' term, never the runs' own spread counted again."""
        return pooling.card_term([b.replay for b in own if b.replay is not None], self._cards_elsewhere(kind))

    def _other_files(self) -> list[Mapping[str, dict]]:
        """The entries of the other GPU models' baseline files beside this one, read once."""
        if self._others is None:
            self._others = []
            folder = self.file.path.parent
            for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
                if path.resolve() == self.file.path.resolve():
                    continue
                try:
                    self._others.append(load_document(path)["entries"])
                except BaselineError:
                    continue  # another GPU's file that does not load is no concern of this GPU's runs
        return self._others

    def _ratios_elsewhere(self, kind: RatioKind) -> list[dict[str, RatioEntry]]:
        """Per other GPU model's file beside this one, its cells' ratios of `kind` (by test id), read once."""
        if kind.name not in self._others_ratios:
            self._others_ratios[kind.name] = [
                {test_id: entry.ratio(kind) for test_id, raw in entries.items() if self.cells.covers(test_id)
                 and (entry := self.cells.entry.of((raw or {}).get("figures"))) is not None}
                for entries in self._other_files()]
        return self._others_ratios[kind.name]

    def _elsewhere(self, kind: RatioKind, test_ids: list[str]) -> dict[str, float]:
        """ln of each cell's noise variance of ratio `kind` on the other GPU models' files beside this one
        (the geometric mean over the files that learned it)."""
        logs: dict[str, list[float]] = {}
        for ratios in self._ratios_elsewhere(kind):
            for test_id in test_ids:
                sd = finite_number(ratios[test_id].between_run_sd) if test_id in ratios else None
                if sd is not None and sd > 0:
                    logs.setdefault(test_id, []).append(2.0 * math.log(sd))
        return {test_id: sum(v) / len(v) for test_id, v in logs.items()}

    def _noise_elsewhere(self, kind: RatioKind) -> dict[str, dict[str, tuple[float, int]]]:
        """Per other file, its cells' learned noise of ratio `kind`: (variance of ln(value), the runs'
        own degrees of freedom)."""
        out = {}
        for k, ratios in enumerate(self._ratios_elsewhere(kind)):
            table = {}
            for test_id, ratio in ratios.items():
                spread = learned_spread(ratio)
                if spread is not None and spread.sd > 0:
                    table[test_id] = (spread.sd ** 2, spread.count - spread.levels)
            out[str(k)] = table
        return out

    def _cards_elsewhere(self, kind: RatioKind) -> list[list[tuple[float, int | None]]]:
        """Per other file, its cells' card terms of ratio `kind`: (between_card_sd, between_card_dof)."""
        return [[(sd, ratio.between_card_dof) for ratio in ratios.values()
                 if (sd := finite_number(ratio.between_card_sd)) is not None]
                for ratios in self._ratios_elsewhere(kind)]

    def _learned_of(self, test_id: str) -> Mapping[str, CellBaseline]:
        """What the history learned of the cell's ratios (by name): nothing for a cell of another kind."""
        return self.learned().get(test_id, {}) if self.cells.covers(test_id) else {}

    def figures(self, test_id: str) -> dict | None:
        """The cell's entry as a file holds it, what ``ampbench baselines export`` writes: the file's own
        figures where the history has learned no level of the cell."""
        if not _known(self._learned_of(test_id), self.cells):
            return self.file.figures(test_id)
        entry = self.entry(test_id)
        return entry.to_figures() if entry is not None else None

    def latest_record(self, test_id: str) -> dict | None:
        """The record of the cell's latest counted run (its extra_info), or None."""
        self.learned()
        run = self._latest.get(test_id)
        return self.history.record(run, test_id) if run else None

    def latest_software(self, test_id: str) -> Mapping[str, Any] | None:
        """The software of the cell's latest counted run: what an exported entry was measured on."""
        run = self._latest.get(test_id)
        return self.history.run(run).software if run else None

    def entry(self, test_id: str) -> FlatEntry | None:
        """The cell's entry as this run reads it: the file's, with what the history learned over it (`overlay`)."""
        if test_id not in self._entries:
            entry, learned = self.file.entry(test_id), self._learned_of(test_id)
            if learned:  # the latest counted record describes the measurement only where the file has no entry
                latest = self.latest_record(test_id) if entry is None else None
                entry = overlay(entry, learned, latest, self._counted.get(test_id, {}), self.cells)
            self._entries[test_id] = entry
        return self._entries[test_id]

    def reference(self, test_id: str, kind: RatioKind, floor: float) -> Reference | None:
        """What the cell's ratio of `kind` is judged against: the level and spread its runs taught the
        history (learned under the history's own floor), else its entry (`entry`) under `floor`; with the
        rule that fails a run with the runs held back before it."""
        b = self.learned().get(test_id, {}).get(kind.name) if self.cells.covers(test_id) else None
        group = CellGroupRule(self, test_id, kind) if b is not None and b.replay is not None else None
        entry = self.entry(test_id)
        ratio = entry.ratio(kind) if entry is not None else None
        if b is None or b.level is None:
            ref = entry_reference(kind, floor, ratio, str(self.file.path))
            return replace(ref, group_failure=group) if ref is not None else None
        return b.reference(f"{self.history} over {self.file.path}", ratio.method if ratio is not None else None,
                           group)

    def group_failure(self, test_id: str, kind: RatioKind, value: float, tolerance: float) -> str | None:
        """Why a run of `test_id` whose ratio of `kind` measured `value` fails with the runs held back
        before it (``replay.Replay.group_failure``), or None."""
        b = self.learned().get(test_id, {}).get(kind.name)
        if b is None or b.replay is None:
            return None
        failure = b.replay.group_failure(value, self.card, tolerance)
        return failure.describe(b.replay.points) if failure is not None else None

    def judged(self, test_id: str, kind: RatioKind, value: float, verdict: str | None, counts: bool) -> Status | None:
        """What the history makes of this run's `value` of its ratio of `kind` (its `verdict`; `counts`: it
        did not fail): counted, suspect and why, or failed; None where the cell has no history."""
        b = self.learned().get(test_id, {}).get(kind.name)
        if b is None or b.replay is None:
            return None
        return b.replay.preview(value, self.card, verdict, counts)

    def states(self) -> dict[str, str]:
        """Each learned cell's device-time state and sentence: 'learned: 0.9% from 4 runs; about 0.6% after 10'."""
        out = {}
        for test_id, learned in sorted(self.learned().items()):
            b = learned.get(DEVICE.name)
            if b is not None:
                out[test_id] = b.sentence() if b.state != LEARNING else "learning: this run sets the level"
        return out

    def learned_share(self, at_most: float = 0.01) -> tuple[int, int]:
        """(cells whose device tolerance is learned and at most `at_most`, cells with a device figure)."""
        cells = [b[DEVICE.name] for b in self.learned().values() if DEVICE.name in b]
        return sum(1 for b in cells if b.state == LEARNED and b.tolerance <= at_most), len(cells)
