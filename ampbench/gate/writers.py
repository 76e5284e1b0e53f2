"""The last stage of a timed figure: what it writes. `record_figures` is a speed ratio's part of its cell's
record (``results.ratio_figures.RatioFigures``), from its measurement (``gate.measurement.Measurement``) and
its judgement (``gate.judge.judge``); `judged_figures` the part every judged figure shares, a distributed
cell's too. `entry_figures` is a ratio's part of a recording's baseline entry, `stored_ratio` the part
every recorded figure shares, with the noise it stores (`recorded_noise`) where the recording measured what
the entry did (`comparable_recording`). None of them measures or judges anything: a recording's second rounds
are taken before (``speed.measurement.with_noise``). `across_runs_of` is a figure's interval across runs.
"""

from __future__ import annotations

from typing import Any

from ampbench.baselines.entries import RatioEntry, SpeedEntry, entry_tolerance
from ampbench.baselines.file import measurement_mismatch
from ampbench.baselines.spread import software_difference
from ampbench.gate.measurement import Measurement, pooled_estimate
from ampbench.results.ratio_figures import RatioFigures, StepFigures, over_side
from ampbench.results.ratios import RatioKind
from ampbench.results.schema import MODE_SIDE
from ampbench.stats import SpeedupEstimate, across_runs, finite_number, relative_spread
from ampbench.verdict import SpeedupCheck, Verdict


def judged_figures(est: SpeedupEstimate, check: SpeedupCheck | None, verdict: Verdict | None,
                   **more: Any) -> RatioFigures:
    """A judged figure as a cell's record holds it: its estimate, what `check` held it to, its `verdict`,
    and `more` of its own."""
    return RatioFigures(speedup=est.speedup, speedup_low=est.low, speedup_high=est.high, rounds=est.rounds,
                        confidence=est.confidence, baseline_speedup=check.expected if check else None,
                        tolerance=check.tolerance if check else None, verdict=verdict, **more)


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
    return judged_figures(
        est, check, verdict, line=check.regression_line if check else None,
        drop=check.drop(est) if check else None,
        confirm_speedup=confirmation.speedup if confirmation else None,
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
    ratio = stored_ratio(pooled, noise, tolerance, kept, method=measured.method if kind.same_method else None,
                         fallback=measured.fallback if kind.stores_fallback else None,
                         step_ms=step and step * 1e3, step_ms_ref=ref and ref * 1e3)
    versus = {"versus": over} if kind.over else {}
    return {**versus, **ratio.figures(kind, nulls=("fallback",) if kind.stores_fallback else ())}


def stored_ratio(est: SpeedupEstimate, noise: float, tolerance: float | None, kept: RatioEntry,
                 **how: Any) -> RatioEntry:
    """A recorded figure as its baseline entry stores it: its estimate, `noise` and `tolerance`, how it was
    measured (`how`: method, fallback, step times), and the between-run spread it keeps (`kept`:
    ``RatioEntry.kept_spread``)."""
    return RatioEntry(speedup=est.speedup, ci_low=est.low, ci_high=est.high, rounds=est.rounds, noise=noise,
                      tolerance=tolerance, **how, **{name: getattr(kept, name) for name in RatioEntry.SPREAD})


def comparable_recording(previous: SpeedEntry | None, previous_software: dict | None, software: dict,
                         measured_with: dict[str, object]) -> bool:
    """Whether a previous baseline entry measured what this recording measures: the same software in each
    layer the entry names (``software_difference``), and the same settings (``measurement_mismatch``)."""
    return (previous is not None and software_difference(previous_software or {}, software) is None
            and measurement_mismatch(previous, measured_with) is None)


def recorded_noise(first: SpeedupEstimate, second: SpeedupEstimate, previous: float | None,
                   comparable: bool) -> float:
    """The noise a baseline is stored with, from robust figures only: the first rounds' interval
    (>= 12 rounds, so one stray round cannot set it), how far the medians of the two sets of rounds lie
    apart, and, when the entry is re-recorded `comparable`-ly (the same software, measured the same
    way), how far this recording lies from the previous one, so recording twice teaches the suite a
    cell's run-to-run spread. A previous entry measured otherwise (cuDNN autotuning against its
    heuristics) differs by a shift, not by noise, and is not counted (docs/design.md).

    The second set's own interval is left out: with its 8 rounds it is [min, max], which one stray
    round sets. An old entry's noise is not carried over either, so a noisy recording does not loosen a
    cell for ever.
    """
    noise = max(first.half_width, relative_spread(first.speedup, second.speedup))
    if comparable and previous is not None and finite_number(previous):
        pooled = (first.speedup * second.speedup) ** 0.5
        noise = max(noise, relative_spread(pooled, previous))
    return noise


def across_runs_of(est: SpeedupEstimate, between_run_sd: float | None) -> SpeedupEstimate | None:
    """`est` with its interval widened by the between-run spread its baseline entry learned from
    saved runs (``ampbench spread``), or None where the entry has none. The verdict does not use it:
    its tolerance already allows for the baseline's run being another; this is the interval to hold
    another run's speedup against."""
    between = finite_number(between_run_sd)
    return None if between is None else across_runs(est, between)


def describe_across(across: SpeedupEstimate, count: int | None) -> str:
    return (f"[{across.low:.3f}, {across.high:.3f}] (between-run sd {across.between_run_sd:.1%} from "
            f"{'?' if count is None else count} runs)")
