"""A project's own model joins the registry through the ``ampbench.models`` entry point group, beside
the zoo's, and a broken entry point is a usage error that names it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ampbench import models
from ampbench.models import ModelEntryPointError, register, spec_of_entry_point

ROOT = Path(__file__).resolve().parents[1]


def _fake_distribution(site: Path, entry_points: str) -> None:
    """An installed distribution on `site` (a dist-info folder, as pip writes one) with these entry points."""
    (site / "own_pkg").mkdir(parents=True)
    (site / "own_pkg" / "__init__.py").write_text(
        "from dataclasses import replace\nfrom ampbench.models.mlp import SPEC as MLP\nSPEC = replace(MLP, "
        "name='tiny_mlp')\n")
    info = site / "own_pkg-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: own-pkg\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[ampbench.models]\n{entry_points}\n")


def _pytest(site: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "perf/test_speed.py", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "--perf-device", "cpu", "--perf-precisions", "fp32", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_an_entry_point_model_runs_beside_the_zoos(tmp_path):
    _fake_distribution(tmp_path, "tiny_mlp = own_pkg:SPEC")
    result = _pytest(tmp_path, "--perf-models", "tiny_mlp,mlp")
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line.split("::")[1] for line in result.stdout.splitlines() if "::" in line] == [
        "test_speed[tiny_mlp-fp32]", "test_speed[mlp-fp32]"]


BROKEN = "entry point ampbench.models tiny_mlp = 'own_pkg.nosuch:SPEC': cannot be loaded: ModuleNotFoundError"


# --perf-models is parsed before the session starts: naming a model, the broken one's or another, must
# not turn the cause into argparse's "invalid value"
@pytest.mark.parametrize("named", [(), ("--perf-models", "mlp"), ("--perf-models", "tiny_mlp")])
def test_a_broken_entry_point_is_a_usage_error_naming_it(tmp_path, named):
    _fake_distribution(tmp_path, "tiny_mlp = own_pkg.nosuch:SPEC")
    result = _pytest(tmp_path, *named)
    assert result.returncode == 4, result.stdout + result.stderr
    assert f"ERROR: ampbench: {BROKEN}" in result.stderr, result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr


def test_ampbench_list_names_a_broken_entry_point_without_a_traceback(tmp_path):
    _fake_distribution(tmp_path, "tiny_mlp = own_pkg.nosuch:SPEC")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "ampbench", "list"], env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(f"ampbench: error: {BROKEN}") and "Traceback" not in result.stderr, result.stderr


def _raise():
    raise ImportError("no module named own")


@pytest.mark.parametrize("name, load, words", [
    ("own", _raise,
     "entry point ampbench.models own = 'own.spec:SPEC': cannot be loaded: ImportError: no module named own"),
    ("own", lambda: object(), "names a object, not an ampbench.models.spec.ModelSpec"),
    ("own", lambda: models.get_model("mlp"), "its ModelSpec is named 'mlp'; name the entry point after it"),
])
def test_what_an_entry_point_must_name(name, load, words):
    with pytest.raises(ModelEntryPointError) as info:
        spec_of_entry_point(name, "own.spec:SPEC", load)
    assert words in str(info.value)


def test_a_name_the_zoo_holds_is_refused():
    with pytest.raises(ModelEntryPointError, match="model 'gpt' is already registered"):
        register(replace(models.get_model("mlp"), name="gpt"), "entry point ampbench.models gpt")


@pytest.mark.parametrize("name", ["lenet_ü模型", "le net[5],x", "le-net", "5net", ""])
def test_a_name_run_options_and_test_ids_cannot_hold_is_refused(name):
    with pytest.raises(ModelEntryPointError) as info:
        register(replace(models.get_model("mlp"), name=name), f"entry point ampbench.models {name}")
    assert (f"model name {name!r} cannot be named by --perf-models or in a test id; a model name is ASCII "
            "letters, digits and '_', beginning with a letter") in str(info.value)
    assert name not in models.REGISTRY


def test_an_entry_point_of_a_name_perf_models_cannot_hold_is_a_usage_error(tmp_path):
    _fake_distribution(tmp_path, "tiny_mlp = own_pkg:SPEC")
    (tmp_path / "own_pkg" / "__init__.py").write_text(
        "from dataclasses import replace\nfrom ampbench.models.mlp import SPEC as MLP\n"
        "SPEC = replace(MLP, name='tiny mlp,x')\n")
    (tmp_path / "own_pkg-0.1.dist-info" / "entry_points.txt").write_text(
        "[ampbench.models]\ntiny mlp,x = own_pkg:SPEC\n")
    result = _pytest(tmp_path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert "model name 'tiny mlp,x' cannot be named by --perf-models" in result.stderr, result.stderr
