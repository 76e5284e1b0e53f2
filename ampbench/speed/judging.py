"""How one measured ratio of a speed cell is judged (`judge`: its verdict and judgement, from its
``measurement.Measurement`` and its check), its interval across runs (`across_runs_of`), whether a
recording measured what its entry did (`comparable_recording`), and the noise a recording stores
(`recorded_noise`) of its rounds pooled."""

from __future__ import annotations

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import measurement_mismatch
from ampbench.baselines.spread import software_difference
from ampbench.speed.measurement import Measurement, Rounds
from ampbench.speed.sequential import verdict_at
from ampbench.stats import SpeedupEstimate, across_runs, estimate_speedup, finite_number, relative_spread
from ampbench.verdict import SpeedupCheck, Verdict

NO_BASELINE = "no baseline for this GPU"


def judge(measured: Measurement, check: SpeedupCheck | None) -> tuple[Verdict, str]:
    """The verdict of a measured ratio against `check` (None: there is nothing to judge it against), and its
    judgement: how it compares, in words. A regression stands only where the confirming rounds, looked at
    alike, agree; a gated ratio its own rounds pass fails where it lies, with the runs its history held back
    before it, below the line together (``SpeedupCheck.fails_together``)."""
    est = measured.estimate
    if check is None:
        return Verdict.NO_BASELINE, f"speedup {est}; {NO_BASELINE}"
    verdict, confirmation = verdict_at(check, est, measured.look), measured.confirmation
    if verdict is Verdict.REGRESSION and confirmation is not None and verdict_at(
            check, confirmation, measured.confirmation_look) is not Verdict.REGRESSION:
        verdict = Verdict.INCONCLUSIVE  # two sets of rounds disagree: not confirmed
    judgement = check.describe(est) + (f"; confirming batch {confirmation}" if confirmation else "")
    together = check.fails_together(est.speedup, verdict) if measured.gated else None
    if together:
        verdict, judgement = Verdict.REGRESSION, f"{judgement}; {together}"
    return verdict, judgement


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


def pooled_estimate(a: Rounds, b: Rounds, confidence: float) -> SpeedupEstimate:
    """Two sets of rounds as one, each in its own order (a set that starts over starts with the side it is over)."""
    return estimate_speedup([*a.ref_times, *b.ref_times], [*a.mode_times, *b.mode_times], confidence,
                            ref_first=a.ref_first + b.ref_first)
