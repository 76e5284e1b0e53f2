"""The last stage of a ratio: what it writes, from its measurement (``measurement.Measurement``) and its
judgement (``judging.judge``). `record_figures` is its part of the cell's record (``RatioFigures``);
`entry_figures` its part of a recording's baseline entry. Neither measures nor judges anything: a recording's
second rounds are taken before (``measurement.with_noise``).
"""

from __future__ import annotations

from typing import Any

from ampbench.baselines.entries import RatioEntry, SpeedEntry, entry_tolerance
from ampbench.results.ratio_figures import RatioFigures, StepFigures, over_side
from ampbench.results.ratios import RatioKind
from ampbench.results.schema import MODE_SIDE
from ampbench.speed.judging import across_runs_of, pooled_estimate, recorded_noise
from ampbench.speed.measurement import Measurement
from ampbench.verdict import SpeedupCheck, Verdict


def record_figures(kind: RatioKind, measured: Measurement, verdict: Verdict | None, check: SpeedupCheck | None,
                   entry: SpeedEntry | None = None) -> RatioFigures:
    """A ratio of `kind` as the cell's record holds it: its estimate and `verdict`, what `check` held it to,
    how it was measured, its step and round times; its interval across runs where `entry`, the cell's
    baseline entry, learned a between-run spread."""
    est, first = measured.estimate, measured.first
    steps: dict[str, Any] = {}
    if kind.steps:
        step, ref = first.step_seconds()
        learned = entry.ratio(kind) if entry is not None else RatioEntry()
        across = across_runs_of(est, learned.between_run_sd)
        steps = dict(sides={
            MODE_SIDE: StepFigures(step_ms=step * 1e3, round_ms=[t * 1e3 for t in first.mode_times]),
            over_side(kind): StepFigures(step_ms=ref * 1e3, round_ms=[t * 1e3 for t in first.ref_times])})
        if across is not None:
            steps.update(speedup_across_low=across.low, speedup_across_high=across.high,
                         between_run_sd=across.between_run_sd, between_run_count=learned.between_run_count)
    elif kind.over:
        # the versus side's step
        steps = dict(sides={over_side(kind): StepFigures(step_ms=first.step_seconds()[1] * 1e3)})
    confirmation = measured.confirmation
    return RatioFigures(
        speedup=est.speedup, speedup_low=est.low, speedup_high=est.high, rounds=est.rounds,
        confidence=est.confidence, baseline_speedup=check.expected if check else None,
        tolerance=check.tolerance if check else None, line=check.regression_line if check else None,
        drop=check.drop(est) if check else None,
        confirm_speedup=confirmation.speedup if confirmation else None, verdict=verdict,
        method=measured.method if kind.same_method else None,
        fallback=measured.fallback if kind.same_method else None, **steps)


def same_figure(kind: RatioKind, over: str | None, method: str | None, previous: SpeedEntry | None) -> bool:
    """Whether `previous` holds this very ratio: of `kind`, over the same side (`over`), by the same method."""
    if previous is None:
        return False
    old = previous.ratio(kind)
    return (not kind.over or previous.versus == over) and (not kind.same_method or old.method == method)


def entry_figures(kind: RatioKind, over: str | None, measured: Measurement, previous: SpeedEntry | None,
                  comparable: bool, measured_alike: bool, floor: float, confidence: float) -> dict[str, Any]:
    """What a recording stores of a ratio of `kind` (over the side `over`): both its sets of rounds pooled
    at `confidence`, and its noise (against `previous`'s figure where `comparable`: the same software,
    measured the same way), its step times, and the between-run spread it learned wherever it was measured
    alike (`measured_alike`: the same settings, on any software: ``RatioEntry.kept_spread``), which its
    stored tolerance allows for."""
    second = measured.second
    if second is None:
        raise ValueError(f"a recording of the {kind.name} ratio needs its second rounds (measurement.with_noise)")
    same = same_figure(kind, over, measured.method, previous)
    old = previous.ratio(kind) if same and previous is not None else None
    pooled = pooled_estimate(measured.first, second, confidence)
    noise = recorded_noise(measured.estimate, second.estimate(confidence), old.speedup if old else None,
                           comparable and same)
    kept = old.kept_spread() if old is not None and measured_alike else RatioEntry()
    step, ref = measured.first.step_seconds() if kind.steps else (None, None)
    tolerance = entry_tolerance(kind, floor, kept, noise) if kind.stores_tolerance else None
    ratio = RatioEntry(speedup=pooled.speedup, ci_low=pooled.low, ci_high=pooled.high, rounds=pooled.rounds,
                       noise=noise, tolerance=tolerance, method=measured.method if kind.same_method else None,
                       fallback=measured.fallback if kind.stores_fallback else None,
                       step_ms=step and step * 1e3, step_ms_ref=ref and ref * 1e3,
                       **{name: getattr(kept, name) for name in RatioEntry.SPREAD})
    versus = {"versus": over} if kind.over else {}
    return {**versus, **ratio.figures(kind, nulls=("fallback",) if kind.stores_fallback else ())}
