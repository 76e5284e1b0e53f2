"""A baseline entry's figures as typed records, as ``ampbench.results`` types a run's cells: one frozen
dataclass per kind of entry, whose fields carry the `Rule` a file's value must meet
(``ampbench.baselines.schema`` derives its checks from them). On disk an entry stays flat: a timed
entry's ratios (``ratios``, by the kinds of its table, ``ampbench.results.ratios``) share one block of
names, told apart by their ratio's prefix ("" for the wall-clock speedup, "device_", "versus_"; a row
names the figures that break the rule). ``from_figures`` maps the flat figures onto the records,
``to_figures`` back, in the order they were read, so a file loaded and saved again is the same file.
Readers outside the store read attributes; only this module knows the keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

from ampbench.baselines.rules import BOOL, STR_OR_NULL, Rule, count, fraction_or_null, non_negative, or_null, positive
from ampbench.results import MODE_SIDE, SIDES_KEY, Record, TimedRecord, record_type
from ampbench.results.ratio_figures import over_side
from ampbench.results.ratios import DISTRIBUTED_RATIOS, SPEED_RATIOS, WALL, RatioKind
from ampbench.stats import finite_number
from ampbench.tolerance import MIN_SPREAD_VALUES, BetweenRuns, Reference, tolerance_for

_RULE = "rule"  # field metadata: what a file's value must be
_APART = "apart"  # field metadata: what the entry keeps apart from its own figures (its ratios, detail, order)


def figure(rule: Rule | None = None) -> Any:
    """A figure of an entry, None where the entry lacks it; `rule`: what a file's value must be."""
    return field(default=None, metadata={_RULE: rule} if rule is not None else {})


@dataclass(frozen=True)
class RatioEntry:
    """One ratio of an entry: its recorded speedup with its interval and noise, how it was measured, the
    tolerance it was stored with, and the between-run spread learned for it (``ampbench spread``)."""

    # the figures a re-recording keeps from the entry it replaces (``speed.ratio.Ratio.recorded``)
    SPREAD: ClassVar[tuple[str, ...]] = ("between_run_sd", "between_run_count", "between_run_runs",
                                         "between_run_levels", "between_card_sd", "between_run_pooled_dof",
                                         "between_run_pooled_sd", "between_card_dof",
                                         "between_card_source")

    speedup: float | None = figure(positive())
    ci_low: float | None = figure()
    ci_high: float | None = figure()
    rounds: int | None = figure()
    noise: float | None = figure(non_negative())
    tolerance: float | None = figure(positive())
    method: str | None = figure(STR_OR_NULL)  # graph, kernels or wall: device time is one figure per method
    fallback: str | None = figure()
    step_ms: float | None = figure()
    step_ms_ref: float | None = figure()
    recorded_speedup: float | None = figure()  # the recording's own value, once `speedup` is centred on runs
    between_run_sd: float | None = figure(non_negative())
    between_run_count: int | None = figure(count(1))
    between_run_levels: int | None = figure(count(1))
    between_run_level_count: int | None = figure(count(1))
    between_run_runs: list | None = figure()  # the datetimes of the runs counted (schema: by its suffix)
    # The figures below are null where a learning found none: an export from the history writes null for a
    # card term of 0 and for no pooled prior, and `ampbench spread` for a spread learned afresh; a figure
    # the entry held before stays in its place as null. Every reader takes null as absent.
    # how far another card of the model lies from the figure beyond the run-to-run spread (``history.model``)
    between_card_sd: float | None = figure(or_null(non_negative()))
    # the degrees of freedom and the sd of the prior the noise was pooled with across the GPU model's cells
    # (``history.pooling``): `between_run_sd` is the posterior, on the runs' own degrees of freedom and these
    between_run_pooled_dof: int | None = figure(or_null(count(1)))
    between_run_pooled_sd: float | None = figure(or_null(non_negative()))
    # card offsets behind `between_card_sd` where it was pooled over the GPU model's cells
    between_card_dof: int | None = figure(or_null(count(1)))
    # where `between_card_sd` comes from: "measured" on the history's cards, "the other GPU models' files"
    # or "default" where every run came from one card (``history.pooling.CardTerm``)
    between_card_source: str | None = figure(STR_OR_NULL)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def read(cls, figures: Mapping[str, Any], kind: RatioKind) -> "RatioEntry":
        """The ratio of `kind` an entry's `figures` hold."""
        return cls(**{name: figures[kind.entry_key(name)] for name in cls.names() if kind.entry_key(name) in figures})

    def figures(self, kind: RatioKind, nulls: tuple[str, ...] = ()) -> dict[str, Any]:
        """The ratio's figures that are set (and those of `nulls`, set or not), under the names an entry
        gives them as a ratio of `kind`."""
        return {kind.entry_key(name): value for name in self.names()
                if (value := getattr(self, name)) is not None or name in nulls}

    def kept_spread(self) -> "RatioEntry":
        """Only the learned spread (``SPREAD``): what a re-recording measured alike keeps."""
        return RatioEntry(**{name: getattr(self, name) for name in self.SPREAD})

    @classmethod
    def rules(cls, kind: RatioKind, required: bool = False) -> dict[str, Rule]:
        """The rules of the figures of a ratio of `kind`; `required`: the entry must hold its speedup."""
        rules = {kind.entry_key(f.name): f.metadata[_RULE] for f in dataclasses.fields(cls) if _RULE in f.metadata}
        if required:
            rules[kind.entry_key("speedup")] = positive(required=True)
        return rules


# how a speed cell was measured, as its entry stores it; entries recorded before these were stored
# were measured with these values (``file.measurement_mismatch``)
MEASURED_WITH = ("cudnn_benchmark", "block_seconds")


def _apart() -> Any:
    return field(default_factory=dict, metadata={_APART: True})


def _record_figures(kinds: Iterable[RatioKind], latest: Mapping[str, Any] | None,
                    names: tuple[str, ...]) -> dict[str, Any]:
    """`names`' figures of the record `latest`, by the entry's keys (``FlatEntry.from_record``)."""
    if not latest:
        return {}
    record: Record = record_type(latest.get("kind")).from_info(latest)
    out = {}
    for name in names:
        pair = next(((k, f) for k in kinds for f in ("speedup", "method", "fallback", "step_ms", "step_ms_ref")
                     if k.entry_key(f) == name), None)
        if pair:
            assert isinstance(record, TimedRecord), "a learned cell's record holds ratios: a speed or distributed one"
            ratio = record.ratio(pair[0])
            value = (ratio.side(MODE_SIDE if pair[1] == "step_ms" else over_side(pair[0])).step_ms
                     if pair[1].startswith("step_ms") else getattr(ratio, pair[1]))
        else:
            value = record.value(name)
        if value is None and not pair and SIDES_KEY in record.GROUPS:
            value = getattr(record.side(MODE_SIDE), name, None)
        if value is not None:
            out[name] = value
    return out


@dataclass(frozen=True)
class FlatEntry:
    """An entry whose records map onto flat figures: its own fields, its ratios (by name, of the kinds of
    its table, `RATIOS`), figures no field names (`detail`, kept as read) and the order its figures were
    read in (`keys`)."""

    RATIOS: ClassVar[Mapping[str, RatioKind]] = {}  # the kinds of ratio an entry of this kind holds
    REQUIRED: ClassVar[RatioKind | None] = None  # the ratio whose speedup an entry of this kind must hold

    ratios: Mapping[str, RatioEntry] = _apart()
    detail: Mapping[str, Any] = _apart()
    keys: tuple[str, ...] = field(default=(), metadata={_APART: True})

    @classmethod
    def _own(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get(_APART))

    @classmethod
    def _kinds(cls) -> list[RatioKind]:
        """Its kinds of ratio, the longest prefix first, so "" takes only what no other does."""
        return sorted(cls.RATIOS.values(), key=lambda k: -len(k.prefix))

    @classmethod
    def filed(cls) -> list[RatioKind]:
        """Its kinds of ratio in the order its files gained them: the one without a prefix first (the
        wall-clock speedup, in every entry), then as its table has them."""
        return sorted(cls.RATIOS.values(), key=lambda k: k.prefix != "")

    @classmethod
    def from_figures(cls, figures: Mapping[str, Any]):
        """The entry of a baseline file's `figures` (validated by the store: values are kept as they are)."""
        own = {name: figures[name] for name in cls._own() if name in figures}
        taken = set(own)
        ratios = {}
        for kind in cls._kinds():
            keys = {n: kind.entry_key(n) for n in RatioEntry.names()}
            found = {n: figures[k] for n, k in keys.items() if k in figures and k not in taken}
            ratios[kind.name] = RatioEntry(**found)
            taken.update(keys[n] for n in found)
        detail = {k: v for k, v in figures.items() if k not in taken}
        return cls(**own, ratios=ratios, detail=detail, keys=tuple(figures))

    @classmethod
    def of(cls, figures: Mapping[str, Any] | None):
        """`from_figures`, None for no entry."""
        return None if figures is None else cls.from_figures(figures)

    @classmethod
    def from_record(cls, latest: Mapping[str, Any] | None, names: tuple[str, ...]):
        """The entry a cell's latest counted record gives where the file has none of it (`latest`: the record's
        extra_info, of any schema): the figures `names` names, each of a ratio read from the record's ratio of
        that kind, each of a side (idle_share, peak_mem_bytes...) from the mode's side, as an entry holds the
        mode's figures flat; the history's learning is laid over it (``history.baseline_source.overlay``)."""
        return cls.from_figures(_record_figures(cls.RATIOS.values(), latest, names))

    def _flat(self) -> dict[str, Any]:
        flat = {name: getattr(self, name) for name in self._own()}
        for kind in reversed(self._kinds()):
            flat.update(self.ratio(kind).figures(kind, nulls=RatioEntry.names()))
        return {**flat, **self.detail}

    def to_figures(self) -> dict[str, Any]:
        """The flat figures: those read, in their order (a null read stays null), then any set since."""
        flat = self._flat()
        out = {k: flat.get(k) for k in self.keys}
        out.update({k: v for k, v in flat.items() if k not in out and v is not None})
        return out

    def ratio(self, kind: RatioKind) -> RatioEntry:
        """Its ratio of `kind`; one holding nothing where the entry has none."""
        return self.ratios.get(kind.name) or RatioEntry()

    def with_ratio(self, kind: RatioKind, ratio: RatioEntry, order: tuple[str, ...] = (),
                   moved: tuple[str, ...] = ()):
        """The entry with `ratio` as its ratio of `kind`. Its figures keep their places; those of `moved`
        leave theirs, and each figure of `order` (names of RatioEntry) that the entry lacked, `moved`
        among them, follows every other figure, in that order, where `ratio` sets it."""
        gone = {kind.entry_key(n) for n in moved}
        keys = [k for k in self.keys if k not in gone]
        keys += [kind.entry_key(n) for n in order if kind.entry_key(n) not in keys and getattr(ratio, n) is not None]
        return dataclasses.replace(self, ratios={**self.ratios, kind.name: ratio}, keys=tuple(keys))

    def measured_with(self) -> dict[str, object]:
        """The measurement settings the entry names (``file.measurement_mismatch`` defaults the rest)."""
        return {name: value for name in MEASURED_WITH if (value := getattr(self, name, None)) is not None}

    @classmethod
    def rules(cls) -> dict[str, Rule]:
        """What each figure of a file's entry of this kind must be, as its fields say."""
        rules = {f.name: f.metadata[_RULE] for f in dataclasses.fields(cls) if _RULE in f.metadata}
        for kind in reversed(cls._kinds()):
            rules.update(RatioEntry.rules(kind, required=kind is cls.REQUIRED))
        return rules


@dataclass(frozen=True)
class SpeedEntry(FlatEntry):
    """``test_speed[model-mode]``: its ratios (the wall-clock, device-time and, for a compiled cell, versus
    ones) and the cell's own figures."""

    RATIOS: ClassVar[Mapping[str, RatioKind]] = SPEED_RATIOS
    REQUIRED: ClassVar[RatioKind | None] = WALL  # every speed entry holds its wall-clock speedup

    versus: str | None = figure(STR_OR_NULL)  # the versus side's mode: "amp_bf16", "amp_bf16 compiled"
    batch_size: int | None = figure()
    memory_ratio: float | None = figure()
    peak_mem_bytes: int | None = figure()
    kernels: list | None = figure()  # the mode's top kernels, {"name", "ms"} per step (schema: structured)
    compile_s: float | None = figure(positive())
    cudnn_benchmark: bool | None = figure(BOOL)
    block_seconds: float | None = figure(positive())
    throughput: float | None = figure()
    idle_share: float | None = figure()
    host_bound: bool | None = figure()
    # the mode's energy per training step over fp32's (``nvml.Energy``), where the card's counter was read:
    # recorded, never judged (docs/design.md, "Clocks and energy")
    energy_ratio: float | None = figure(positive())


@dataclass(frozen=True)
class DistributedEntry(FlatEntry):
    """``test_ddp_speed`` / ``test_fsdp2_speed[...]``: its ratios: the wall-clock speedup under the same
    parallelism (flat names, no prefix), its device-time speedup ("device_"; absent from entries
    recorded without one, whose cells the wall-clock speedup holds), the scaling efficiency
    (``scaling_efficiency``, ``_low``, ``_high``, ``scaling_noise``) and the scaling efficiency in device
    time ("device_scaling_", its figure ``device_scaling_speedup``)."""

    RATIOS: ClassVar[Mapping[str, RatioKind]] = DISTRIBUTED_RATIOS

    world_size: int | None = figure()
    batch_size: int | None = figure()
    block_seconds: float | None = figure()
    cudnn_benchmark: bool | None = figure()


@dataclass(frozen=True)
class MemoryEntry(FlatEntry):
    """``test_memory[model-mode]``: peak memory at the default batch and its ratio to fp32's, and, where
    the cell searched it, the largest batch with the budget (cap, allocator settings) it was found under."""

    batch_size: int | None = figure()
    peak_mem_bytes: int | None = figure(positive(required=True))
    memory_ratio: float | None = figure(positive(required=True))
    max_batch: int | None = figure(count(1))
    max_batch_step: int | None = figure(count(1))  # the search's grid step there
    max_batch_ratio: float | None = figure(positive())
    max_batch_limited: bool | None = figure(BOOL)  # the search stopped at the batch limit
    max_batch_throughput_ratio: float | None = figure(positive())
    cap_bytes: float | None = figure(positive())
    alloc_conf: str | None = figure(STR_OR_NULL)


@dataclass(frozen=True)
class ConvergenceEntry(FlatEntry):
    """``test_convergence[model-mode]``: the accuracy the mode must stay within `margin` of its parity mode's
    (a person may set the margin; null or absent: the budget's default)."""

    margin: float | None = figure(fraction_or_null())



# the type of entry of each kind of cell, by its test's name (``entry_kind``); a cell of a kind not listed
# (the input pipeline's) reads no baseline
ENTRY_TYPES: Mapping[str, type[FlatEntry]] = {
    "test_speed": SpeedEntry, "test_memory": MemoryEntry, "test_convergence": ConvergenceEntry,
    "test_ddp_speed": DistributedEntry, "test_fsdp2_speed": DistributedEntry,
}


def entry_kind(test_id: str) -> str:
    """'test_speed[mlp-fp32]' -> 'test_speed': the key of its schema and of its type (`ENTRY_TYPES`)."""
    return test_id.split("[", 1)[0]


def entry_of(test_id: str, figures: Mapping[str, Any] | None) -> FlatEntry | None:
    """The entry of `test_id` read by its cell's type from its `figures` (None: no entry, or a kind of cell
    that reads none)."""
    kind = ENTRY_TYPES.get(entry_kind(test_id))
    return kind.of(figures) if kind is not None else None


# -- the tolerance a ratio entry gives (the one rule of ``ampbench.tolerance.tolerance_for``) --------------

def entry_tolerance(kind: RatioKind, floor: float, ratio: RatioEntry | None, noise: float | None = None) -> float:
    """The tolerance of a ratio of `kind` held against its baseline entry (``entries.RatioEntry``): its
    learned spread's, else its recorded noise's (`noise` where the entry is being written), at least the
    kind's unlearned tolerance until a spread is learned, never below `floor` or the kind's own."""
    low, unlearned = kind.rule(floor)
    return tolerance_for(low, (ratio.noise if ratio is not None else None) if noise is None else noise,
                         learned_spread(ratio), unlearned=unlearned)


def entry_reference(kind: RatioKind, floor: float, ratio: RatioEntry | None, source: str) -> Reference | None:
    """What a ratio of `kind` is judged against where its baseline entry (``entries.RatioEntry``) is the
    source: its figure, and the tolerance ``entry_tolerance`` gives it; None where the entry holds no figure."""
    level = finite_number(ratio.speedup) if ratio is not None else None
    if ratio is None or level is None:
        return None
    low, unlearned = kind.rule(floor)
    return Reference.of(level, low, ratio.noise, learned_spread(ratio), source=source, method=ratio.method,
                        unlearned=unlearned)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def learned_spread(ratio: RatioEntry | None) -> BetweenRuns | None:
    """A ratio's between-run spread, where it was learned with at least MIN_SPREAD_VALUES - 1 degrees of
    freedom (MIN_SPREAD_VALUES values at one level). The figure is centred when ``ampbench spread`` kept
    the recording's own value beside it (`recorded_speedup`); `between_run_levels` and
    `between_run_level_count` say how many levels the values lie at and how many are at the figure's
    (one level, all of them, where absent)."""
    if ratio is None:
        return None
    sd, count = finite_number(ratio.between_run_sd), _int(ratio.between_run_count)
    levels = _int(1 if ratio.between_run_levels is None else ratio.between_run_levels)
    at_level = _int(ratio.between_run_level_count)
    if sd is None or count is None or levels is None or levels < 1 or count - levels + 1 < MIN_SPREAD_VALUES:
        return None
    if at_level is not None and not 1 <= at_level <= count - levels + 1:
        return None  # more values at one level than the levels leave room for: no spread to trust
    return BetweenRuns(sd, count, finite_number(ratio.recorded_speedup) is not None, levels, at_level,
                       finite_number(ratio.between_card_sd) or 0.0, pooled_dof(ratio), _int(ratio.between_card_dof))


def pooled_dof(ratio: RatioEntry) -> int:
    """The degrees of freedom a ratio's spread borrowed from the GPU model's other cells (0: none)."""
    lent, s0 = _int(ratio.between_run_pooled_dof), finite_number(ratio.between_run_pooled_sd)
    return lent if lent is not None and lent >= 1 and s0 is not None else 0
