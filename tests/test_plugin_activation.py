"""The installed plugin (entry point ``pytest11``) in another project's pytest run: it is loaded, and
acts only where the run asks for it (``ampbench.plugin.acts``); elsewhere it prints nothing and
imports neither torch nor the history's SQLAlchemy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from ampbench.plugin import asked, declared

ROOT = Path(__file__).resolve().parents[1]

PLAIN = """
def test_plain():
    assert 1 + 1 == 2
"""
# what the run had imported at its end, written where the test reads it
REPORTER = """
import json, sys

def pytest_unconfigure(config):
    plugin = config.pluginmanager.get_plugin("ampbench")
    with open("modules.json", "w") as f:
        json.dump({"torch": "torch" in sys.modules, "sqlalchemy": "sqlalchemy" in sys.modules,
                   "plugin": getattr(plugin, "__name__", None)}, f)
"""


def _run(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    (folder / "test_plain.py").write_text(PLAIN)
    (folder / "conftest.py").write_text(REPORTER)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(folder), *args],
                         cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    return run, json.loads((folder / "modules.json").read_text())


def test_the_package_registers_the_plugin_by_entry_point():
    found = [e.value for e in entry_points(group="pytest11") if e.name == "ampbench"]
    assert found == ["ampbench.plugin"], f"pytest11 entry point ampbench: {found} (pip install -e . registers it)"


def test_a_run_without_ampbench_tests_sees_nothing_of_it(tmp_path):
    run, read_back = _run(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert read_back["plugin"] == "ampbench.plugin", "the plugin was not loaded by its entry point"
    # pytest's own header names the installed plugin ("plugins: ampbench-0.1.0"); the plugin says nothing
    assert "ampbench:" not in run.stdout + run.stderr and "ampbench summary" not in run.stdout, run.stdout
    assert not read_back["torch"] and not read_back["sqlalchemy"], read_back


def test_a_run_that_declares_it_gets_the_suite(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nrequired_plugins = ampbench\n")
    run, read_back = _run(tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ampbench: CPU smoke pass") == 2 and read_back["torch"], run.stdout


def test_an_ampbench_option_turns_it_on_and_its_usage_errors_stay(tmp_path):
    run, _ = _run(tmp_path, "--perf-device", "cpu")
    assert run.returncode == 0 and "ampbench: CPU smoke pass" in run.stdout, run.stdout + run.stderr
    run, _ = _run(tmp_path, "--perf-require-gpu", "--perf-device", "cpu")
    assert run.returncode == 4 and "ERROR: --perf-require-gpu: --perf-device cpu" in run.stderr, run.stderr


def test_a_cell_test_in_a_run_that_does_not_ask_is_a_usage_error(tmp_path):
    (tmp_path / "test_cell.py").write_text("def test_cell(model_name, mode_name):\n    pass\n")
    run, _ = _run(tmp_path)
    assert run.returncode != 0 and "required_plugins" in run.stdout + run.stderr, run.stdout + run.stderr


@pytest.mark.parametrize("specs, expected", [
    (["ampbench"], True), (["AmpBench>=0.1"], True), (["pytest-benchmark", "ampbench ~= 0.1"], True),
    (["ampbench-extra"], False), ([], False),
])
def test_required_plugins_is_read_with_version_ranges(specs, expected):
    assert declared(specs) is expected


def test_only_ampbench_options_ask_for_it():
    assert asked(["--perf-device", "cpu"]) and asked(["--loss-scaler=x:Y"])
    assert not asked(["-k", "perf", "tests/"]) and not asked(["--benchmark-json", "perf.json"])


def test_without_pytest_benchmark_a_plain_run_passes_and_a_suite_run_is_a_usage_error(tmp_path):
    run, _ = _run(tmp_path, "-p", "no:benchmark")
    assert run.returncode == 0 and "INTERNALERROR" not in run.stdout + run.stderr, run.stdout + run.stderr
    (tmp_path / "pytest.ini").write_text("[pytest]\nrequired_plugins = ampbench\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("PYTEST_ADDOPTS", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:benchmark"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 4 and "INTERNALERROR" not in run.stdout + run.stderr, run.stdout + run.stderr
    assert "ERROR: pytest-benchmark's plugin is off in this run (-p no:benchmark" in run.stderr, run.stderr
