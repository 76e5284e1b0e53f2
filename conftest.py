"""The repository's root on sys.path (pytest puts a root conftest's folder there), so that perf/ and
tests/ import each other as ``perf.*`` and ``tests.*``. The suite's pytest plugin is the installed
package's (``ampbench.plugin``, entry point ``pytest11``), never loaded from here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

# what pytest-xdist tells its workers' environment; pytest-benchmark turns itself off where it finds them
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True, scope="session")
def _runs_of_their_own() -> Iterator[None]:
    """A pytest run a test or a fixture starts (pytester's, or a child process) is a run of its own, not a
    worker of pytest-xdist's where the harness's tests run under -n: there pytest-benchmark would be off
    in it. Session-wide, so that a module's fixture that runs pytest sees it too."""
    with pytest.MonkeyPatch.context() as patch:
        for name in XDIST_VARIABLES:
            patch.delenv(name, raising=False)
        yield

