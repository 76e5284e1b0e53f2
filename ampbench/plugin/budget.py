"""--perf-time-budget for every kind of cell: once the run's budget is spent, a cell not yet begun (speed,
memory, convergence, input pipeline, distributed) is not run. It is skipped, saying so, as an undecided cell
warns; under --perf-strict it fails, as an inconclusive verdict does there, so that a budget never lets an
unmeasured cell through. A speed cell is checked more finely before its rounds begin (``speed.jobtime``:
its fewest rounds must fit what is left), and its looks stop undecided when time runs out
(``speed.sequential``)."""

from __future__ import annotations

from typing import NoReturn

import pytest


def not_run(why: str, strict: bool) -> NoReturn:
    """A cell the time budget leaves unrun: skipped with `why`; a failure under --perf-strict."""
    if strict:
        pytest.fail(f"{why} (--perf-strict)", pytrace=False)
    pytest.skip(why)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the cell's fixtures build anything (a side's warm-up is seconds on a slow card). Its imports are
    here: the plugin's modules are imported by pytest in order, and torch only where a run acts."""
    from ampbench.plugin.session import SETTINGS_KEY

    settings = item.config.stash.get(SETTINGS_KEY, None)
    if settings is None or settings.deadline is None:
        return
    from ampbench.plugin.entries import cell_of
    from ampbench.speed.jobtime import BUDGET_FLAG, remaining_s

    if cell_of(item) is None:
        return
    if remaining_s(settings.deadline) <= 0:
        not_run(f"{item.name} not run: {BUDGET_FLAG} is spent (not a pass: no verdict)", settings.strict)
