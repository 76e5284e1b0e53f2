"""A torchvision built against another torch (pip falling back to another index for one of the pair) is one
usage error naming both versions and the command that installs a working pair, not a traceback a test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

from ampbench.plugin.checks import CPU_WHEELS, torch_pair_problem

ROOT = Path(__file__).resolve().parents[1]
BROKEN = "operator torchvision::nms does not exist"


def _broken(name: str):
    raise RuntimeError(BROKEN)


def test_a_broken_pair_names_both_versions_and_the_fix():
    problem = torch_pair_problem(_broken)
    torch, vision = metadata.version("torch"), metadata.version("torchvision")
    assert problem.startswith(f"torch {torch} and torchvision {vision} do not work together ({BROKEN})")
    assert f"pip install --force-reinstall torch torchvision --index-url {CPU_WHEELS}" in problem


def test_a_working_or_absent_torchvision_is_no_problem():
    assert torch_pair_problem(lambda name: None) is None

    def absent(name: str):
        raise ModuleNotFoundError(f"No module named {name!r}")

    assert torch_pair_problem(absent) is None


CELLS = '''
import pytest

@pytest.mark.parametrize("model_name, mode_name", [("mlp", "bf16")])
def test_speed(model_name, mode_name):
    pass

def test_builds_a_resnet():
    import torchvision  # noqa: F401
'''


@pytest.mark.parametrize("selected, status_line", [("test_speed", "ERROR: "), ("test_builds_a_resnet", "Exit: ")],
                         ids=["a run of cells", "a test importing it as it runs"])
def test_the_run_stops_with_one_usage_error(tmp_path, selected, status_line):
    fake = tmp_path / "site" / "torchvision"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise RuntimeError({BROKEN!r})\n")
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(CELLS))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "--perf-device", "cpu", "--perf-history", "off", "-k", selected,
                          str(tmp_path / "test_cells.py")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    output = run.stdout + run.stderr
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert output.count("do not work together") == 1 and status_line in output, output
    assert "Traceback" not in output
