"""The loss-scaling property suite has teeth: run against each deliberately broken scaler of
``tests/broken_scalers.py`` the property meant to catch it fails, and against ``torch.amp:GradScaler``
the same properties pass.

All runs share one child process (torch imports once, not ten times) that calls ``pytest.main`` per
scaler with the ``ci`` profile minus shrinking: a broken scaler only has to fail, and shrinking its
counterexample is most of the time a failing property costs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE = "perf/test_loss_scaling.py"
GRADSCALER = "torch.amp:GradScaler"


def _run_suites(runs: list[tuple[str, str]], storage: Path) -> dict[str, dict]:
    """Run (scaler spec, -k expression) pairs in one child process; per spec its exit code and failed ids."""
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci",
           "HYPOTHESIS_STORAGE_DIRECTORY": str(storage), "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(runs)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert (proc.returncode == 0
            and last.startswith("{")), f"driver failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return json.loads(last)


def test_broken_scalers_fail_and_gradscaler_passes(tmp_path: Path) -> None:
    """Each broken scaler fails the property named in CAUGHT_BY (on its `tested` case); GradScaler
    passes every one of those properties (its documented xfails do not count as failures)."""
    from tests.broken_scalers import CAUGHT_BY

    runs = [(f"tests.broken_scalers:{name}", f"tested and {prop}") for name, prop in CAUGHT_BY.items()]
    every_prop = " or ".join(sorted(set(CAUGHT_BY.values())))
    runs.append((GRADSCALER, f"tested and ({every_prop})"))
    results = _run_suites(runs, tmp_path)

    gradscaler = results[GRADSCALER]
    assert gradscaler["exit"] == 0 and not gradscaler["failed"], f"GradScaler failed {gradscaler}"
    escaped = []
    for name, prop in CAUGHT_BY.items():
        r = results[f"tests.broken_scalers:{name}"]
        if r["exit"] != 1 or not any(f"{prop}[tested" in nodeid for nodeid in r["failed"]):
            escaped.append(f"{name} (meant to fail {prop}): exit {r['exit']}, failed {r['failed']}")
    assert not escaped, "broken scalers the suite did not catch:\n" + "\n".join(escaped)


def _drive(runs: list[tuple[str, str]]) -> dict[str, dict]:
    import pytest
    from hypothesis import Phase, settings

    from ampbench.plugin import session

    session.register_profiles()
    settings.register_profile(
        "teeth", settings.get_profile("ci"), phases=[Phase.explicit, Phase.reuse, Phase.generate], database=None
    )
    os.environ["HYPOTHESIS_PROFILE"] = "teeth"  # the plugin loads the profile this names

    class FailedIds:
        def __init__(self) -> None:
            self.failed: list[str] = []

        def pytest_runtest_logreport(self, report) -> None:
            if report.failed:
                self.failed.append(report.nodeid)

    results = {}
    for spec, select in runs:
        rec = FailedIds()
        args = [SUITE, "--loss-scaler", spec, "-k", select, "-q", "-x", "-p", "no:cacheprovider", "--no-header",
                "-W", "ignore::DeprecationWarning"]
        code = pytest.main(args, plugins=[rec])
        results[spec] = {"exit": int(code), "failed": rec.failed}
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(_drive([tuple(r) for r in json.loads(sys.argv[1])])))
