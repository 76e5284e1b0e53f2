"""Records of the cells that time a mode against fp32 in interleaved rounds: speed (one GPU) and
distributed (N ranks). Each holds its ratios by name (``ratios``: one ``RatioFigures`` per kind of
ratio the cell measured, ``ampbench.results.ratios``), as a baseline entry holds them:
``{"ratios": {"device": {...}, "wall": {...}, "versus": {...}}, ...}``. A record of schema 1 held the
same figures flat, each under its ratio's prefix; it reads into the same ratios, by the names its rows
give (``RatioKind.flat``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, ClassVar, Mapping

from ampbench.nvml import Energy
from ampbench.results.base import (
    FigureGroup,
    Group,
    Record,
    field_specs,
    flag,
    number,
    part,
    raw,
    scalar,
    text,
)
from ampbench.results.ratio_figures import (
    LEGACY_STEPS,
    NOTHING,
    RATIO_FIELDS,
    RatioFigures,
    over_side,
)
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, DISTRIBUTED_RATIOS, SPEED_RATIOS, RatioKind
from ampbench.results.schema import (
    FLAT_RATIOS_SCHEMA,
    FP32_SIDE,
    MODE_SIDE,
    OBJECT,
    RATIOS_KEY,
    SCHEMA_KEY,
    SIDES_KEY,
    check,
    check_order,
)
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


@lru_cache(maxsize=None)
def _flat(kind: RatioKind) -> tuple[tuple[str, str], ...]:
    """(figure, its name in a record of schema 1) of each figure schema 1 held of `kind` (a side's step times
    by the names ``LEGACY_STEPS`` gives them)."""
    names = [name for name, _, _ in RATIO_FIELDS] + [flat for side in LEGACY_STEPS.values() for flat in side.values()]
    return tuple((name, kind.flat(name)) for name in names if kind.flat(name))


@lru_cache(maxsize=None)
def _own_kind(kinds: tuple[RatioKind, ...]) -> RatioKind | None:
    """The kind of a record's table (`kinds`: its ``RATIOS``) whose figures are the record's own (no
    prefix): asked for every estimate a report reads, so found once per table."""
    return next((k for k in kinds if not k.prefix), None)


@lru_cache(maxsize=None)
def _flat_names(kinds: tuple[RatioKind, ...]) -> tuple[frozenset[str], dict[RatioKind, tuple[str, ...]]]:
    """Every name schema 1 gave a figure of a record's kinds of ratio (`kinds`: its ``RATIOS``), and per
    kind the names of its own figures: not those it shares with another kind (the record's rounds or
    confidence, say). Once per table, not per cell; a table that gains a kind is another table."""
    names = [flat for kind in kinds for _, flat in _flat(kind)]
    shared = {flat for flat in names if names.count(flat) > 1}
    return frozenset(names), {kind: tuple(flat for _, flat in _flat(kind) if flat not in shared) for kind in kinds}


@dataclass(frozen=True)
class TimedRecord(Record):
    """A cell timed in interleaved rounds: its ratios by name, of the kinds its table (``RATIOS``) rows."""

    RATIOS: ClassVar[Mapping[str, RatioKind]] = {}
    TIMED: ClassVar[bool] = True  # pytest-benchmark's figures: the mode's time per step in each round

    ratios: Mapping[str, RatioFigures] = part()

    def ratio(self, kind: RatioKind) -> RatioFigures:
        """The ratio of `kind`; one holding nothing where the cell did not measure it."""
        return self.ratios.get(kind.name, NOTHING)

    def estimate(self, kind: RatioKind) -> SpeedupEstimate | None:
        """The ratio of `kind` with its interval, as the suite measured it; None where incomplete."""
        own = _own_kind(tuple(self.RATIOS.values()))
        return self.ratio(kind).estimate(self.ratio(own).confidence if own is not None else None)

    def verdict_of(self, kind: RatioKind) -> Verdict | None:
        """The verdict of one ratio, where the cell wrote it apart; the cell's otherwise."""
        own = self.ratio(kind).verdict
        return own if own is not None else self.verdict

    def _part_info(self, only_set: bool) -> dict[str, Any]:
        info = super()._part_info(only_set)
        if only_set and not self.ratios:
            return info
        order = [*self.RATIOS, *(name for name in self.ratios if name not in self.RATIOS)]
        return {RATIOS_KEY: {name: self.ratios[name].to_info() for name in order if name in self.ratios}, **info}

    @classmethod
    def _parts(cls, info: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        groups, taken = super()._parts(info)
        if info.get(SCHEMA_KEY) != FLAT_RATIOS_SCHEMA:
            ratios = info.get(RATIOS_KEY)
            stored = ratios if isinstance(ratios, dict) else {}
            over = {name: over_side(kind) for name, kind in cls.RATIOS.items()}
            return {**groups, "ratios": {name: RatioFigures.read(figures, over=over.get(name, FP32_SIDE))
                                         for name, figures in stored.items() if isinstance(figures, dict)}}, \
                taken | {RATIOS_KEY}
        names, own = _flat_names(tuple(cls.RATIOS.values()))
        # a ratio was measured where a figure of its own was: not only one it shares with another
        measured = [kind for kind in cls.RATIOS.values() if any(info.get(flat) is not None for flat in own[kind])]
        ratios = {kind.name: RatioFigures.read(info, dict(_flat(kind)).get, over_side(kind)) for kind in measured}
        return {**groups, "ratios": ratios}, taken | names

    @classmethod
    def _stored(cls, info: Mapping[str, Any], where: str) -> tuple[list[tuple[Mapping, Any, str]], list[str]]:
        """(each ratio as `info` holds it: its figures, how they are named there (None: as RatioFigures names
        them) and where it lies; why `info` holds no ratios at all)."""
        if info.get(SCHEMA_KEY) == FLAT_RATIOS_SCHEMA:  # flat, each figure under the name its row gives it
            return [(info, dict(_flat(kind)).get, where) for kind in cls.RATIOS.values()], []
        problems = check(info, {RATIOS_KEY: OBJECT}, where)
        ratios = (info.get(RATIOS_KEY) or {}) if not problems else {}
        problems += check(ratios, {name: OBJECT for name in ratios}, f"{where}.{RATIOS_KEY}")
        return [(figures, None, f"{where}.{RATIOS_KEY}.{name}") for name, figures in ratios.items()], problems

    @classmethod
    def _part_problems(cls, info: Mapping[str, Any], where: str) -> list[str]:
        problems = super()._part_problems(info, where)
        if problems:
            return problems
        stored, problems = cls._stored(info, where)
        if problems:
            return problems
        problems = [p for figures, named, at in stored for p in check(figures, field_specs(RatioFigures, named), at)]
        if problems:
            return list(dict.fromkeys(problems))  # a figure two ratios of schema 1 share is named once
        return list(dict.fromkeys(p for figures, named, at in stored for order in _ordered(named)
                                  for p in check_order(figures, order, at)))


def _ordered(named: Any) -> list[tuple[str, ...]]:
    """The figures of a ratio that must be ascending, as `named` names them (None: as RatioFigures does)."""
    if named is None:
        return list(RatioFigures.ORDERED)
    return [tuple(named(n) for n in names) for names in RatioFigures.ORDERED if all(named(n) for n in names)]


@dataclass(frozen=True)
class SpeedSide(FigureGroup):
    """One side of a speed cell (the mode's, fp32's): what it cost to prepare, how it was timed, how far
    its eager step waits on the host, its throughput and memory; the mode's TFLOP/s."""

    prepare_s: float | None = number()
    # a compiled cell's first step: dynamo and Inductor compiling it, caches cold (--perf-compile)
    compile_s: float | None = number()
    steps_per_block: int | None = number()
    kernel_ms: float | None = number()  # the profiler's kernel sum of a step
    # how far the eager step waits on the host
    busy_ms: float | None = number()
    host_overhead_ms: float | None = number()
    idle_share: float | None = number()
    host_bound: bool | None = flag()
    # samples per second of the eager step (the wall clock's median round), and of the mode's in device time
    throughput: float | None = number()
    device_throughput: float | None = number()
    peak_mem_bytes: int | None = number()
    # the GPU's idle share inside one profiled held block, and its longest gap: the check that no host
    # entered the device time
    held_block_idle_share: float | None = number()
    held_block_longest_gap_us: float | None = number()
    tflops: float | None = number()
    tflops_peak: float | None = number()
    tflops_fraction: float | None = number()


@dataclass(frozen=True)
class DeviceQueue(FigureGroup):
    """How a timed cell's device blocks were queued ahead of the GPU (``ampbench.speed.held``)."""

    text: str | None = text()  # in words: ``QueueStats.describe``
    blocks: int | None = number()
    held_blocks: int | None = number()
    retried_blocks: int | None = number()
    per_replay_blocks: int | None = number()
    chunk_replays: int | None = number()  # the fewest replays one hold covered, where blocks were split
    hold_ms: float | None = number()


@dataclass(frozen=True)
class CardFigures(FigureGroup):
    """Card admission (``history.cards``): this card's fp32 device time per step against its GPU model's
    level, from the baseline file and the history's other cards; `outlier` names an outlier card. It
    informs: no verdict rests on it."""

    uuid: str | None = text()
    step_ms: float | None = number()  # the card's level: the median of its runs' fp32 step, this run's among them
    runs: int | None = number()
    level_ms: float | None = number()  # the model's level: the median of its other cards'
    cards: int | None = number()  # levels behind it (the baseline file's as one)
    off: float | None = number()  # step_ms / level_ms - 1
    z: float | None = number()  # how many spreads the card lies off
    spread: float | None = number()  # the sd of ln the distance is measured in
    outlier: bool | None = flag()
    source: str | None = text()  # where the level came from
    unchecked: str | None = text()  # why the card was not compared, where it was not


def _legacy(names: str) -> dict[str, str]:
    """figure -> key pairs, from "figure=key" words (a bare word: the same name)."""
    def pair(word: str) -> tuple[str, str]:
        figure, key = word.split("=") if "=" in word else (word, word)
        return figure, key

    return dict(pair(w) for w in names.split())


@dataclass(frozen=True)
class SpeedRecord(TimedRecord):
    """``test_speed[model-mode]``: the device-time speedup (the gate by default) and the wall-clock
    speedup of eager steps, each with its interval, baseline and verdict (``ratios``; a compiled cell's
    ratio over its versus side beside them); how long the eager step waits on the host; throughput,
    memory and TFLOP/s of both sides."""

    KIND: ClassVar[str] = "speed"
    RATIOS: ClassVar[Mapping[str, RatioKind]] = SPEED_RATIOS

    batch_size: int | None = number()
    gate: str | None = text()  # --perf-gate
    gated: list | None = raw()  # the figures that held the cell: "device", "wall"
    # each side's own figures, by side (``SpeedSide``): the mode's and fp32's
    sides: Mapping[str, SpeedSide] = part()
    # how the device blocks were queued ahead of the GPU (``ampbench.speed.held``)
    device_queue: DeviceQueue = part(lambda: DeviceQueue())
    kernel_speedup: float | None = number()
    kernels: list | None = raw()  # the mode's top kernels, {"name", "ms"} per step
    kernel_changes: str | None = text()
    memory_ratio: float | None = number()
    recording: bool | None = flag()  # this run recorded the cell's baseline
    # a slowdown injected on purpose (ampbench.slowdown): a fraction of the step, or how (torchao's
    # emulated fp8 matmul); no sample of noise
    injected_slowdown: float | str | None = scalar()
    weights_moved: bool | None = flag()
    final_loss_finite: bool | None = flag()
    loss_scale: float | None = number()
    # seconds the cell spent in each phase: preparing its mode's (and versus) side, and that side's
    # preparation by step (prepare_build, ..._warm_up, ..._capture, ..._profile, ..._idle), each ratio's
    # timing and judging by its kind's name, and the check that the mode trained (fp32's side: its sides'
    # prepare_s)
    phase_seconds: dict | None = raw()
    baseline_compile_s: float | None = number()
    # the side a compiled cell's second ratio is over (modes.versus_of): the mode eager (the compile gain),
    # or compiled amp_bf16 for the fp8 modes: "amp_bf16", "amp_bf16 compiled"
    versus: str | None = text()
    cudnn_benchmark: bool | None = flag()
    block_seconds: float | None = number()
    # this card's fp32 step against its GPU model's level (``CardFigures``); none in a record written before
    card: CardFigures = part(lambda: CardFigures())
    # the card's clocks, throttle reasons and energy over the device-time ratio's blocks, read from NVML
    # (``gate.conditions.conditions_info``): {"read": false, "why_unread"} where none was; absent from records
    # written before they were read
    conditions: dict | None = raw()

    @property
    def energy(self) -> Energy | None:
        """Each side's energy per training step and their ratio, where the card's counter was read."""
        return Energy.from_info(self.conditions.get("energy")) if isinstance(self.conditions, dict) else None

    # its grouped figures, and the keys records of schemas 1 and 2 gave them, flat
    GROUPS: ClassVar[Mapping[str, Group]] = {
        SIDES_KEY: Group(SpeedSide, by_side=True, flat={
            MODE_SIDE: _legacy("prepare_s compile_s steps_per_block kernel_ms busy_ms host_overhead_ms idle_share "
                               "host_bound throughput device_throughput peak_mem_bytes "
                               "held_block_idle_share=device_block_idle_share "
                               "held_block_longest_gap_us=device_block_longest_gap_us "
                               "tflops tflops_peak tflops_fraction"),
            FP32_SIDE: _legacy("prepare_s=ref_prepare_s compile_s=ref_compile_s steps_per_block=ref_steps_per_block "
                               "kernel_ms=kernel_ms_ref busy_ms=busy_ms_ref host_overhead_ms=host_overhead_ms_ref "
                               "idle_share=idle_share_ref host_bound=host_bound_ref throughput=throughput_ref "
                               "peak_mem_bytes=peak_mem_ref_bytes held_block_idle_share=device_block_idle_share_ref")}),
        "device_queue": Group(DeviceQueue, flat=_legacy(
            "text=device_queue blocks=device_blocks held_blocks=device_held_blocks "
            "retried_blocks=device_retried_blocks per_replay_blocks=device_per_replay_blocks "
            "chunk_replays=device_chunk_replays hold_ms=device_hold_ms")),
        "card": Group(CardFigures, flat={}),
    }


@dataclass(frozen=True)
class DistributedSide(FigureGroup):
    """One side of a distributed cell (the mode's, fp32's) under the same parallelism on N ranks."""

    throughput: float | None = number()  # samples/s of all ranks together
    throughput_per_gpu: float | None = number()
    # the share of a step in communication kernels, and of that the share overlapped with compute
    comm_share: float | None = number()
    comm_overlap: float | None = number()
    idle_share: float | None = number()  # the most idle rank's share of the step with no kernel running
    host_bound: bool | None = flag()  # idle_share above hostload.HOST_BOUND_IDLE_SHARE: a drop is not failed
    steps_per_block: int | None = number()


@dataclass(frozen=True)
class DistributedRecord(TimedRecord):
    """``test_ddp_speed`` / ``test_fsdp2_speed[model-mode-comm]``: a mode's speedup over fp32 under the same
    parallelism on N ranks, in device time (the gate by default, where measured) and in wall clock, its
    scaling efficiency against one GPU in both (``ratios``), and the share of communication."""

    KIND: ClassVar[str] = "distributed"
    RATIOS: ClassVar[Mapping[str, RatioKind]] = DISTRIBUTED_RATIOS

    comm: str | None = text()  # the communication variant
    world_size: int | None = number()
    nodes: int | None = number()  # the hosts the ranks ran on (torchrun's nodes); absent: one
    batch_size_per_gpu: int | None = number()
    # each side's own figures, by side (``DistributedSide``): the mode's and fp32's
    sides: Mapping[str, DistributedSide] = part()
    # how rank 0's held blocks were queued (``ampbench.speed.held``)
    device_queue: DeviceQueue = part(lambda: DeviceQueue())
    gated: list | None = raw()  # the --perf-gate figures that held the cell: "device", "wall"
    recording: bool | None = flag()
    weights_moved: bool | None = flag()
    loss_scale: float | None = number()
    backend: str | None = text()
    strategy: str | None = text()
    block_seconds: float | None = number()
    cudnn_benchmark: bool | None = flag()
    launch_s: float | None = number()

    # its grouped figures, and the keys records of schemas 1 and 2 gave them, flat
    GROUPS: ClassVar[Mapping[str, Group]] = {
        SIDES_KEY: Group(DistributedSide, by_side=True, flat={
            MODE_SIDE: _legacy("throughput throughput_per_gpu comm_share comm_overlap idle_share host_bound "
                               "steps_per_block"),
            FP32_SIDE: _legacy("throughput_per_gpu=throughput_per_gpu_ref comm_share=comm_share_ref "
                               "comm_overlap=comm_overlap_ref idle_share=idle_share_ref "
                               "steps_per_block=ref_steps_per_block")}),
        "device_queue": Group(DeviceQueue, flat={"text": "device_queue"}),
    }

    @classmethod
    def _parts(cls, info: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        parts, names = super()._parts(info)
        # the scaling efficiency in device time is timed on the device-time speedup's clock: a record that
        # named the method on the speedup alone (written before the efficiency carried it) still says it
        ratios = parts["ratios"]
        eff, device = ratios.get(DEVICE_SCALING.name), ratios.get(DIST_DEVICE.name)
        if eff is not None and eff.method is None and eff.speedup is not None and device is not None:
            ratios[DEVICE_SCALING.name] = replace(eff, method=device.method)
        return parts, names
