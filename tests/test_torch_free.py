"""The run history, the baseline files and the gate work without torch: `ampbench history ...` and
`ampbench baselines ...` run on a machine that reads and judges runs but trains nothing (a dashboard host, a
CI job that only gates), and the gate judges every timed figure, a comparison of two runs too; an A/B run
and a bisect run the suite in the processes they start, never in their own; so no
module of theirs may pull torch in, through any chain of imports. Each module is imported in a fresh
interpreter, since this one has torch loaded already."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TORCH_FREE = ("history", "baselines", "gate", "ab", "bisect")


def _modules() -> list[str]:
    found = []
    for wing in TORCH_FREE:
        for path in sorted((ROOT / "ampbench" / wing).glob("*.py")):
            found.append(".".join(("ampbench", wing, path.stem)).removesuffix(".__init__"))
    return found


def test_the_scan_finds_the_modules():
    assert {"ampbench.history", "ampbench.history.store", "ampbench.baselines.spread"} <= set(_modules())


# one interpreter per module: one that imports torch must not hide behind one imported before it
@pytest.mark.parametrize("module", _modules())
def test_module_does_not_import_torch(module: str):
    # this checkout's package first, not an installed copy of another
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = f"import sys, {module}; print('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False", f"{module} imports torch"
