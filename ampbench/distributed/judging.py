"""A distributed cell's judging: its four figures (the device-time speedup, the wall-clock speedup under
the same parallelism, the scaling efficiency in device time and in wall clock) held against the cell's
baseline source's ``verdict.Reference`` of each, as the single-GPU cells' are
(``speed.ratio.ratio_check``), and judged by the gate's judge (``gate.judge``: each figure's verdict, its
confirmation, the group rule and which figures gate the cell, --perf-gate); the cell's message, and its
ratios as its record holds them and its device-time baseline figures (``gate.writers``). The kinds of ratio
are the rows of ``results.ratios.DISTRIBUTED_RATIOS``.

Device time (the speedup, and the scaling efficiency where rank 0's 1-GPU side was replayed as a graph
too) gates by default, the wall-clock figures are reported beside it; under --perf-gate wall or both
they gate too. Where the entry holds no device-time speedup (recorded before the cell measured one) or
the run measured none (gloo ranks on the CPU), the wall-clock figures hold the cell, as a single-GPU
cell's wall verdict holds it where its entry lacks device time. The host-bound rule
(``figures.host_bound_verdict``) applies to every figure that carries the hosts' pace: the wall clock's,
and device time where it is the profiler's busy time rather than graph replays (``leaves_host_out``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from ampbench.baselines.entries import DistributedEntry, RatioEntry, entry_tolerance
from ampbench.baselines.file import measurement_mismatch
from ampbench.distributed.figures import DistFigures, host_bound_verdict, per_round_min
from ampbench.gate import judge
from ampbench.gate.writers import judged_figures, stored_ratio
from ampbench.results import DISTRIBUTED_RATIOS, RatioFigures
from ampbench.results.ratio_figures import StepFigures
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, DIST_WALL, SCALING, RatioKind
from ampbench.results.schema import FP32_SIDE, MODE_SIDE
from ampbench.speed.ratio import ratio_check
from ampbench.stats import SpeedupEstimate
from ampbench.verdict import Reference, SpeedupCheck, Verdict

# the figures' names, as the record's ratios and the gates name them
DEVICE_SPEEDUP, SPEEDUP = DIST_DEVICE.name, DIST_WALL.name
EFFICIENCY, DEVICE_EFFICIENCY = SCALING.name, DEVICE_SCALING.name
DEVICE_FIGURES = (DEVICE_SPEEDUP, DEVICE_EFFICIENCY)  # by graph replays they leave the host out (``leaves_host_out``)


@dataclass(frozen=True)
class CellChecks:
    """The checks of a cell's figures against its baseline entry (None: unchecked), and why its
    device-time figure is unchecked where the entry has no such baseline."""

    device: SpeedupCheck | None
    speedup: SpeedupCheck | None
    efficiency: SpeedupCheck | None
    device_why: str = ""
    device_efficiency: SpeedupCheck | None = None

    def of(self, name: str) -> SpeedupCheck | None:
        return {DEVICE_SPEEDUP: self.device, SPEEDUP: self.speedup, EFFICIENCY: self.efficiency,
                DEVICE_EFFICIENCY: self.device_efficiency}[name]


def cell_checks(baseline: DistributedEntry | None, figs: DistFigures, model: str, what: str,
                against: Callable[[RatioKind], Reference | None]) -> CellChecks:
    """The checks of the cell's figures against what its baseline source gives each (`against`, by the
    figure's kind: ``BaselineSource.reference``); the device time's only where the run measured one, and
    only against a baseline measured by the same method."""
    def check(kind: RatioKind, figure: str = "speedup over fp32", method: str | None = None) -> tuple:
        return ratio_check(kind, model, what, baseline, against(kind), figure=figure, method=method)

    speed, eff = check(DIST_WALL)[0], check(SCALING)[0]
    if figs.device is None:
        return CellChecks(None, speed, eff)
    device, why = check(DIST_DEVICE, method=figs.device_method)
    device_eff = (check(DEVICE_SCALING, "scaling efficiency", figs.device_method)[0]
                  if figs.device_efficiency is not None else None)
    return CellChecks(device, speed, eff, why, device_eff)


def gates_of(gate: str, checks: CellChecks, figs: DistFigures) -> tuple[str, ...]:
    """The --perf-gate figures that hold the cell (``gate.judge.gates``): the wall clock's alone where device
    time would gate but the run measured none (gloo ranks), or its entry holds none (recorded before device
    time) while it holds the wall-clock speedup."""
    return judge.gates(gate, checks.device, checks.speedup, device_measured=figs.device is not None)


def estimates(figs: DistFigures) -> dict[str, SpeedupEstimate]:
    """The cell's figures that were measured, by name."""
    named = {DEVICE_SPEEDUP: figs.device, SPEEDUP: figs.speedup, EFFICIENCY: figs.efficiency,
             DEVICE_EFFICIENCY: figs.device_efficiency}
    return {name: est for name, est in named.items() if est is not None}


def leaves_host_out(name: str, figs: DistFigures) -> bool:
    """Whether figure `name` is free of the hosts' pace. Graph replays are: a queued block holds no host.
    The profiler's busy time of eager steps is not: where a peer's host lags, a rank's NCCL kernels spin
    waiting for it, and that wait is busy time (``graphed``). In a host-bound step it is most of the
    figure (FSDP2 with a dynamic loss scale on four H200s: 18% run-to-run sd against DDP's 0.3% by graph)."""
    return name in DEVICE_FIGURES and figs.device_method == "graph"


def verdicts_of(figs: DistFigures, checks: CellChecks) -> dict[str, Verdict]:
    """Each measured figure's verdict; a host-bound step's drop in a figure that carries the hosts' pace
    (the wall clock, or device time from the profiler) is inconclusive."""
    out = {name: judge.verdict_of(checks.of(name), est) for name, est in estimates(figs).items()}
    return {name: v if leaves_host_out(name, figs) else host_bound_verdict(v, figs.host_bound)
            for name, v in out.items()}


def gated_verdicts(verdicts: dict[str, Verdict], gates: tuple[str, ...]) -> list[Verdict]:
    """The verdicts of the figures that gate the cell (``verdict.combined`` takes these)."""
    return [v for name, v in verdicts.items() if DISTRIBUTED_RATIOS[name].gate in gates]


def confirmed_by_launch(verdicts: dict[str, Verdict], checks: CellChecks, second: DistFigures) -> dict[str, Verdict]:
    """`verdicts` with each regression that the confirming launch's figures (`second`) do not repeat
    made inconclusive (``gate.judge.confirmed``)."""
    again = estimates(second)
    return {name: judge.confirmed(v, checks.of(name), again.get(name)) for name, v in verdicts.items()}


def apply_group_rule(verdicts: dict[str, Verdict], checks: CellChecks,
                     figs: DistFigures) -> tuple[dict[str, Verdict], str]:
    """`verdicts` with the history's group rule applied as a single-GPU cell's ratio applies it
    (``gate.judge.grouped``): a figure its own launches did not fail fails where it lies below the line
    together with the runs the history held back before it (``verdict.Reference.group_failure``); and the
    reasons, for the message. A figure that carries a host-bound step's pace is left as it is."""
    out, why = dict(verdicts), []
    for name, est in estimates(figs).items():
        check = checks.of(name)
        if check is None or (figs.host_bound and not leaves_host_out(name, figs)):
            continue
        text = judge.grouped(check, est.speedup, verdicts.get(name))[1]
        if text:
            out[name] = Verdict.REGRESSION
            why.append(f"{DISTRIBUTED_RATIOS[name].label}: {text}")
    return out, "; ".join(why)


def _round_ms(mode: list[float], fp32: list[float], mode_step: float | None = None,
              fp32_step: float | None = None) -> dict[str, StepFigures]:
    """A ratio's step and round times by side, in milliseconds: the mode's and fp32's."""
    return {MODE_SIDE: StepFigures(step_ms=mode_step, round_ms=mode),
            FP32_SIDE: StepFigures(step_ms=fp32_step, round_ms=fp32)}


def ratio_figures(figs: DistFigures, checks: CellChecks, verdicts: dict[str, Verdict],
                  docs: list[dict]) -> dict[str, RatioFigures]:
    """The cell's ratios as its ``DistributedRecord`` holds them, by name: the wall-clock speedup with each
    round's step time (rank 0's) and its line; the scaling efficiency (its verdict is the cell's); the
    device time's method and why not a graph in every run, and, where measured, its speedup with each
    round's device time per step (the least busy rank's) in milliseconds, and its scaling efficiency."""
    speed, check = figs.speedup, checks.speedup
    ratios = {SPEEDUP: judged_figures(speed, check, verdicts.get(SPEEDUP),
                                      line=check.regression_line if check else None,
                                      sides=_round_ms([t * 1e3 for t in docs[0]["mode_times"]],
                                                      [t * 1e3 for t in docs[0]["ref_times"]]))}
    if figs.efficiency is not None:
        ratios[EFFICIENCY] = replace(judged_figures(figs.efficiency, checks.efficiency, None), tolerance=None)
    device = RatioFigures(method=figs.device_method, fallback=figs.device_fallback)
    est, check = figs.device, checks.device
    if est is not None:
        mode_ms, ref_ms = ([t * 1e3 for t in per_round_min(docs, key)]
                           for key in ("device_mode_times", "device_ref_times"))
        step_s, step_s_ref = _device_steps(figs)
        device = judged_figures(est, check, verdicts.get(DEVICE_SPEEDUP),
                                line=check.regression_line if check else None,
                                method=figs.device_method, fallback=figs.device_fallback,
                                sides=_round_ms(mode_ms, ref_ms, step_s * 1e3, step_s_ref * 1e3))
    ratios[DEVICE_SPEEDUP] = device
    if est is not None and figs.device_efficiency is not None:
        ratios[DEVICE_EFFICIENCY] = judged_figures(figs.device_efficiency, checks.device_efficiency,
                                                   verdicts.get(DEVICE_EFFICIENCY), method=figs.device_method)
    return {name: ratios[name] for name in DISTRIBUTED_RATIOS if name in ratios}


def _device_steps(figs: DistFigures) -> tuple[float, float]:
    """The mode's and fp32's device time per step, which come with a device-time speedup."""
    step_s, step_s_ref = figs.device_step_s, figs.device_step_s_ref
    assert step_s is not None and step_s_ref is not None, "a device-time speedup comes with its step times"
    return step_s, step_s_ref


def device_baseline_figures(figs: DistFigures, floor: float, previous: DistributedEntry | None = None,
                            measured_with: Mapping[str, object] | None = None) -> dict[str, Any]:
    """What a recording stores of the device-time speedup (nothing where none was measured): the
    figure, its interval and noise, how it was measured, and the tolerance it gives. A re-recording
    measured alike (`previous` measured it by the same method on as many GPUs, with the same settings
    `measured_with`) keeps the between-run spread `previous` learned, as a single-GPU cell's does
    (``speed.ratio.Ratio.recorded``): the recording opens another level, and the tolerance allows for
    the spread."""
    est = figs.device
    if est is None:
        return {}
    noise = est.half_width
    alike = (previous is not None and previous.ratio(DIST_DEVICE).method == figs.device_method
             and previous.world_size == figs.world_size
             and measurement_mismatch(previous, measured_with or {}) is None)
    kept = previous.ratio(DIST_DEVICE).kept_spread() if alike and previous is not None else RatioEntry()
    step_s, step_s_ref = _device_steps(figs)
    ratio = stored_ratio(est, noise, entry_tolerance(DIST_DEVICE, floor, kept, noise), kept,
                         method=figs.device_method, fallback=figs.device_fallback,
                         step_ms=step_s * 1e3, step_ms_ref=step_s_ref * 1e3)
    out = ratio.figures(DIST_DEVICE, nulls=("fallback",))
    eff = figs.device_efficiency
    if eff is not None:
        kept_eff = previous.ratio(DEVICE_SCALING).kept_spread() if alike and previous is not None else RatioEntry()
        out.update(stored_ratio(eff, eff.half_width, entry_tolerance(DEVICE_SCALING, floor, kept_eff, eff.half_width),
                                kept_eff, method=figs.device_method).figures(DEVICE_SCALING))
    return out


def _against(check: SpeedupCheck | None, verdict: Verdict | None, pct: bool = False) -> list[str]:
    if check is None:
        return []
    assert verdict is not None, "a cell held against a check has its verdict"
    fmt = (lambda x: f"{x:.1%}") if pct else (lambda x: f"{x:.3f}x")
    if not check.has_line:
        return [f"against baseline {fmt(check.expected)}, no line: {check.why_no_line()} ({verdict.value})"]
    return [f"against baseline {fmt(check.expected)}, line {fmt(check.line)} ({verdict.value})"]


def cell_message(what: str, figs: DistFigures, checks: CellChecks, verdicts: dict[str, Verdict],
                 confirmation: DistFigures | None, gpu: bool, note: str = "") -> str:
    """The cell's message: its device-time speedup where measured, then the wall-clock one, the scaling
    efficiency, throughput, NCCL's share and whether the step is host-bound; a CPU run's ranks are
    processes, and it names them so. `note`: what a host-bound cell adds of its strategy's own host cost."""
    rank = "GPU" if gpu else "rank"
    parts = [f"{what}: "]
    if figs.device is not None:
        parts[0] += f"device-time speedup over fp32 under the same parallelism ({figs.device_method}) {figs.device}"
        parts += (_against(checks.device, verdicts.get(DEVICE_SPEEDUP))
                  or ([checks.device_why] if checks.device_why else []))
        parts.append(f"wall clock {figs.speedup}")
    else:
        parts[0] += f"speedup over fp32 under the same parallelism {figs.speedup}"
    parts += _against(checks.speedup, verdicts.get(SPEEDUP))
    if figs.device_efficiency is not None:
        e = figs.device_efficiency
        parts.append(f"scaling efficiency in device time {e.speedup:.1%} [{e.low:.1%}, {e.high:.1%}]")
        parts += _against(checks.device_efficiency, verdicts.get(DEVICE_EFFICIENCY), pct=True)
    if figs.efficiency is not None:
        e = figs.efficiency
        parts.append(f"{'wall-clock ' if figs.device_efficiency is not None else ''}scaling efficiency "
                     f"{e.speedup:.1%} [{e.low:.1%}, {e.high:.1%}]")
        parts += _against(checks.efficiency, verdicts.get(EFFICIENCY), pct=True)
    parts.append(f"{figs.throughput_per_gpu:.1f} samples/s per {rank}")
    if figs.comm_share is not None:
        overlap = f", {figs.comm_overlap:.0%} of it overlapped" if figs.comm_overlap is not None else ""
        parts.append(f"NCCL kernels {figs.comm_share:.0%} of a step{overlap}")
    if figs.host_bound:
        carried = ("wall-clock" if figs.device is None or leaves_host_out(DEVICE_SPEEDUP, figs)
                   else "wall-clock or profiled device-time")
        parts.append(f"host-bound: a {rank} sat idle {figs.idle_share:.0%} of the mode's step waiting for its host, "
                     f"so a {carried} drop is the host's and is not failed" + (f" ({note})" if note else ""))
    if confirmation is not None:
        parts.append(f"confirming launch {confirmation.device or confirmation.speedup}")
    if not checks.speedup and not checks.device:
        parts.append(f"no baseline for this {'GPU model' if gpu else 'device'} and {rank} count")
    return "; ".join(parts)
