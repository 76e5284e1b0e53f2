"""A distributed cell's judging: each of its figures, one per row of ``results.ratios.DISTRIBUTED_RATIOS``
that the run measured (the device-time speedup, the wall-clock speedup under the same parallelism, the
scaling efficiency in device time and in wall clock), held against the cell's baseline source's
``tolerance.Reference`` of it, as the single-GPU cells' are (``gate.judge.ratio_check``), and judged by the
gate's judge (``gate.judge``: each figure's verdict, its confirmation, the group rule and which figures
gate the cell, --perf-gate); the cell's message, and its ratios as its record holds them and as a
recorded baseline entry stores them (``gate.writers``). Which of the cell's figures a row is, its distributed
clock, is ``clocks.DIST_CLOCKS``'s entry of the name the row gives; every check, verdict and written
figure is keyed by the row's name, so a row added to the table is judged and written as the others are.

Device time (the speedup, and the scaling efficiency where rank 0's 1-GPU side was replayed as a graph
too) gates by default, the wall-clock figures are reported beside it; under --perf-gate wall or both
they gate too. Where the entry holds no device-time speedup (recorded before the cell measured one) or
the run measured none (gloo ranks on the CPU), the wall-clock figures hold the cell, as a single-GPU
cell's wall verdict holds it where its entry lacks device time. The host-bound rule
(``figures.host_bound_verdict``) applies to every figure that carries the hosts' pace: the wall clock's,
and device time where it is the profiler's busy time rather than graph replays (``leaves_host_out``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from ampbench.baselines.entries import DistributedEntry, RatioEntry, entry_tolerance
from ampbench.baselines.file import measurement_mismatch
from ampbench.distributed.clocks import DIST_CLOCKS
from ampbench.distributed.figures import DistFigures, host_bound_verdict
from ampbench.gate import judge
from ampbench.gate.writers import judged_figures, stored_ratio
from ampbench.results import DISTRIBUTED_RATIOS, RatioFigures
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, DIST_WALL, SCALING, RatioKind
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import Reference
from ampbench.verdict import SpeedupCheck, Verdict

# the names of the figures the gate rule and the message name apart, as the record's ratios and the gates name them
DEVICE_SPEEDUP, SPEEDUP = DIST_DEVICE.name, DIST_WALL.name
EFFICIENCY, DEVICE_EFFICIENCY = SCALING.name, DEVICE_SCALING.name


@dataclass(frozen=True)
class CellChecks:
    """The checks of a cell's measured figures against its baseline entry, by their kind's name (None:
    unchecked), and why each unchecked one is."""

    checks: Mapping[str, SpeedupCheck | None] = field(default_factory=dict)
    why: Mapping[str, str] = field(default_factory=dict)

    def of(self, name: str) -> SpeedupCheck | None:
        return self.checks.get(name)

    @property
    def device(self) -> SpeedupCheck | None:
        """The device-time speedup's check: with the wall clock's, it says which figures gate the cell."""
        return self.of(DEVICE_SPEEDUP)

    @property
    def speedup(self) -> SpeedupCheck | None:
        """The wall-clock speedup's check."""
        return self.of(SPEEDUP)

    @property
    def device_why(self) -> str:
        """Why the device-time speedup is unchecked ("" where it is checked or was not measured)."""
        return self.why.get(DEVICE_SPEEDUP, "")


def estimate_of(kind: RatioKind, figs: DistFigures) -> SpeedupEstimate | None:
    """The cell's figure of `kind`, read by its distributed clock (None where the run measured none)."""
    return DIST_CLOCKS[kind.clock].estimate(figs)


def _method(kind: RatioKind, figs: DistFigures) -> str | None:
    """How the run measured a figure of `kind`: its device-time method, for a figure in device time."""
    return figs.device_method if kind.same_method else None


def cell_checks(baseline: DistributedEntry | None, figs: DistFigures, model: str, what: str,
                against: Callable[[RatioKind], Reference | None]) -> CellChecks:
    """The checks of the cell's measured figures against what its baseline source gives each (`against`,
    by the figure's kind: ``BaselineSource.reference``); a figure in device time only against a baseline
    measured by the same method."""
    checks, why = {}, {}
    for name, kind in DISTRIBUTED_RATIOS.items():
        if estimate_of(kind, figs) is not None:
            checks[name], why[name] = judge.ratio_check(kind, model, what, baseline, against(kind),
                                                  figure=DIST_CLOCKS[kind.clock].figure, method=_method(kind, figs))
    return CellChecks(checks, why)


def gates_of(gate: str, checks: CellChecks, figs: DistFigures) -> tuple[str, ...]:
    """The --perf-gate figures that hold the cell (``gate.judge.gates``): the wall clock's alone where device
    time would gate but the run measured none (gloo ranks), or its entry holds none (recorded before device
    time) while it holds the wall-clock speedup."""
    return judge.gates(gate, checks.device, checks.speedup, device_measured=figs.device is not None)


def estimates(figs: DistFigures) -> dict[str, SpeedupEstimate]:
    """The cell's figures that were measured, by their kind's name, in their table's order."""
    return {name: est for name, kind in DISTRIBUTED_RATIOS.items() if (est := estimate_of(kind, figs)) is not None}


def leaves_host_out(name: str, figs: DistFigures) -> bool:
    """Whether figure `name` is free of the hosts' pace. A figure in device time (``RatioKind.same_method``)
    by graph replays is: a queued block holds no host. The profiler's busy time of eager steps is not: where
    a peer's host lags, a rank's NCCL kernels spin waiting for it, and that wait is busy time (``graphed``).
    In a host-bound step it is most of the figure (FSDP2 with a dynamic loss scale on four H200s: 18%
    run-to-run sd against DDP's 0.3% by graph)."""
    return DISTRIBUTED_RATIOS[name].same_method and figs.device_method == "graph"


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
    together with the runs the history held back before it (``tolerance.Reference.group_failure``); and the
    reasons, for the message. A figure that carries a host-bound step's pace is left as it is."""
    out, why = dict(verdicts), []
    for name, est in estimates(figs).items():
        check = checks.of(name)
        if check is None or (figs.host_bound and not leaves_host_out(name, figs)):
            continue
        text = judge.grouped(check, est.speedup, verdicts.get(name))
        if text:
            out[name] = Verdict.REGRESSION
            why.append(f"{DISTRIBUTED_RATIOS[name].label}: {text}")
    return out, "; ".join(why)


def ratio_figures(figs: DistFigures, checks: CellChecks, verdicts: dict[str, Verdict],
                  docs: list[dict]) -> dict[str, RatioFigures]:
    """The cell's ratios as its ``DistributedRecord`` holds them, by name, in their table's order: each
    measured figure judged, with its line, how its device time was measured and its rounds by side where
    its clock keeps them (the wall clock's step time, rank 0's; the device time per step, the least busy
    rank's; in milliseconds); a figure whose verdict is the cell's (``RatioKind.own_verdict``) without its
    own verdict and tolerance. A figure in device time that stores why it fell back is written in every
    run, its method and why not a graph where it was not measured."""
    ratios = {}
    for name, kind in DISTRIBUTED_RATIOS.items():
        est, clock, check = estimate_of(kind, figs), DIST_CLOCKS[kind.clock], checks.of(name)
        how: dict[str, Any] = {"method": _method(kind, figs)} if kind.same_method else {}
        if kind.stores_fallback:
            how["fallback"] = figs.device_fallback
        if est is None:
            if kind.stores_fallback:
                ratios[name] = RatioFigures(**how)
            continue
        if not kind.share:  # a share is written without a line: the report reads the speedups' (``report.needs_look``)
            how["line"] = check.regression_line if check else None
        if clock.sides is not None:
            how["sides"] = clock.sides(figs, docs)
        judged = judged_figures(est, check, verdicts.get(name) if kind.own_verdict else None, **how)
        ratios[name] = judged if kind.own_verdict else replace(judged, tolerance=None)
    return ratios


# the figures a wall-clock row's recording names even where the run measured none, as null (a scaling
# efficiency without rank 0's 1-GPU side): every recording names them, and a reader takes null as absent. A
# figure in device time the run did not measure is left out, as entries recorded before device time lack it.
_WALL_NULLS = ("speedup", "ci_low", "ci_high", "noise")


def _stored(kind: RatioKind, est: SpeedupEstimate, figs: DistFigures, floor: float, kept: RatioEntry) -> RatioEntry:
    """A measured figure of `kind` as a recording stores it (``recorded_ratios``)."""
    noise, clock = est.half_width, DIST_CLOCKS[kind.clock]
    how: dict[str, Any] = {"method": figs.device_method} if kind.same_method else {}
    if kind.stores_fallback:
        how["fallback"] = figs.device_fallback
    if clock.steps is not None:
        step_s, step_s_ref = clock.steps(figs)
        how.update(step_ms=step_s * 1e3, step_ms_ref=step_s_ref * 1e3)
    tolerance = entry_tolerance(kind, floor, kept, noise) if kind.stores_tolerance else None
    ratio = stored_ratio(est, noise, tolerance, kept, **how)
    return ratio if clock.rounds else replace(ratio, rounds=None)


def recorded_ratios(figs: DistFigures, floor: float, previous: DistributedEntry | None = None,
                     measured_with: Mapping[str, object] | None = None) -> dict[str, dict[str, Any]]:
    """What a recording stores of each row's figure, by the row's name, in the table's order, under the
    names its entry gives them: each figure, its interval and noise, how it was measured (the device-time
    method, why not by graph where its row stores that, its step times where its clock has them, its rounds
    where its clock keeps them), and the tolerance it gives where its row stores that. A wall-clock figure
    the run did not measure is written null (`_WALL_NULLS`), one in device time (``RatioKind.same_method``)
    not at all. A re-recording measured alike (`previous` measured device time by the same method on as many
    GPUs, with the same settings `measured_with`) keeps the between-run spread `previous` learned of each
    figure in device time, as a single-GPU cell's does (``speed.ratio.Ratio.recorded``): the recording
    opens another level, and the tolerance allows for the spread."""
    alike = (previous is not None and previous.ratio(DIST_DEVICE).method == figs.device_method
             and previous.world_size == figs.world_size
             and measurement_mismatch(previous, measured_with or {}) is None)
    out: dict[str, dict[str, Any]] = {}
    for name, kind in DISTRIBUTED_RATIOS.items():
        est = estimate_of(kind, figs)
        if est is None and kind.same_method:
            continue
        nulls = (("fallback",) if kind.stores_fallback else ()) + (() if kind.same_method else _WALL_NULLS)
        kept = previous.ratio(kind).kept_spread() if kind.same_method and alike and previous else RatioEntry()
        ratio = _stored(kind, est, figs, floor, kept) if est is not None else RatioEntry()
        out[name] = ratio.figures(kind, nulls=nulls)
    return out


def _against(check: SpeedupCheck | None, verdict: Verdict | None, pct: bool = False) -> list[str]:
    if check is None:
        return []
    assert verdict is not None, "a cell held against a check has its verdict"
    fmt = (lambda x: f"{x:.1%}") if pct else (lambda x: f"{x:.3f}x")
    if not check.has_line:
        return [f"against baseline {fmt(check.expected)}, no line: {check.why_no_line()} ({verdict.value})"]
    return [f"against baseline {fmt(check.expected)}, line {fmt(check.line)} ({verdict.value})"]


def _shown(kind: RatioKind, est: SpeedupEstimate) -> str:
    """A figure as the message shows it: a share as a percentage with its interval, a factor as its estimate."""
    return f"{est.speedup:.1%} [{est.low:.1%}, {est.high:.1%}]" if kind.share else str(est)


def _by_heading(kind: RatioKind, figs: DistFigures, est: SpeedupEstimate) -> str:
    """A figure introduced by its row's heading (``RatioKind.heading``)."""
    heading = kind.heading.format(method=_method(kind, figs), figure=DIST_CLOCKS[kind.clock].figure, over=None)
    return f"{heading} {_shown(kind, est)}"


# how the message introduces the figures whose row's heading is not what the message says: each by its row's
# words as a failing cell calls it (``RatioKind.failing``): the lead names the parallelism, and the method
# after it, which the device-time scaling efficiency's heading would name again; the wall clock beside
# device time is named by its clock alone
_SAID: dict[str, Callable[[DistFigures, SpeedupEstimate], str]] = {
    DEVICE_SPEEDUP: lambda figs, est: f"{DIST_DEVICE.failing} ({figs.device_method}) {est}",
    SPEEDUP: lambda figs, est: f"wall clock {est}" if figs.device is not None else f"{DIST_WALL.failing} {est}",
    DEVICE_EFFICIENCY: lambda figs, est: f"{DEVICE_SCALING.failing} {_shown(DEVICE_SCALING, est)}",
    # beside the device time's, the wall clock's is named by its clock
    EFFICIENCY: lambda figs, est: (("wall-clock " if figs.device_efficiency is not None else "")
                                   + _by_heading(SCALING, figs, est)),
}


def _in_message(kind: RatioKind) -> tuple[bool, bool]:
    """Where the message says a figure: the speedups before the scaling efficiencies, each in device time
    before wall clock."""
    return kind.share, kind.gate != DIST_DEVICE.gate


def cell_message(what: str, figs: DistFigures, checks: CellChecks, verdicts: dict[str, Verdict],
                 confirmation: DistFigures | None, gpu: bool, note: str = "") -> str:
    """The cell's message: each measured figure (``_in_message``: its device-time speedup where measured,
    then the wall-clock one, the scaling efficiencies) against its baseline, then throughput, NCCL's share
    and whether the step is host-bound; a CPU run's ranks are processes, and it names them so. `note`:
    what a host-bound cell adds of its strategy's own host cost."""
    rank = "GPU" if gpu else "rank"
    parts = []
    for kind in sorted(DISTRIBUTED_RATIOS.values(), key=_in_message):
        est = estimate_of(kind, figs)
        if est is None:
            continue
        said = _SAID.get(kind.name)
        parts.append(said(figs, est) if said is not None else _by_heading(kind, figs, est))
        parts += _against(checks.of(kind.name), verdicts.get(kind.name), pct=kind.share)
        if kind.name == DEVICE_SPEEDUP and checks.device is None and checks.device_why:
            parts.append(checks.device_why)  # why the figure that would gate the cell is unchecked
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
    return f"{what}: " + "; ".join(parts)
