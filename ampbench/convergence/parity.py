"""Parity: a mode's accuracy held against its parity mode's (fp32's, or compiled amp_bf16's for fp8) by
``ParityCheck``, and ``parity_cell`` turning that into the convergence cell's record and how its test
ends."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ampbench.baselines.entries import ConvergenceEntry
from ampbench.convergence.training import Budget, ConvergenceResult
from ampbench.results import ConvergenceRecord
from ampbench.verdict import Verdict


class Outcome(str, Enum):
    PASS = "pass"  # within the margin of fp32's accuracy, loss finite throughout
    BELOW_MARGIN = "below margin"  # learned less than fp32 by more than the margin
    NONFINITE = "non-finite"  # NaN or inf in the loss curve or the weights
    PARITY_FAILED = "reference failed"  # fp32 itself did not learn; parity would mean nothing


# each outcome in the suite's one vocabulary, and what a failing test says first
VERDICTS = {Outcome.PASS: Verdict.PASS, Outcome.BELOW_MARGIN: Verdict.REGRESSION,
            Outcome.NONFINITE: Verdict.NON_FINITE, Outcome.PARITY_FAILED: Verdict.PARITY_FAILED}
FAILURE_PREFIXES = {Outcome.NONFINITE: "non-finite training", Outcome.BELOW_MARGIN: "convergence regression",
                    Outcome.PARITY_FAILED: "{parity} reference did not learn"}


# Modes allowed to lag fp32, and why; a lagging cell of these is reported as an expected failure
# (xfail) with its figures, never silently passed, and a cell that does reach parity simply passes.
EXPECTED_TO_LAG: dict[str, str] = {
    "fp16": (
        "pure fp16 (Apex O3, .half(), static loss scale 128) has no fp32 master weights: updates smaller "
        "than half a unit in the last place of an fp16 weight round away, and batch-norm statistics run "
        "in fp16; O3 'did not converge' in \"Mixed Precision Training on Tesla T4 and P100\" (2019)"
    ),
}


@dataclass(frozen=True)
class ParityCheck:
    model: str
    mode: str
    accuracy_ref: float  # the parity mode's accuracy, same data, seed and budget
    margin: float  # absolute accuracy a mode may lose against the parity mode
    min_accuracy: float  # the parity mode's floor
    parity_label: str = "fp32"  # the parity mode, as ``ampbench.modes.label`` names it

    @property
    def line(self) -> float:
        return self.accuracy_ref - self.margin

    def judge(self, result: ConvergenceResult) -> tuple[Outcome, str]:
        head = (f"{self.model} {self.mode}: accuracy {result.accuracy:.4f} on {result.data} after "
                f"{result.steps} steps of batch {result.batch_size}")
        if not result.finite:
            where = (f"loss NaN/inf at steps {result.nonfinite_steps[:10]}"
                     f"{' ...' if len(result.nonfinite_steps) > 10 else ''} of {result.steps}"
                     if result.nonfinite_steps else "loss finite but weights NaN/inf")
            return Outcome.NONFINITE, f"{head}; {where}"
        ref = self.parity_label
        if self.accuracy_ref < self.min_accuracy:
            return Outcome.PARITY_FAILED, (
                f"{head}; the {ref} reference reached only {self.accuracy_ref:.4f}, below the floor "
                f"{self.min_accuracy:.2f}, so the budget is too small for parity to mean anything")
        if result.accuracy < self.line:
            return Outcome.BELOW_MARGIN, (
                f"{head}; expected at least {self.line:.4f} ({ref} {self.accuracy_ref:.4f} - margin "
                f"{self.margin:.3f}); {100 * (self.accuracy_ref - result.accuracy):.1f} points below {ref}")
        return Outcome.PASS, (f"{head}; {ref} {self.accuracy_ref:.4f}, margin {self.margin:.3f} "
                              f"({100 * (result.accuracy - self.accuracy_ref):+.1f} points)")


@dataclass(frozen=True)
class ParityCell:
    """A convergence cell's record and how its test ends: passes, fails as expected (a mode of
    EXPECTED_TO_LAG that lagged), or fails."""

    record: ConvergenceRecord
    outcome: Outcome
    lag_reason: str | None  # why the mode may lag, where it may

    @property
    def expected_lag(self) -> bool:
        return self.record.verdict is Verdict.EXPECTED_LAG

    def failure(self) -> str:
        prefix = FAILURE_PREFIXES[self.outcome].format(parity=self.record.reference or "fp32")
        return f"{prefix}: {self.record.message}"

    def baseline_figures(self) -> dict:
        """What the cell's baseline entry keeps; its margin is policy, and one a person put there stays."""
        r = self.record
        return {"margin": r.margin, "accuracy": r.accuracy, "accuracy_ref": r.accuracy_ref, "reference": r.reference,
                "steps": r.steps,
                "batch_size": r.batch_size, "data": r.data, "finite": self.outcome is not Outcome.NONFINITE,
                "within_margin": self.outcome is Outcome.PASS}


def parity_cell(result: ConvergenceResult, parity: ConvergenceResult, budget: Budget,
                baseline: ConvergenceEntry | None,
                device: str, seed: int, parity_label: str = "fp32") -> ParityCell:
    """Hold a mode's training against its parity mode's (fp32's, or the mode's ``parity_mode``, named
    `parity_label`), with the margin of its baseline entry (the budget's default where it holds none)."""
    baseline_margin = baseline.margin if baseline is not None else None
    margin = float(baseline_margin) if baseline_margin is not None else budget.margin
    check = ParityCheck(result.model, result.mode, parity.accuracy, margin, budget.min_accuracy, parity_label)
    outcome, message = check.judge(result)
    lag_reason = EXPECTED_TO_LAG.get(result.mode)
    verdict, reason = VERDICTS[outcome], (outcome.value if outcome is Outcome.BELOW_MARGIN else None)
    if lag_reason and outcome in (Outcome.BELOW_MARGIN, Outcome.NONFINITE):
        verdict, reason = Verdict.EXPECTED_LAG, outcome.value
    record = ConvergenceRecord(
        model=result.model, mode=result.mode, device=device, data=result.data, image_shape=list(result.image_shape),
        steps=result.steps, batch_size=result.batch_size, seed=seed, accuracy=result.accuracy,
        accuracy_ref=parity.accuracy, reference=parity_label, margin=margin, min_accuracy=budget.min_accuracy,
        loss_curve=result.loss_curve,
        nonfinite_steps=result.nonfinite_steps, train_seconds=result.seconds,
        baseline_margin=baseline_margin, expected_to_lag=bool(lag_reason),
        verdict=verdict, message=message, reason=reason,
    )
    return ParityCell(record, outcome, lag_reason)
