"""A baseline entry's figures as typed records, as ``ampbench.results`` types a run's cells: one frozen
dataclass per kind of entry, whose fields carry the `Rule` a file's value must meet
(``ampbench.baselines.schema`` derives its checks from them). On disk an entry stays flat: a speed
entry's three ratios share one block of names, told apart by a prefix ("" for the wall-clock speedup,
"device_", "versus_"). ``from_figures`` maps the flat figures onto the records, ``to_figures`` back, in
the order they were read, so a file loaded and saved again is the same file. Readers outside the store
read attributes; only this module knows the keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from ampbench.baselines.rules import BOOL, STR_OR_NULL, Rule, count, fraction_or_null, non_negative, positive
from ampbench.stats import finite_number
from ampbench.verdict import MIN_SPREAD_VALUES, UNLEARNED_TOLERANCE, BetweenRuns, tolerance_for

_RULE = "rule"  # field metadata: what a file's value must be
_PREFIX = "prefix"  # field metadata: a ratio's prefix in the flat figures


def figure(rule: Rule | None = None) -> Any:
    """A figure of an entry, None where the entry lacks it; `rule`: what a file's value must be."""
    return field(default=None, metadata={_RULE: rule} if rule is not None else {})


def _ratio(prefix: str) -> Any:
    return field(default_factory=lambda: RatioEntry(), metadata={_PREFIX: prefix})


@dataclass(frozen=True)
class RatioEntry:
    """One ratio of an entry: its recorded speedup with its interval and noise, how it was measured, the
    tolerance it was stored with, and the between-run spread learned for it (``ampbench spread``)."""

    # the figures a re-recording keeps from the entry it replaces (``speed.ratio.Ratio.recorded``)
    SPREAD: ClassVar[tuple[str, ...]] = ("between_run_sd", "between_run_count", "between_run_runs",
                                         "between_run_levels", "between_card_sd")

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
    # how far another card of the model lies from the figure beyond the run-to-run spread (``history.model``)
    between_card_sd: float | None = figure(non_negative())

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def read(cls, figures: Mapping[str, Any], prefix: str) -> "RatioEntry":
        """The ratio `figures` hold under `prefix`."""
        return cls(**{name: figures[prefix + name] for name in cls.names() if prefix + name in figures})

    def figures(self, prefix: str, nulls: tuple[str, ...] = ()) -> dict[str, Any]:
        """The ratio's figures that are set (and those of `nulls`, set or not), under their names with `prefix`."""
        return {prefix + name: value for name in self.names()
                if (value := getattr(self, name)) is not None or name in nulls}

    def kept_spread(self) -> "RatioEntry":
        """Only the learned spread (``SPREAD``): what a re-recording measured alike keeps."""
        return RatioEntry(**{name: getattr(self, name) for name in self.SPREAD})

    @classmethod
    def rules(cls, prefix: str, required: bool = False) -> dict[str, Rule]:
        """The rules of the ratio's figures under `prefix`; `required`: the entry must hold its speedup."""
        rules = {prefix + f.name: f.metadata[_RULE] for f in dataclasses.fields(cls) if _RULE in f.metadata}
        if required:
            rules[prefix + "speedup"] = positive(required=True)
        return rules


# how a speed cell was measured, as its entry stores it; entries recorded before these were stored
# were measured with these values (``store.measurement_mismatch``)
MEASURED_WITH = ("cudnn_benchmark", "block_seconds")


@dataclass(frozen=True)
class FlatEntry:
    """An entry whose records map onto flat figures: its own fields, its ratios (each under a prefix),
    figures no field names (`detail`, kept as read) and the order its figures were read in (`keys`)."""

    REQUIRED: ClassVar[str | None] = None  # the prefix whose speedup an entry of this kind must hold

    detail: Mapping[str, Any] = field(default_factory=dict, metadata={_PREFIX: None})
    keys: tuple[str, ...] = field(default=(), metadata={_PREFIX: None})

    @classmethod
    def _own(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls) if _PREFIX not in f.metadata)

    @classmethod
    def _ratios(cls) -> tuple[tuple[str, str], ...]:
        """(field, prefix) of each ratio, longest prefix first, so "" takes only what no other does."""
        pairs = [(f.name, f.metadata[_PREFIX]) for f in dataclasses.fields(cls) if f.metadata.get(_PREFIX) is not None]
        return tuple(sorted(pairs, key=lambda p: -len(p[1])))

    @classmethod
    def from_figures(cls, figures: Mapping[str, Any]):
        """The entry of a baseline file's `figures` (validated by the store: values are kept as they are)."""
        own = {name: figures[name] for name in cls._own() if name in figures}
        taken = set(own)
        ratios = {}
        for name, prefix in cls._ratios():
            keys = [prefix + n for n in RatioEntry.names() if prefix + n in figures and prefix + n not in taken]
            ratios[name] = RatioEntry(**{k[len(prefix):]: figures[k] for k in keys})
            taken.update(keys)
        detail = {k: v for k, v in figures.items() if k not in taken}
        return cls(**own, **ratios, detail=detail, keys=tuple(figures))

    @classmethod
    def of(cls, figures: Mapping[str, Any] | None):
        """`from_figures`, None for no entry."""
        return None if figures is None else cls.from_figures(figures)

    def _flat(self) -> dict[str, Any]:
        flat = {name: getattr(self, name) for name in self._own()}
        for name, prefix in reversed(self._ratios()):
            flat.update({prefix + n: getattr(getattr(self, name), n) for n in RatioEntry.names()})
        return {**flat, **self.detail}

    def to_figures(self) -> dict[str, Any]:
        """The flat figures: those read, in their order (a null read stays null), then any set since."""
        flat = self._flat()
        out = {k: flat.get(k) for k in self.keys}
        out.update({k: v for k, v in flat.items() if k not in out and v is not None})
        return out

    def ratio(self, prefix: str) -> RatioEntry:
        """The ratio stored under `prefix`."""
        return next(getattr(self, name) for name, p in self._ratios() if p == prefix)

    def with_ratio(self, prefix: str, ratio: RatioEntry, order: tuple[str, ...] = (), moved: tuple[str, ...] = ()):
        """The entry with `ratio` under `prefix`. Its figures keep their places; those of `moved` leave
        theirs, and each figure of `order` (names of RatioEntry) that the entry lacked, `moved` among them,
        follows every other figure, in that order, where `ratio` sets it."""
        field_name = next(name for name, p in self._ratios() if p == prefix)
        gone = {prefix + n for n in moved}
        keys = [k for k in self.keys if k not in gone]
        keys += [prefix + n for n in order if prefix + n not in keys and getattr(ratio, n) is not None]
        return dataclasses.replace(self, **{field_name: ratio}, keys=tuple(keys))

    def measured_with(self) -> dict[str, object]:
        """The measurement settings the entry names (``store.measurement_mismatch`` defaults the rest)."""
        return {name: value for name in MEASURED_WITH if (value := getattr(self, name, None)) is not None}

    @classmethod
    def rules(cls) -> dict[str, Rule]:
        """What each figure of a file's entry of this kind must be, as its fields say."""
        rules = {f.name: f.metadata[_RULE] for f in dataclasses.fields(cls) if _RULE in f.metadata}
        for name, prefix in reversed(cls._ratios()):
            rules.update(RatioEntry.rules(prefix, required=prefix == cls.REQUIRED))
        return rules


@dataclass(frozen=True)
class SpeedEntry(FlatEntry):
    """``test_speed[model-mode]``: the wall-clock, device-time and (compiled cells) versus ratios, and
    the cell's own figures."""

    REQUIRED: ClassVar[str | None] = ""  # the wall-clock speedup: every speed entry holds it

    wall: RatioEntry = _ratio("")
    device: RatioEntry = _ratio("device_")
    versus_ratio: RatioEntry = _ratio("versus_")  # a compiled cell's second ratio, over `versus`
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


@dataclass(frozen=True)
class DistributedEntry(FlatEntry):
    """``test_ddp_speed`` / ``test_fsdp2_speed[...]``: the wall-clock speedup under the same parallelism
    (flat names, no prefix), its device-time speedup ("device_"; absent from entries recorded without
    one, whose cells the wall-clock speedup holds), the scaling efficiency (``scaling_efficiency``,
    ``_low``, ``_high``, ``scaling_noise``) and the scaling efficiency in device time ("device_scaling_",
    its figure ``device_scaling_speedup``)."""

    speedup: RatioEntry = _ratio("")
    device: RatioEntry = _ratio("device_")
    device_efficiency: RatioEntry = _ratio("device_scaling_")  # the scaling efficiency in device time
    world_size: int | None = figure()
    batch_size: int | None = figure()
    block_seconds: float | None = figure()
    cudnn_benchmark: bool | None = figure()

    # the efficiency's names predate the prefixes: mapped one by one
    EFFICIENCY: ClassVar[dict[str, str]] = {"speedup": "scaling_efficiency", "ci_low": "scaling_efficiency_low",
                                            "ci_high": "scaling_efficiency_high", "noise": "scaling_noise"}

    @property
    def efficiency(self) -> RatioEntry:
        return RatioEntry(**{name: self.detail.get(key) for name, key in self.EFFICIENCY.items()})

    def ratio(self, prefix: str) -> RatioEntry:
        """The speedup under "", the scaling efficiency under "scaling_"."""
        return self.efficiency if prefix == "scaling_" else super().ratio(prefix)


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
    """``test_convergence[model-mode]``: the accuracy the mode must stay within `margin` of its reference's
    (a person may set the margin; null or absent: the budget's default)."""

    margin: float | None = figure(fraction_or_null())


# -- the tolerance a ratio entry gives (the one rule of ``ampbench.verdict.tolerance_for``) --------------

def entry_tolerance(floor: float, ratio: RatioEntry | None, noise: float | None = None) -> float:
    """The tolerance of a ratio held against its baseline entry (``entries.RatioEntry``): its learned
    spread's, else its recorded noise's (`noise` where the entry is being written), at least
    UNLEARNED_TOLERANCE until a spread is learned, never below `floor`."""
    return tolerance_for(floor, (ratio.noise if ratio is not None else None) if noise is None else noise,
                         learned_spread(ratio), unlearned=UNLEARNED_TOLERANCE)


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
                       finite_number(ratio.between_card_sd) or 0.0)
