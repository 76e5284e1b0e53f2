"""How a speed-like cell's verdict ends its pytest test: one place for the failure and warning texts
of every test that times a mode against fp32 (test_speed, test_distributed)."""

from __future__ import annotations

import warnings

import pytest

from ampbench.verdict import Verdict


def conclude(verdict: Verdict, problems: list[str], what: str, message: str, *, strict: bool,
             kind: str, inconclusive: type[Warning]) -> None:
    """Fail on a problem or a confirmed regression, warn (or under --perf-strict fail) on an
    inconclusive verdict. `kind` names the figure in the message ("speed", "distributed speed")."""
    if problems:
        pytest.fail(f"{what}: " + "; ".join(problems), pytrace=False)
    if verdict is Verdict.REGRESSION:
        pytest.fail(f"{kind} regression: {message}", pytrace=False)
    if verdict is Verdict.INCONCLUSIVE:
        if strict:
            pytest.fail(f"inconclusive {kind} verdict (--perf-strict): {message}", pytrace=False)
        warnings.warn(inconclusive(f"inconclusive: {message}"))
