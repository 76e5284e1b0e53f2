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

from ampbench.results.base import (
    Record,
    checked,
    encode,
    field_specs,
    flag,
    number,
    part,
    raw,
    read_fields,
    reading,
    scalar,
    text,
)
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, DISTRIBUTED_RATIOS, SPEED_RATIOS, RatioKind
from ampbench.results.schema import (
    CONFIDENCE,
    COUNT,
    FLAT_RATIOS_SCHEMA,
    NON_NEGATIVE,
    OBJECT,
    POSITIVE,
    RATIOS_KEY,
    SCHEMA_KEY,
    VERDICT,
    check,
    check_order,
)
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Verdict


@dataclass(frozen=True)
class RatioFigures:
    """One ratio of a timed cell, as its record holds it: the estimate with its interval, what it was held
    against and its verdict, how it was measured, its step and round times, and its interval across
    runs where its baseline learned a between-run spread. A ratio holds the figures it measured."""

    speedup: float | None = checked(POSITIVE)  # the ratio: a speedup, or a scaling efficiency
    speedup_low: float | None = checked(POSITIVE)
    speedup_high: float | None = checked(POSITIVE)
    rounds: int | None = checked(COUNT)
    # 99% where the figure gates the cell, speed.LOOK_CONFIDENCE where it is only reported
    confidence: float | None = checked(CONFIDENCE)
    baseline_speedup: float | None = checked(POSITIVE)
    tolerance: float | None = checked(NON_NEGATIVE)
    line: float | None = number()
    drop: float | None = number()
    confirm_speedup: float | None = number()  # the confirming batch's, where one ran
    verdict: Verdict | None = checked(VERDICT)
    method: str | None = text()  # how device time was measured: graph, kernels or wall
    fallback: str | None = text()  # why not by graph replay, where that was wanted
    # medians of each side's per-step times over the rounds (the ratio is the centre of the rounds' paired
    # ratios, so the two need not agree exactly): the mode's, and the side it is over
    step_ms: float | None = number()
    step_ms_ref: float | None = number()
    round_ms: list | None = raw()  # per-step milliseconds of every round, in order
    ref_round_ms: list | None = raw()
    speedup_across_low: float | None = checked(POSITIVE)  # the interval across runs, where a spread was learned
    speedup_across_high: float | None = checked(POSITIVE)
    between_run_sd: float | None = number()
    between_run_count: int | None = number()

    # checked figures that must be ascending where all are present (an interval holds its estimate)
    ORDERED: ClassVar[tuple[tuple[str, ...], ...]] = (("speedup_low", "speedup", "speedup_high"),
                                                      ("speedup_across_low", "speedup_across_high"))

    @classmethod
    def read(cls, info: Mapping[str, Any], key: Any = None) -> "RatioFigures":
        """The ratio `info` holds, each figure under its name or ``key(name)``."""
        return cls(**read_fields(_FIELDS, info, key)[0])

    def to_info(self) -> dict[str, Any]:
        """The figures it holds, under their names."""
        return {name: encode(value) for name, _, _ in _FIELDS if (value := getattr(self, name)) is not None}

    def estimate(self, confidence: float | None = None) -> SpeedupEstimate | None:
        """The ratio with its interval; None where incomplete. `confidence`: the record's, where the ratio
        names none (a record of schema 1 named one for all its figures)."""
        value, low, high = self.speedup, self.speedup_low, self.speedup_high
        if value is None or low is None or high is None or min(value, low, high) <= 0:
            return None
        level = next((c for c in (self.confidence, confidence) if c is not None), 0.99)
        return SpeedupEstimate(value, low, high, int(self.rounds) if self.rounds is not None else 0, level)

    def across(self) -> tuple[float, float] | None:
        """Its interval across runs (low, high), where the baseline had a between-run spread."""
        lo, hi = self.speedup_across_low, self.speedup_across_high
        return (lo, hi) if lo is not None and hi is not None else None


_FIELDS = reading(RatioFigures)
NOTHING = RatioFigures()


@lru_cache(maxsize=None)
def _flat(kind: RatioKind) -> tuple[tuple[str, str], ...]:
    """(figure, its name in a record of schema 1) of each figure schema 1 held of `kind`."""
    return tuple((name, kind.flat(name)) for name, _, _ in _FIELDS if kind.flat(name))


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
        own = next((k for k in self.RATIOS.values() if not k.prefix), None)
        return self.ratio(kind).estimate(self.ratio(own).confidence if own is not None else None)

    def verdict_of(self, kind: RatioKind) -> Verdict | None:
        """The verdict of one ratio, where the cell wrote it apart; the cell's otherwise."""
        own = self.ratio(kind).verdict
        return own if own is not None else self.verdict

    def _part_info(self, only_set: bool) -> dict[str, Any]:
        if only_set and not self.ratios:
            return {}
        order = [*self.RATIOS, *(name for name in self.ratios if name not in self.RATIOS)]
        return {RATIOS_KEY: {name: self.ratios[name].to_info() for name in order if name in self.ratios}}

    @classmethod
    def _parts(cls, info: Mapping[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
        if info.get(SCHEMA_KEY) != FLAT_RATIOS_SCHEMA:
            stored = info.get(RATIOS_KEY) if isinstance(info.get(RATIOS_KEY), dict) else {}
            return {"ratios": {name: RatioFigures.read(figures) for name, figures in stored.items()
                               if isinstance(figures, dict)}}, frozenset({RATIOS_KEY})
        names = [flat for kind in cls.RATIOS.values() for _, flat in _flat(kind)]
        shared = {flat for flat in names if names.count(flat) > 1}  # the record's rounds or confidence, say
        # a ratio was measured where a figure of its own was: not only one it shares with another
        measured = [kind for kind in cls.RATIOS.values()
                    if any(info.get(flat) is not None for _, flat in _flat(kind) if flat not in shared)]
        ratios = {kind.name: RatioFigures.read(info, dict(_flat(kind)).get) for kind in measured}
        return {"ratios": ratios}, frozenset(names)

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
    steps_per_block: int | None = number()
    ref_steps_per_block: int | None = number()
    # how the device blocks were queued ahead of the GPU (ampbench.speed.held) and the GPU's idle share inside
    # one profiled held block of each side: the check that no host entered the device time
    device_queue: str | None = text()
    device_blocks: int | None = number()
    device_held_blocks: int | None = number()
    device_retried_blocks: int | None = number()
    device_per_replay_blocks: int | None = number()
    device_chunk_replays: int | None = number()  # the fewest replays one hold covered, where blocks were split
    device_hold_ms: float | None = number()
    device_block_idle_share: float | None = number()
    device_block_idle_share_ref: float | None = number()
    device_block_longest_gap_us: float | None = number()
    kernel_ms: float | None = number()
    kernel_ms_ref: float | None = number()
    kernel_speedup: float | None = number()
    kernels: list | None = raw()  # the mode's top kernels, {"name", "ms"} per step
    kernel_changes: str | None = text()
    # how far the eager step waits on the host
    busy_ms: float | None = number()
    host_overhead_ms: float | None = number()
    idle_share: float | None = number()
    host_bound: bool | None = flag()
    busy_ms_ref: float | None = number()
    host_overhead_ms_ref: float | None = number()
    idle_share_ref: float | None = number()
    host_bound_ref: bool | None = flag()
    # samples per second of each side's eager step (the wall clock's median round), and of the mode's in device time
    throughput: float | None = number()
    throughput_ref: float | None = number()
    device_throughput: float | None = number()
    peak_mem_bytes: int | None = number()
    peak_mem_ref_bytes: int | None = number()
    memory_ratio: float | None = number()
    tflops: float | None = number()
    tflops_peak: float | None = number()
    tflops_fraction: float | None = number()
    recording: bool | None = flag()  # this run recorded the cell's baseline
    # a slowdown injected on purpose (ampbench.slowdown): a fraction of the step, or how (torchao's
    # emulated fp8 matmul); no sample of noise
    injected_slowdown: float | str | None = scalar()
    weights_moved: bool | None = flag()
    final_loss_finite: bool | None = flag()
    loss_scale: float | None = number()
    # seconds the cell spent in each phase: preparing its mode's (and versus) side, and that side's
    # preparation by step (prepare_build, ..._warm_up, ..._capture, ..._profile, ..._idle), each ratio's
    # timing and judging by its kind's name, and the check that the mode trained (fp32's side: ref_prepare_s)
    phase_seconds: dict | None = raw()
    prepare_s: float | None = number()
    ref_prepare_s: float | None = number()
    # a compiled cell's first step: dynamo and Inductor compiling it, caches cold (--perf-compile)
    compile_s: float | None = number()
    ref_compile_s: float | None = number()
    baseline_compile_s: float | None = number()
    # the side a compiled cell's second ratio is over (modes.versus_of): the mode eager (the compile gain),
    # or compiled amp_bf16 for the fp8 modes: "amp_bf16", "amp_bf16 compiled"
    versus: str | None = text()
    cudnn_benchmark: bool | None = flag()
    block_seconds: float | None = number()


def cluster_name(gpu: str, world_size: int, nodes: int = 1) -> str:
    """What N GPUs of one model are called where one GPU's name would be: in a baseline file's header and
    in the history's series of a distributed cell ('NVIDIA H200 x2'); N GPUs over several hosts are
    another cluster ('NVIDIA H200 x2 on 2 nodes'): their collectives cross a network."""
    return f"{gpu} x{world_size}" + (f" on {nodes} nodes" if nodes > 1 else "")


def cluster_stem(slug: str, world_size: int, nodes: int = 1) -> str:
    """The baseline file stem of the GPUs ``cluster_name`` names, from their model's stem `slug`:
    'nvidia-h200' for one, 'nvidia-h200-x2' for two, 'nvidia-h200-x2-2nodes' for two on two hosts. Here,
    not beside ``device.gpu_slug``, so that the history's commands find a file without importing torch."""
    return slug + (f"-x{world_size}" if world_size > 1 else "") + (f"-{nodes}nodes" if nodes > 1 else "")


def cluster_shape(name: str, gpu: str) -> tuple[int, int] | None:
    """(N, nodes) where `name` is ``cluster_name(gpu, N, nodes)``; None where it names no GPUs of model `gpu`."""
    head, _, count = name.rpartition(" x")
    count, _, spread = count.partition(" on ")
    nodes = spread.removesuffix(" nodes") if spread.endswith(" nodes") else ("1" if not spread else "")
    return (int(count), int(nodes)) if head == gpu and count.isdigit() and nodes.isdigit() else None


def cluster_size(name: str, gpu: str) -> int | None:
    """N where `name` is ``cluster_name(gpu, N)``, N GPUs on one node; None where it names no such GPUs."""
    shape = cluster_shape(name, gpu)
    return shape[0] if shape is not None and shape[1] == 1 else None


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
    throughput_per_gpu: float | None = number()
    throughput_per_gpu_ref: float | None = number()
    throughput: float | None = number()
    batch_size_per_gpu: int | None = number()
    comm_share: float | None = number()
    comm_overlap: float | None = number()
    comm_share_ref: float | None = number()
    comm_overlap_ref: float | None = number()
    idle_share: float | None = number()  # the most idle rank's share of the mode's step with no kernel running
    idle_share_ref: float | None = number()
    host_bound: bool | None = flag()  # idle_share above hostload.HOST_BOUND_IDLE_SHARE: a drop is not failed
    device_queue: str | None = text()  # how rank 0's held blocks were queued (``ampbench.speed.held``)
    gated: list | None = raw()  # the --perf-gate figures that held the cell: "device", "wall"
    recording: bool | None = flag()
    weights_moved: bool | None = flag()
    loss_scale: float | None = number()
    backend: str | None = text()
    strategy: str | None = text()
    steps_per_block: int | None = number()
    ref_steps_per_block: int | None = number()
    block_seconds: float | None = number()
    cudnn_benchmark: bool | None = flag()
    launch_s: float | None = number()

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
