"""One speed cell from its prepared sides to its record: check each of its ratios (the kinds of
``ampbench.results.ratios.SPEED_RATIOS``: the device-time and the wall-clock speedup, and a compiled
cell's ratio over its versus side) against this GPU's baseline entry and time it in interleaved rounds
(``ampbench.speed.ratio``), check the mode really trained, record a new baseline entry when asked, and
say what the test must warn about or fail on.

``measure_speed`` returns a ``SpeedCell``; ``ampbench.suite.speed`` only wires fixtures into it, writes the
record and ends the test by it (``ampbench.suite.outcome.finish``). Nothing here imports pytest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import torch

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import measurement_mismatch
from ampbench.baselines.source import BaselineSource
from ampbench.device import card_uuid, release
from ampbench.gate.conditions import conditions_info
from ampbench.gate.measurement import QueueStats
from ampbench.gate.writers import comparable_recording, describe_across
from ampbench.kernel_diff import kernel_changes
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode, label, versus_of
from ampbench.results import RatioKind, SpeedRecord
from ampbench.results.ratios import DEVICE, VERSUS, WALL
from ampbench.results.schema import FP32_SIDE, MODE_SIDE
from ampbench.results.timed import DeviceQueue, SpeedSide
from ampbench.settings import PerfSettings
from ampbench.speed import sides
from ampbench.speed.admission import admit
from ampbench.speed.clocks import conditions_reader
from ampbench.speed.compiled import DynamoState, compile_problems, compile_time_check
from ampbench.speed.devicetime import IDLE_WARN_SHARE, recapture_shared
from ampbench.speed.hostload import host_load
from ampbench.speed.ratio import Ratio, cell_ratios
from ampbench.verdict import HostOverhead, Verdict, combined


@dataclass
class SpeedCell:
    """What a speed cell concluded, and what its test must do about it."""

    record: SpeedRecord
    device_step_seconds: list[float]  # the mode's device time per step, one per round: pytest-benchmark's figures
    problems: list[str] = field(default_factory=list)  # the mode did not really train: the test fails
    warn_first: list[Warning] = field(default_factory=list)  # before the verdict is concluded
    warn_after: list[Warning] = field(default_factory=list)  # once it passed or only warned


def policy(device: torch.device, settings: PerfSettings) -> sides.SpeedPolicy:
    return replace(sides.policy_for(device, settings.min_rounds, settings.tolerance, settings.block_seconds,
                                    recording=settings.update_baselines, deadline=settings.deadline),
                   read_conditions=settings.nvml)


def _why_unread(settings: PerfSettings, device: torch.device) -> str | None:
    """Why the card's conditions were not read (``ampbench.nvml``), where they were not; None where they could be."""
    return "not asked for (--perf-nvml off)" if not settings.nvml else conditions_reader(device)[1]


def _named_failures(verdict: Verdict, ratios: list[Ratio]) -> str:
    """Which gated ratios brought a failing or inconclusive verdict: 'compile gain over amp_bf16
    regression', so a cell's message says which of its ratios to look at first."""
    if verdict not in (Verdict.REGRESSION, Verdict.INCONCLUSIVE):
        return ""
    names = [r.named(r.kind.failing) for r in ratios if r.gated and r.verdict is verdict]
    return f"{' and '.join(names)} {verdict}" if names else ""


def identity(spec: ModelSpec, mode: PrecisionMode, device: torch.device, smoke: bool) -> SpeedRecord:
    """Who the cell is, written before it measures: a cell that fails later is still recognisable."""
    return SpeedRecord(model=spec.name, mode=label(mode), device=str(device), batch_size=spec.batch_size_for(smoke))


@dataclass
class _Prepared:
    """The cell's sides, and what torch.compile did while the mode's was built."""

    side: sides.Side
    versus: sides.Side | None
    dynamo_before: DynamoState | None
    dynamo_prepared: DynamoState | None


def _prepare(mode: PrecisionMode, fp32: sides.Side, prepare: Callable[[], sides.Side],
             versus: Callable[[], sides.Side] | None) -> _Prepared:
    # the versus side first: its own compilation (compiled amp_bf16 for an fp8 cell) is no part of this
    # cell's compile time, graph breaks or recompiles
    versus_side = versus() if versus is not None else None
    dynamo_before = DynamoState.now() if mode.compile else None
    side = prepare()
    prepared = _Prepared(side, versus_side, dynamo_before, DynamoState.now() if mode.compile else None)
    recapture_shared(fp32)
    if versus_side is not None:
        recapture_shared(versus_side)
    return prepared


def _of(ratios: list[Ratio], kind: RatioKind) -> Ratio:
    """The cell's ratio of `kind`, one every cell has (device time, wall clock)."""
    return next(r for r in ratios if r.kind is kind)


def _over(ratios: list[Ratio]) -> str | None:
    """The side the cell's ratio over its versus side is over (a compiled cell's), else None."""
    return next((r.over for r in ratios if r.kind.over), None)


def _message(verdict: Verdict, ratios: list[Ratio], baseline: SpeedEntry | None, changes: str | None) -> str:
    message = "; ".join(r.message for r in ratios)
    across = _of(ratios, WALL).across_runs(baseline)
    if across and baseline is not None:
        message += f"; wall across runs {describe_across(across, baseline.ratio(WALL).between_run_count)}"
    failing = _named_failures(verdict, ratios)
    if failing:
        message = f"{failing}: {message}"
    if changes and _of(ratios, DEVICE).verdict in (Verdict.REGRESSION, Verdict.IMPROVED):
        message += f"; {changes}"
    return message


def measure_speed(spec: ModelSpec, mode: PrecisionMode, fp32: sides.Side, prepare: Callable[[], sides.Side], *,
                  settings: PerfSettings, device: torch.device, test_id: str, source: BaselineSource | None,
                  software: dict, peak_tflops: Callable[[str], float | None],
                  prepared: Callable[[SpeedRecord], None],
                  versus: Callable[[], sides.Side] | None = None) -> SpeedCell:
    """Prepare the cell's versus side (`versus`, for a compiled cell: ``modes.versus_of``) and the mode's
    side (`prepare`), tell `prepared` the cell's identity, then time, judge and (under
    --perf-update-baselines) record the cell against `fp32`, the fp32 side, and, where compiled,
    against its versus side. Every tensor of the cell is released before it returns, but for sides the
    callables keep elsewhere: a failing test keeps its frames, and with them whatever they hold."""
    pol = policy(device, settings)
    marks = sides.Phases()
    if (versus is None) != (versus_of(mode) is None):
        raise ValueError(f"{spec.name} {label(mode)}: a versus side is needed exactly where the cell is compiled")
    pair = _prepare(mode, fp32, prepare, versus)
    marks.end("prepare")
    prepared(identity(spec, mode, device, settings.smoke))
    before = sides.parameters_fingerprint(pair.side.trainer)
    entry = source.entry(test_id) if source is not None else None
    baseline = entry if isinstance(entry, SpeedEntry) else None
    ratios = cell_ratios(spec.name, mode, fp32, pair.side, pair.versus, baseline, settings.gate, pol, source, test_id,
                         settings.tolerance)
    marks.end("ratios")  # each ratio's own seconds are its phase below
    trained = _Trained.of(pair.side, before)
    marks.end("trained")
    phases = {"prepare": marks.seconds["prepare"], **{f"prepare_{k}": v for k, v in pair.side.prepare_phases.items()},
              **{r.kind.name: r.measurement.seconds for r in ratios}, "trained": marks.seconds["trained"]}
    record = _record(spec, mode, settings, device, fp32, pair.side, ratios, baseline, peak_tflops, trained, phases)
    # the card's fp32 step against its model's level: it informs, the verdict is the ratios'
    card = admit(record, test_id, source, software, card_uuid(device) if device.type == "cuda" else None)
    cell = SpeedCell(replace(record, card=card), list(_of(ratios, DEVICE).measurement.first.mode_times))
    cell.problems += _problems(spec, mode, pair, ratios, baseline, trained)
    # only a cell that really trained may become a baseline
    if settings.update_baselines and source is not None and not cell.problems:
        _record_baseline(source, test_id, software, settings, pol, baseline, ratios, cell.record)
    queued_badly = queue_problems(_of(ratios, DEVICE).measurement.queue, pair.side, fp32)
    # freed before the test can fail: pytest keeps a failed test's frames, and with them its trainer
    del pair
    for ratio in ratios:
        ratio.release()
    release(device)
    _warn(cell, test_id, settings, source, baseline, ratios, queued_badly, device)
    return cell


def _compile_s(side: sides.Side, mode: PrecisionMode) -> float | None:
    """A side's cold compile in a compiled cell (``Side.compile_seconds``); none in an eager cell, whose
    first step compiled nothing."""
    return side.compile_seconds if mode.compile else None


def _measured_with(settings: PerfSettings) -> dict[str, Any]:
    return {"cudnn_benchmark": settings.cudnn_benchmark, "block_seconds": settings.block_seconds}


@dataclass(frozen=True)
class _Trained:
    """The mode really trained: its weights moved and its loss scale is still usable. (Whether the loss
    stays finite on random data is a property of that task, not of the mode: it is recorded here and
    judged by the convergence tests on real data.)"""

    moved: bool
    loss_finite: bool
    scale: float | None

    @classmethod
    def of(cls, side: sides.Side, before: torch.Tensor) -> "_Trained":
        last_loss = side.trainer.run(1)
        moved = bool((sides.parameters_fingerprint(side.trainer) != before).any())
        return cls(moved, bool(torch.isfinite(last_loss)), sides.loss_scale(side.trainer))


def _record(spec: ModelSpec, mode: PrecisionMode, settings: PerfSettings, device: torch.device,
            fp32: sides.Side, side: sides.Side, ratios: list[Ratio], baseline: SpeedEntry | None,
            peak_tflops: Callable[[str], float | None], trained: _Trained, phases: dict[str, float]) -> SpeedRecord:
    """The cell's record: its ratios, what they conclude (the verdict of those that gate it, the message of
    all), its mode's kernels and how they moved against its `baseline`, and its own figures."""
    dev, wall = _of(ratios, DEVICE), _of(ratios, WALL)
    verdict = combined([r.gated_verdict for r in ratios])
    kernels = side.profile.top() if side.profile else None  # what a baseline entry keeps
    changes = kernel_changes(baseline.kernels if baseline else None, kernels)
    batch = spec.batch_size_for(settings.smoke)
    (step_s, ref_step_s), (dev_step_s, dev_ref_step_s) = wall.step_seconds(), dev.step_seconds()
    load = host_load(side.profile.busy_ms / 1e3 if side.profile else dev_step_s, step_s)
    ref_load = host_load(fp32.profile.busy_ms / 1e3 if fp32.profile else dev_ref_step_s, ref_step_s)
    tflops = spec.flops_per_sample(side.trainer.config) * batch / dev_step_s / 1e12
    peak = peak_tflops(mode.peak_dtype)
    mode_side = SpeedSide(
        prepare_s=side.prepare_seconds, compile_s=_compile_s(side, mode),
        steps_per_block=wall.measurement.first.mode_steps, kernel_ms=side.profile.kernel_ms if side.profile else None,
        busy_ms=load.busy_ms, host_overhead_ms=load.overhead_ms, idle_share=load.idle_share, host_bound=load.host_bound,
        throughput=batch / step_s, device_throughput=batch / dev_step_s, peak_mem_bytes=side.peak_bytes,
        tflops=tflops, tflops_peak=peak, tflops_fraction=(tflops / peak) if peak else None,
        **_held_block_fields(dev.measurement.queue, side))
    fp32_side = SpeedSide(
        prepare_s=fp32.prepare_seconds, compile_s=_compile_s(fp32, mode),
        steps_per_block=wall.measurement.first.ref_steps, kernel_ms=fp32.profile.kernel_ms if fp32.profile else None,
        busy_ms=ref_load.busy_ms, host_overhead_ms=ref_load.overhead_ms, idle_share=ref_load.idle_share,
        host_bound=ref_load.host_bound, throughput=batch / ref_step_s, peak_mem_bytes=fp32.peak_bytes,
        **_held_block_fields(dev.measurement.queue, fp32))
    return SpeedRecord(
        model=spec.name, mode=label(mode), device=str(device), batch_size=batch, gate=settings.gate,
        gated=list(dict.fromkeys(r.kind.gate for r in ratios if r.gated)),
        ratios={r.kind.name: r.figures(baseline) for r in ratios}, versus=_over(ratios),
        sides={MODE_SIDE: mode_side, FP32_SIDE: fp32_side}, device_queue=device_queue(dev.measurement.queue),
        kernel_speedup=(fp32.profile.kernel_ms / side.profile.kernel_ms) if side.profile and fp32.profile else None,
        kernels=kernels, kernel_changes=changes,
        memory_ratio=(side.peak_bytes / fp32.peak_bytes) if side.peak_bytes and fp32.peak_bytes else None,
        recording=settings.update_baselines, weights_moved=trained.moved, final_loss_finite=trained.loss_finite,
        loss_scale=trained.scale, phase_seconds=phases,
        baseline_compile_s=baseline.compile_s if baseline else None, **_measured_with(settings),
        conditions=conditions_info(dev.measurement, _why_unread(settings, device)), verdict=verdict,
        message=_message(verdict, ratios, baseline, changes))


def _problems(spec: ModelSpec, mode: PrecisionMode, pair: _Prepared, ratios: list[Ratio],
              baseline: SpeedEntry | None, trained: _Trained) -> list[str]:
    """Why the cell's figures say nothing: a compiled step that broke or recompiled or compiled too
    slowly, a malformed estimate, a mode that did not really train."""
    problems = compile_problems(mode, pair.dynamo_before, pair.dynamo_prepared,
                                DynamoState.now() if mode.compile else None)
    slow_compile = compile_time_check(spec.name, label(mode), baseline, _compile_s(pair.side, mode))
    if slow_compile:
        problems.append(slow_compile)
    for ratio in ratios:
        e = ratio.estimate
        if not (math.isfinite(e.speedup) and e.low <= e.speedup <= e.high):
            problems.append(f"malformed {ratio.named(ratio.kind.short)} speedup estimate {e}")
    if not trained.moved:
        problems.append("no optimizer step changed the weights during the timed run (every step skipped?)")
    if trained.scale is not None and not (math.isfinite(trained.scale) and trained.scale > 0):
        problems.append(f"loss scale is {trained.scale} after the timed run; expected finite and positive")
    return problems


def _record_baseline(source: BaselineSource, test_id: str, software: dict, settings: PerfSettings,
                     pol: sides.SpeedPolicy, baseline: SpeedEntry | None, ratios: list[Ratio],
                     record: SpeedRecord) -> None:
    """Queue the cell's new entry; `baseline` is still the one it replaces (record() only queues)."""
    measured_with = _measured_with(settings)
    comparable = comparable_recording(baseline, source.software(test_id), software, measured_with)
    # the spread is kept on other software too; only the level is this recording's
    alike = baseline is not None and measurement_mismatch(baseline, measured_with) is None
    figures, mode_side = {}, record.side(MODE_SIDE)
    for ratio in ratios:
        figures.update(ratio.recorded(baseline, comparable, alike, pol, settings.tolerance))
    source.record(test_id, {
        # the entry's figures are the mode's side's, flat: the baseline file's format
        **figures, "throughput": mode_side.throughput, "idle_share": mode_side.idle_share,
        "host_bound": mode_side.host_bound, "batch_size": record.batch_size, "memory_ratio": record.memory_ratio,
        "peak_mem_bytes": mode_side.peak_mem_bytes, **measured_with,
        **({"kernels": record.kernels} if record.kernels else {}),
        **({"compile_s": mode_side.compile_s} if mode_side.compile_s else {}),
        **({"energy_ratio": record.energy.ratio} if record.energy is not None else {}),
    }, software)


def _warn(cell: SpeedCell, test_id: str, settings: PerfSettings, source: BaselineSource | None,
          baseline: SpeedEntry | None, ratios: list[Ratio], queued_badly: list[str], device: torch.device) -> None:
    """The cell's warnings: how it was measured (first), and what a cell that held should still say."""
    dev, wall = _of(ratios, DEVICE), _of(ratios, WALL)
    versus = next((r for r in ratios if r.kind is VERSUS), None)
    judged = baseline is not None and not settings.update_baselines  # judged against an entry
    mismatch = measurement_mismatch(baseline, _measured_with(settings)) if judged and baseline is not None else None
    if mismatch:
        cell.warn_first.append(UserWarning(f"{test_id}: {mismatch}"))
    if dev.why_unchecked and judged:
        cell.warn_first.append(UserWarning(f"{test_id}: {dev.why_unchecked}; the wall verdict holds the cell"))
    cell.warn_after += [UserWarning(f"{test_id}: {problem}") for problem in queued_badly]
    for ratio in ratios:
        if ratio.fallback and device.type == "cuda":
            cell.warn_first.append(UserWarning(
                f"{test_id}: {ratio.named(ratio.kind.called)} from the profiler's kernel sum: {ratio.fallback}"))
    if versus is not None and versus.check is None and judged:
        cell.warn_first.append(UserWarning(f"{test_id}: {versus.figure}: {versus.why_unchecked}"))
    if not wall.gated and wall.verdict is Verdict.REGRESSION and dev.verdict in (Verdict.PASS, Verdict.IMPROVED):
        cell.warn_after.append(HostOverhead(f"{test_id}: wall-clock speedup below its line while device time held: "
                                            f"{wall.judgement}; the host that launches the steps is "
                                            "slower or busier"))
    if source is not None and not source.exists and not settings.update_baselines:
        cell.warn_after.append(UserWarning(
            f"no baseline file {source.path}; measured {dev.estimate} in device time. Record one with "
            f"`pytest perf/ --perf-tier full --perf-update-baselines`"))


def device_queue(queued: QueueStats | None) -> DeviceQueue:
    """How the cell's device blocks were queued (``ampbench.speed.held``): the record's check that no host
    entered the device time; none where no block was queued."""
    if queued is None:
        return DeviceQueue()
    return DeviceQueue(text=queued.describe(), blocks=queued.blocks, held_blocks=queued.held,
                       retried_blocks=queued.retried, per_replay_blocks=queued.per_replay, chunk_replays=queued.chunk,
                       hold_ms=queued.hold_s * 1e3)


def _held_block_fields(queued: QueueStats | None, side: sides.Side) -> dict:
    """How long the GPU sat idle inside a profiled held block of `side`, and its longest gap, where blocks
    were queued (records of schemas 1 and 2 kept fp32's longest gap out)."""
    if queued is None or side.idle is None:
        return {}
    return dict(held_block_idle_share=side.idle.share, held_block_longest_gap_us=side.idle.longest_gap_us)


def queue_problems(queued: QueueStats | None, side: sides.Side, fp32: sides.Side) -> list[str]:
    """What a warning should say of the queueing: blocks timed by events around each replay, or a
    profiled held block in which the GPU idled over IDLE_WARN_SHARE of the time."""
    problems = []
    if queued is not None and queued.per_replay:
        problems.append(f"device time: {queued.describe()}")
    for name, s in (("the mode", side), ("fp32", fp32)):
        if s.graph is not None and s.idle is None:
            problems.append(f"device time: the profiler saw no kernel of a held block of {name}: "
                            "its idle time is unchecked")
        elif s.idle is not None and s.idle.share > IDLE_WARN_SHARE:
            problems.append(f"device time: the GPU sat idle {s.idle.share:.2%} of a profiled held block of {name} "
                            f"({s.idle.idle_ms:.3f} of {s.idle.span_ms:.1f} ms; queued whole: {s.idle.queued})")
    return problems
