"""A project of the user's own beside the installed suite: its own top-level ``models`` package and
``--strict-markers`` leave the suite's cells running (the zoo is ``ampbench.models``, the cell tests'
markers are the plugin's), its tests after the suite's speed cells find none of their trainers left, and
the built package installs no top-level package but ``ampbench``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = '[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n'
OWN_MODELS = '"""The project\'s own models, in a package named as many projects name theirs."""\nNAMES = ("own_net",)\n'
SUITE = "from ampbench.suite import *  # noqa: F403 - the suite's cells, over the models --perf-models names\n"
TESTS = SUITE + '''import models


def test_the_projects_models_package_is_its_own():
    assert models.NAMES == ("own_net",)
'''
ONE_CELL = ("-p", "no:cacheprovider", "--perf-device", "cpu", "--perf-models", "mlp", "--perf-precisions", "bf16")


@pytest.fixture
def project(pytester, monkeypatch):
    """A project that runs the suite's cells from its own test module, with this checkout's ampbench."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    pytester.makepyprojecttoml(PYPROJECT)
    return pytester


def test_a_projects_own_models_package_leaves_the_suites_cells_running(project):
    project.makepyfile(test_own=TESTS)
    project.mkpydir("models").joinpath("__init__.py").write_text(OWN_MODELS)
    # python -m pytest puts the project's folder first on sys.path, where its models/ is found first
    result = project.runpytest_subprocess(*ONE_CELL, "-v", "-k", "test_speed or models_package")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_own.py::test_speed?mlp-bf16? PASSED*",
                                 "*test_own.py::test_the_projects_models_package_is_its_own PASSED*"])


def test_strict_markers_accept_the_suites_markers(project):
    project.makepyfile(test_own=SUITE)
    result = project.runpytest_subprocess(*ONE_CELL, "--strict-markers", "--collect-only", "-q")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines(["test_own.py::test_speed?mlp-bf16?", "test_own.py::test_convergence*"])


AFTER_SPEED = '''
import gc

from ampbench.train import Trainer


def test_no_trainer_of_the_speed_cells_is_left():
    gc.collect()
    left = [f"{t.spec.name} {t.mode.name}" for t in gc.get_objects() if isinstance(t, Trainer)]
    assert not left, f"trainers still alive after the speed cells: {left}"
'''


def test_the_speed_cells_kept_sides_go_with_their_module(project):
    """The speed cells keep their model's fp32 side (and a versus side) from cell to cell; once their module is
    done those models go, so the tests after it find the device as they would alone. On an H200 the memory
    tests' out-of-memory demonstration failed after the speed cells while gpt's fp32 side was still kept."""
    project.makepyfile(test_a_speed=SUITE, test_b_after=AFTER_SPEED)
    result = project.runpytest_subprocess(*ONE_CELL, "-q", "-k", "test_speed or no_trainer")
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    result.assert_outcomes(passed=2)


def _setuptools_major() -> int:
    try:
        return int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


def test_the_wheel_installs_no_top_level_package_but_ampbench(tmp_path):
    source = tmp_path / "source"  # a copy: a build writes build/ and *.egg-info beside its sources

    def left_out(folder: str, names: list[str]) -> list[str]:
        top = Path(folder) == ROOT
        return [n for n in names
                if n == "__pycache__" or n.endswith(".egg-info") or (top and (n.startswith(".") or n == "build"))]

    shutil.copytree(ROOT, source, ignore=left_out)
    # the build backend pyproject.toml asks for, where this environment has it; else pip fetches it, as
    # `pip install -e .` did
    local = ["--no-build-isolation"] if _setuptools_major() >= 69 else []
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *local,
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("ampbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}) == ["ampbench"]
    assert "ampbench/models/__init__.py" in names and "ampbench/models/mlp.py" in names
    # pyproject.toml lists the packages: each folder of the tree that holds a module is in the wheel
    folders = {("ampbench", *p.parent.relative_to(ROOT / "ampbench").parts) for p in (ROOT / "ampbench").rglob("*.py")}
    folders |= {("ampbench", "models",
                 *p.parent.relative_to(ROOT / "models").parts) for p in (ROOT / "models").rglob("*.py")}
    assert (folders
            <= {tuple(n.split("/")[:-1]) for n in names}), sorted(folders - {tuple(n.split("/")[:-1]) for n in names})
    # installed (a wheel is importable as it is unpacked), the zoo is ampbench.models and nothing is `models`
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import importlib.util, ampbench.models, ampbench.models.resnet; "
             "print(ampbench.models.__file__, len(ampbench.models.REGISTRY), importlib.util.find_spec('models'))")
    imported = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": str(site)})
    assert imported.returncode == 0, imported.stderr
    from ampbench import models

    assert imported.stdout.split() == [str(site / "ampbench" / "models" / "__init__.py"), str(len(models.REGISTRY)),
                                       "None"], imported.stdout
