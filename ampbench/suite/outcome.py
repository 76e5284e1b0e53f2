"""How a speed-like cell's verdict ends its pytest test: one place for the failure and warning texts
of every test that times a mode against fp32 (test_speed, test_distributed), and for what
pytest-benchmark is handed of a cell."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

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
           inconclusive: type[Warning], warn_first: Sequence[Warning] = (), warn_after: Sequence[Warning] = ()) -> None:
    """`conclude`, with the cell's own warnings around it: those about how it was measured first, those
    about a cell that held (a slower host, no baseline file) once it did."""
    for warning in warn_first:
        warnings.warn(warning, stacklevel=2)
    conclude(verdict, problems, what, message, strict=strict, kind=kind, inconclusive=inconclusive)
    for warning in warn_after:
        warnings.warn(warning, stacklevel=2)


class StepClock:
    """pytest-benchmark's timer for the cells whose step times are measured elsewhere (on the device, in
    interleaved rounds): each step of the benchmarked target advances it by the next measured time, so
    that ``benchmark.pedantic`` records exactly those times, through pytest-benchmark's public API (a
    ``timer`` named by the ``benchmark`` marker). Its name is the timer the JSON's ``options`` name."""

    __name__ = "step_clock"

    def __init__(self) -> None:
        self._now = 0.0
        self._pending: list[float] = []
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self._now

    def load(self, seconds: list[float]) -> None:
        self._now, self._pending, self.reads = 0.0, list(seconds), 0

    def step(self) -> None:
        self._now += self._pending.pop(0)


step_clock = StepClock()
# the marker of a test that hands pytest-benchmark a cell's step times (the plugin adds the model to the group)
STEP_TIMES = {"timer": step_clock}


def record_step_times(benchmark, per_step_seconds: list[float]) -> None:
    """Hand pytest-benchmark the mode's device time per training step, one value per round, as its
    figures for this test: its own timing of a block whose step count follows the step time cannot
    show a slowdown, and its compare (--benchmark-compare-fail) should see what the verdict sees. The
    test's ``benchmark`` marker names ``step_clock`` as its timer (``STEP_TIMES``); a test without it
    would record the wall time of an empty step, and fails instead. Nothing is recorded under
    --benchmark-disable."""
    if getattr(benchmark, "disabled", False) or not per_step_seconds:
        return
    step_clock.load(per_step_seconds)
    benchmark.pedantic(step_clock.step, rounds=len(per_step_seconds), iterations=1, warmup_rounds=0)
    if step_clock.reads != 2 * len(per_step_seconds):
        raise RuntimeError(f"{benchmark.fullname}: pytest-benchmark did not time its rounds with "
                           "ampbench.suite.outcome.step_clock; mark the test "
                           "@pytest.mark.benchmark(group=..., **STEP_TIMES)")
