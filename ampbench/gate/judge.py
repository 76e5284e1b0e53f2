"""The judge every timed figure passes through: a speed cell's ratios, a distributed cell's figures, a
bisect step's cells and two runs compared (``ampbench compare``) alike.

A figure's check (``verdict.SpeedupCheck``) is made here from the ``tolerance.Reference`` its baseline source
gives it, or not, and why (`ratio_check`). Its verdict is that check's of its estimate, taken at a look of
the sequential test where one stopped its rounds (`verdict_of`). A regression stands only where a second,
independent set of rounds, looked at alike, finds it too (`confirmed`); a figure its own rounds did not fail
fails all the same where it lies below the line together with the runs its history held back before it
(`grouped`); a regression found in rounds the card ran under different clocks or a throttle stands only where
cycle space and the rounds at steady clocks agree (``gate.conditions.ConditionsCheck``). `gates` says which
figures of the table of ratios (``results.ratios``) gate their cell. `judge` is all of it for one measured
ratio, with its words.
"""

from __future__ import annotations

from ampbench.baselines.entries import FlatEntry
from ampbench.gate.conditions import CONDITIONS
from ampbench.gate.looks import Look, verdict_at
from ampbench.gate.measurement import Measurement
from ampbench.results.ratios import DEVICE, RECORD_AGAIN, WALL, RatioKind
from ampbench.settings import GATES
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import Reference
from ampbench.verdict import SpeedupCheck, Verdict

NO_BASELINE = "no baseline for this GPU"
# a ratio whose looks --perf-time-budget stopped: what its judgement adds
BUDGET_CUT = "--perf-time-budget ran out before its rounds decided: inconclusive, never a pass"


def verdict_of(check: SpeedupCheck | None, est: SpeedupEstimate, look: Look | None = None) -> Verdict:
    """`check`'s verdict of `est` (None: nothing to judge it against), an estimate taken at `look` (None:
    over all of its rounds, a fixed-size interval)."""
    return verdict_at(check, est, look) if check is not None else Verdict.NO_BASELINE


def confirmed(verdict: Verdict, check: SpeedupCheck | None, confirmation: SpeedupEstimate | None,
              look: Look | None = None) -> Verdict:
    """`verdict` once a confirming set of rounds was taken: a regression that the confirmation (taken at
    `look`; None: the confirming rounds gave no such figure) does not repeat is inconclusive."""
    if verdict is Verdict.REGRESSION and (
            confirmation is None or verdict_of(check, confirmation, look) is not Verdict.REGRESSION):
        return Verdict.INCONCLUSIVE  # two sets of rounds disagree: not confirmed
    return verdict


def grouped(check: SpeedupCheck, speedup: float, verdict: Verdict | None) -> str:
    """Why a run whose own rounds did not fail (its `verdict` is no regression) fails all the same, at
    `speedup`, below the line together with the runs its history held back before it: "" where it does not,
    or where no history gives the rule. The one place the group rule meets a verdict; its caller makes the
    verdict a regression where this says why."""
    rule = check.group_failure
    if rule is None or verdict is Verdict.REGRESSION:
        return ""
    return rule(speedup, check.tolerance) or ""


def gates(gate: str, device: SpeedupCheck | None, wall: SpeedupCheck | None,
          device_measured: bool = True) -> tuple[str, ...]:
    """The --perf-gate figures (settings.GATES) that gate a cell, from the checks of its device-time and
    wall-clock figures: the wall clock's alone where device time would gate but the run measured none
    (gloo ranks on the CPU), or its baseline entry holds none (recorded before device time) while it
    holds the wall-clock speedup."""
    gated = GATES[gate]
    if DEVICE.gate in gated and (not device_measured or (device is None and wall is not None)):
        return (WALL.gate,)
    return gated


def judge(measured: Measurement, check: SpeedupCheck | None) -> tuple[Verdict, str]:
    """The verdict of a measured ratio against `check` (None: there is nothing to judge it against), and its
    judgement: how it compares, in words. A regression stands only where the confirming rounds agree
    (`confirmed`) and the card's clocks do not explain it (``gate.conditions.ConditionsCheck``); a gated ratio
    its own rounds pass fails where the group rule says so (`grouped`)."""
    est = measured.estimate
    if check is None:
        return Verdict.NO_BASELINE, f"speedup {est}; {NO_BASELINE}"
    verdict, confirmation = verdict_at(check, est, measured.look), measured.confirmation
    if confirmation is not None:
        verdict = confirmed(verdict, check, confirmation, measured.confirmation_look)
    verdict, clocks = CONDITIONS.judge(verdict, check, measured)
    judgement = check.describe(est) + (f"; confirming batch {confirmation}" if confirmation else "")
    judgement += f"; {clocks}" if clocks else ""
    if measured.cut_short:
        # a look that decides stops the rounds before the budget can: a cut measurement decided nothing, and
        # the budget never makes a pass of it
        if verdict in (Verdict.PASS, Verdict.IMPROVED, Verdict.REGRESSION):
            verdict = Verdict.INCONCLUSIVE
        judgement += f"; {BUDGET_CUT}"
    if measured.gated:
        why = grouped(check, est.speedup, verdict)
        if why:
            verdict, judgement = Verdict.REGRESSION, f"{judgement}; {why}"
    return verdict, judgement


def ratio_check(kind: RatioKind, model: str, mode: str, entry: FlatEntry | None, reference: Reference | None, *,
                figure: str = "speedup over fp32", over: str | None = None,
                method: str | None = None) -> tuple[SpeedupCheck | None, str]:
    """The check of a ratio of `kind` (of `figure`, over the side `over`, its device time measured by
    `method`) against `reference`, or None and why not: the cell's baseline `entry` is missing, holds no
    such figure, was over another side, or measured it otherwise. The tolerance is the reference's."""
    def named(template: str) -> str:
        return template.format(method=method, figure=figure, over=over)

    if entry is None:
        return None, named(kind.no_entry)
    if (kind.over and getattr(entry, "versus", None) != over) or reference is None:
        return None, named(kind.missing)
    if kind.same_method and reference.method != method:
        return None, (f"{kind.other_method}measured by {reference.method} in the baseline and by {method} here: "
                      + RECORD_AGAIN)
    return reference.check(model, mode, figure), ""
