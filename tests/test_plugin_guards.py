"""What the installed plugin does to any pytest run, and the inputs it refuses before the first test: a strict
pytest (``-W error``, ``filterwarnings = error``) starts in any project of the environment; a history that
would not outlive the run, an unknown hypothesis profile, a second model differing only in case are usage
errors naming what is wrong; and the fp8 numerics file, run alone without torchao, skips saying why."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from ampbench import models
from ampbench.models import ModelEntryPointError, register
from ampbench.outputs import memory_store_problem
from ampbench.plugin.history import history_option
from ampbench.plugin.session import PROFILES, load_profiles

ROOT = Path(__file__).resolve().parents[1]


def _pytest(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=180)


# -- a strict pytest in any project ----------------------------------------------------------------

def test_a_strict_pytest_starts_in_a_project_of_its_own(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_own.py").write_text("def test_own():\n    assert 1 + 1 == 2\n")
    run = _pytest(tmp_path, "-W", "error::pytest.PytestAssertRewriteWarning", "test_own.py")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PytestAssertRewriteWarning" not in run.stdout + run.stderr


def test_no_module_of_the_plugin_is_imported_before_pytest_loads_it():
    """pytest marks each module ``pytest_plugins`` names for assertion rewriting as it loads it, in order:
    one an earlier module imported is already loaded, not rewritten, and warns in every run."""
    script = textwrap.dedent("""
        import importlib, sys
        import ampbench.plugin
        for name in ampbench.plugin.pytest_plugins:
            assert name not in sys.modules, f"{name} was imported before pytest loads it"
            importlib.import_module(name)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


# -- a history that outlives the run ---------------------------------------------------------------

@pytest.mark.parametrize("store", ["sqlite://", "sqlite:///:memory:", "SQLite:///:memory:",
                                   "sqlite+pysqlite:///:memory:", "sqlite:///file::memory:?cache=shared&uri=true",
                                   "sqlite:///file:runs?mode=memory&uri=true"])
def test_an_in_memory_history_is_refused_as_the_option_is_read(store):
    assert memory_store_problem(store) == (f"history store {store!r}: an in-memory SQLite database keeps nothing "
                                           "once the run is over; give a file (a path or sqlite:///PATH)")
    with pytest.raises(argparse.ArgumentTypeError, match="give a file .* or off to run without a history"):
        history_option(store)


@pytest.mark.parametrize("store", ["runs.sqlite", ":memory:", "sqlite:///runs.sqlite", "sqlite:////abs/runs.sqlite",
                                   "postgresql://ci@db/ampbench"])
def test_a_store_in_a_file_or_on_a_server_is_taken(store):
    assert memory_store_problem(store) is None  # a plain ":memory:" is a file of that name


def test_pytest_refuses_an_in_memory_history_before_the_first_test(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    open('ran', 'w').close()\n")
    run = _pytest(tmp_path, "--perf-history", "sqlite:///:memory:", "test_own.py")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert ("argument --perf-history: history store 'sqlite:///:memory:': an in-memory SQLite database keeps "
            "nothing") in run.stderr
    assert not (tmp_path / "ran").exists()


# -- hypothesis profiles ---------------------------------------------------------------------------

def test_an_unknown_hypothesis_profile_is_a_usage_error_listing_them(monkeypatch):
    from hypothesis import settings

    before = settings.get_current_profile_name()
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "nightly")
    with pytest.raises(pytest.UsageError) as info:
        load_profiles()
    assert str(info.value).startswith("HYPOTHESIS_PROFILE=nightly: no such hypothesis profile; the profiles are "
                                      f"{', '.join(PROFILES)} and hypothesis's own default")
    assert settings.get_current_profile_name() == before  # the profile in force stays so


def test_pytest_says_so_once_without_a_traceback(tmp_path):
    (tmp_path / "test_own.py").write_text("def test_own():\n    pass\n")
    run = _pytest(tmp_path, "--perf-device", "cpu", "test_own.py",
                  env={**os.environ, "HYPOTHESIS_PROFILE": "nightly"})
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "ERROR: HYPOTHESIS_PROFILE=nightly: no such hypothesis profile" in run.stderr
    assert "INTERNALERROR" not in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr


# -- model names -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, taken", [("MLP", "mlp"), ("Gpt", "gpt"), ("ResNet50", "resnet50")])
def test_a_model_name_differing_from_a_registered_one_only_in_case_is_refused(name, taken):
    with pytest.raises(ModelEntryPointError) as info:
        register(replace(models.get_model("mlp"), name=name), f"entry point ampbench.models {name}")
    assert (f"entry point ampbench.models {name}: model {name!r} differs from the registered {taken!r} only in case"
            in str(info.value))
    assert name not in models.REGISTRY


# -- the fp8 numerics without torchao ---------------------------------------------------------------

def test_the_fp8_numerics_file_alone_skips_saying_torchao_is_missing(tmp_path):
    # torchao as the file finds it missing, whether or not it is installed here
    (tmp_path / "no_torchao.py").write_text(
        "import ampbench.fp8\nampbench.fp8.torchao_problem = lambda: 'torchao is not installed (stand-in)'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    run = _pytest(ROOT, "-p", "no_torchao", "-rs", "--perf-device", "cpu", "perf/test_fp8_numerics.py", env=env)
    assert run.returncode == pytest.ExitCode.OK, run.stdout + run.stderr
    assert "fp8 numerics: torchao is not installed (stand-in)" in run.stdout
    assert " skipped" in run.stdout and "passed" not in run.stdout
