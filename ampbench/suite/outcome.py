"""How a speed-like cell's verdict ends its pytest test: one place for the failure and warning texts
of every test that times a mode against fp32 (test_speed, test_distributed), and for what
pytest-benchmark is handed of a cell."""

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


def finish(verdict: Verdict, problems: list[str], what: str, message: str, *, strict: bool, kind: str,
           inconclusive: type[Warning], warn_first: list[Warning] = (), warn_after: list[Warning] = ()) -> None:
    """`conclude`, with the cell's own warnings around it: those about how it was measured first, those
    about a cell that held (a slower host, no baseline file) once it did."""
    for warning in warn_first:
        warnings.warn(warning, stacklevel=2)
    conclude(verdict, problems, what, message, strict=strict, kind=kind, inconclusive=inconclusive)
    for warning in warn_after:
        warnings.warn(warning, stacklevel=2)


def record_step_times(benchmark, per_step_seconds: list[float]) -> None:
    """Hand pytest-benchmark the mode's device time per training step, one value per round, as its
    figures for this test: its own timing of a block whose step count follows the step time cannot
    show a slowdown, and its compare (--benchmark-compare-fail) should see what the verdict sees.
    pytest-benchmark has no public call for times measured elsewhere; ``_make_stats`` is what its
    ``pedantic`` uses. Nothing is recorded under --benchmark-disable."""
    if getattr(benchmark, "disabled", False) or not per_step_seconds:
        return
    stats = benchmark._make_stats(1)
    for seconds in per_step_seconds:
        stats.update(seconds)
    benchmark._mode = "ampbench"  # a second use of the fixture in one test is a bug; let it say so
