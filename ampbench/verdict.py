"""Regression checks as tiny objects: each classifies a measurement and explains itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, Sequence

from ampbench.stats import SpeedupEstimate


class Verdict(str, Enum):
    """The one vocabulary of every kind of cell's verdict. Each member says how much it matters
    (`failing`, `warns`), so a reader never needs to know which kind of cell wrote it."""

    PASS = "pass"  # the figure holds: an interval reaches the line, a ratio stays within its tolerance
    IMPROVED = "improved"  # better than the baseline by more than the tolerance
    REGRESSION = "regression"  # worse than the baseline beyond its tolerance (confirmed, where timed)
    NON_FINITE = "non-finite"  # NaN or inf in the loss or the weights: no figure of the cell means anything
    PARITY_FAILED = "reference failed"  # fp32 itself did not learn, so parity with it says nothing
    ERROR = "error"  # the cell's test stopped with an error (or failed) before its figures reached a verdict
    INCONCLUSIVE = "inconclusive"  # the interval straddles the line after more rounds
    INPUT_BOUND = "input-bound"  # the host's DataLoader caps the step rate: a finding about the host
    EXPECTED_LAG = "expected lag"  # a mode known to fall short (pure fp16) fell short: an expected failure
    NO_BASELINE = "no baseline"  # nothing recorded for this test on this GPU

    # the member is its value wherever it is shown, formatted or used as a key
    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:
        return hash(self.value)

    @property
    def failing(self) -> bool:
        """The cell's test fails on it, and so does `ampbench report --fail-on-regression`."""
        return self in _FAILING

    @property
    def warns(self) -> bool:
        """Not a failure, but worth a look: a warning in pytest (a failure under --perf-strict for
        inconclusive)."""
        return self in _WARNING

    @property
    def needs_a_look(self) -> bool:
        return self.failing or self.warns


_FAILING = frozenset({Verdict.REGRESSION, Verdict.NON_FINITE, Verdict.PARITY_FAILED, Verdict.ERROR})
_WARNING = frozenset({Verdict.INCONCLUSIVE, Verdict.INPUT_BOUND})
# what needs a look first: the order verdicts are counted and listed in
VERDICT_ORDER = (Verdict.REGRESSION, Verdict.NON_FINITE, Verdict.PARITY_FAILED, Verdict.ERROR, Verdict.INCONCLUSIVE,
                 Verdict.INPUT_BOUND, Verdict.EXPECTED_LAG, Verdict.IMPROVED, Verdict.PASS, Verdict.NO_BASELINE)


class GroupRule(Protocol):
    """The group rule of one figure of a cell: why a run whose own rounds did not fail it, at `value`, fails
    all the same under `tolerance`, below the line together with the runs its history held back before it;
    None where it does not. Only a history gives one (``history.baseline_source.CellGroupRule``); the judge
    applies it (``gate.judge.grouped``)."""

    def __call__(self, value: float, tolerance: float) -> str | None: ...


# What needs a look first decides a cell of several ratios: a confirmed regression of any ratio fails it
# whatever the others did, an unresolved one is worth a look before any good news, and an improvement
# is news a pass is not (the baseline may want re-recording); no baseline says the least.
COMBINED_ORDER = (Verdict.REGRESSION, Verdict.INCONCLUSIVE, Verdict.IMPROVED, Verdict.PASS)


def combined(verdicts: Sequence[Verdict | None]) -> Verdict:
    """The verdict of a cell from those of its gated ratios (None: a ratio that does not gate it)."""
    return next((v for v in COMBINED_ORDER if v in verdicts), Verdict.NO_BASELINE)


@dataclass(frozen=True)
class SpeedupCheck:
    model: str
    mode: str
    expected: float  # baseline speedup over fp32
    tolerance: float  # relative; the line is expected x (1 - tolerance)
    figure: str = "speedup over fp32"  # what messages call the ratio (a compiled cell has a second one)
    # why a run of this speedup fails with the runs its history held back before it (speedup, tolerance):
    # a text, or None where it does not (``history.baseline_source.HistoryBaselines.group_failure``;
    # the judge applies it: ``gate.judge.grouped``)
    group_failure: GroupRule | None = field(default=None, compare=False, repr=False)
    why: str = ""  # why the tolerance is held below its learned bound (``Reference.why``), "" where it is not

    @property
    def line(self) -> float:
        return self.expected * (1.0 - self.tolerance)

    @property
    def has_line(self) -> bool:
        """Whether a run could fall below the line at all. Runs that spread by more than the figure itself
        (a host-bound wall clock, the profiler's busy time of one) learn a tolerance of 100% or more, whose
        line lies at or below zero: such a check would pass anything, so it judges nothing."""
        return self.line > 0.0

    @property
    def regression_line(self) -> float | None:
        """The line a record stores: none where the check has no line, so that no report quotes a line
        at or below zero as if a run were judged against it."""
        return self.line if self.has_line else None

    def classify(self, est: SpeedupEstimate) -> Verdict:
        if not self.has_line:
            return Verdict.INCONCLUSIVE
        if est.high < self.line:
            return Verdict.REGRESSION
        if est.low < self.line:
            return Verdict.INCONCLUSIVE
        if est.low > self.expected * (1.0 + self.tolerance):
            return Verdict.IMPROVED
        return Verdict.PASS

    def drop(self, est: SpeedupEstimate) -> float:
        """Relative change of the measured speedup against the baseline (negative: slower)."""
        return est.speedup / self.expected - 1.0

    def describe(self, est: SpeedupEstimate) -> str:
        return (
            f"{self.model} {self.mode}: {self.figure} {est} against baseline {self.expected:.3f}x "
            f"({self.drop(est):+.1%}); {self.line_text()}"
        )

    def line_text(self) -> str:
        """The regression line and its tolerance, or why there is none (``has_line``)."""
        if not self.has_line:
            return f"no regression line: {self.why_no_line()}"
        why = f": {self.why}" if self.why else ""
        return f"regression line {self.line:.3f}x (tolerance {self.tolerance:.1%}{why})"

    def why_no_line(self) -> str:
        """Why a check has no line (``has_line``)."""
        return f"its runs vary by more than the figure (tolerance {self.tolerance:.0%})"


@dataclass(frozen=True)
class RatioCheck:
    """A figure that should stay near its baseline within a relative tolerance (memory ratio,
    largest batch): one-sided when only growth (`worse="higher"`) or shrinkage is a regression."""

    model: str
    mode: str
    figure: str  # name of the figure, e.g. "memory ratio"
    expected: float
    tolerance: float
    worse: str  # "higher" or "lower": which direction is a regression

    def worsening(self, measured: float) -> float:
        """Relative change against the baseline, signed so that > 0 is worse and < 0 better."""
        change = measured / self.expected - 1.0
        return change if self.worse == "higher" else -change

    def improved(self, measured: float) -> bool:
        """Better than the baseline by more than the tolerance."""
        return self.worsening(measured) < -self.tolerance

    def failure(self, measured: float) -> str | None:
        """None if `measured` is acceptable, else a message naming model, mode, figure and drop."""
        if self.worsening(measured) <= self.tolerance:
            return None
        change = measured / self.expected - 1.0
        return (
            f"{self.model} {self.mode}: {self.figure} {measured:.4g} against baseline {self.expected:.4g} "
            f"({change:+.1%}), beyond the tolerance of {self.tolerance:.1%} ({self.worse} is worse)"
        )


class HostOverhead(UserWarning):
    """The wall-clock speedup dropped while the device-time speedup held: the host that launches the
    steps got slower (or busier), not the GPU's work. Reported, never a failure under the device gate."""
