"""The speed cells keep their model's fp32 side (and a versus side) from cell to cell; once the module of
speed cells is done, those models go, so the tests after it find the device as they would alone. On an
H200 the memory tests' out-of-memory demonstration failed after the speed cells while gpt's fp32 side was
still kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

AFTER = '''
import gc

from ampbench.train import Trainer


def test_no_trainer_of_the_speed_cells_is_left():
    gc.collect()
    left = [f"{t.spec.name} {t.mode.name}" for t in gc.get_objects() if isinstance(t, Trainer)]
    assert not left, f"trainers still alive after the speed cells: {left}"
'''


def test_the_speed_cells_kept_sides_go_with_their_module(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n')
    (tmp_path / "test_a_speed.py").write_text((ROOT / "perf" / "test_speed.py").read_text())
    (tmp_path / "test_b_after.py").write_text(AFTER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--perf-device", "cpu",
                          "--perf-models", "mlp", "--perf-precisions", "bf16"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout, run.stdout[-2000:]
