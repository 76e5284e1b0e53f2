"""ampbench.plugin.checks: a run that would lose its results stops before the first test (an output path
that cannot be written, --benchmark-skip), and a results file that cannot be written at the end goes to a
fallback the summary names, the run failing. Cells on pytest-xdist's workers fail to collect, saying why,
while other tests run there."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from ampbench.plugin.checks import fallback_paths, workers_problem

pytest_plugins = ("pytester",)

# a benchmark that leaves a mark, so a test can tell whether anything ran
BENCH = """
from pathlib import Path

def test_cell(benchmark):
    Path("ran").touch()
    benchmark.extra_info["speedup"] = 2.0
    benchmark.pedantic(lambda: None, rounds=2)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(BENCH)
    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")  # a run of the suite: the checks act
    return pytester.runpytest_inprocess("-p", "ampbench.plugin.checks", "-p", "no:cacheprovider", *args)


def refused(pytester: pytest.Pytester, *args: str) -> str:
    """The one-line usage error these arguments get, after checking nothing ran."""
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "ran").exists(), "a test ran before the usage error"
    errors = [line for line in result.stderr.lines if line.startswith("ERROR: ")]
    assert len(errors) == 1, result.stderr.str()
    return errors[0]


@pytest.mark.parametrize("make, args, words", [
    (lambda p: None, ["--benchmark-json", "nosuchdir/x/out.json"], "does not exist"),
    (lambda p: (p / "out.json").mkdir(), ["--benchmark-json", "out.json"], "is a directory, not a file"),
    (lambda p: (p / "store").write_text(""), ["--benchmark-save", "run", "--benchmark-storage", "store"],
     "is not a directory"),
    (lambda p: (p / "ci").write_text(""), ["--junitxml", "ci/junit.xml"], "is not a directory"),
], ids=["json into a missing folder", "json at a folder", "save into a file", "junitxml under a file"])
def test_an_output_path_that_cannot_be_written_stops_the_run_before_any_test(pytester, make, args, words):
    make(pytester.path)
    error = refused(pytester, *args)
    assert error.startswith(f"ERROR: {args[0]} {args[1]}") and words in error and error.endswith("nothing was measured")


@pytest.mark.parametrize("args, words", [
    (["--benchmark-skip"], "--benchmark-skip: every ampbench cell is a benchmark"),
    (["--benchmark-disable", "--benchmark-json", "out.json"], "--benchmark-disable with --benchmark-json out.json"),
], ids=["skip", "disable"])
def test_options_that_lose_the_results_are_refused(pytester, args, words):
    assert refused(pytester, *args).startswith(f"ERROR: {words}")


CELL_AND_TEST = """
import pytest

@pytest.mark.parametrize("model_name, mode_name", [("mlp", "bf16")])
def test_cell(model_name, mode_name):
    pass
"""


def test_cells_on_xdist_workers_fail_to_collect_saying_why_and_other_tests_run_there(pytester):
    from types import SimpleNamespace

    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")
    items = pytester.getitems(pytester.makepyfile(CELL_AND_TEST))
    worker = SimpleNamespace(workerinput={"workerid": "gw0"}, option=SimpleNamespace())
    problem = workers_problem(worker, items)  # type: ignore[arg-type]
    assert problem is not None and problem.startswith(f"{items[0].nodeid}, an ampbench cell, cannot run on "
                                                      "pytest-xdist's workers (-n, --tx)")
    assert "run the cells without -n" in problem
    assert workers_problem(SimpleNamespace(option=SimpleNamespace()), items) is None  # no worker: a run of its own
    plain = pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    assert workers_problem(worker, pytester.getitems(plain)) is None  # the harness's own tests run under -n


@pytest.mark.skipif(importlib.util.find_spec("xdist") is None, reason="pytest-xdist is not installed")
def test_a_run_under_xdist_runs_its_tests_and_refuses_its_cells(pytester):
    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")
    pytester.makepyfile(test_cells=CELL_AND_TEST, test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--perf-device", "cpu",
                                           "--perf-history", "off")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_cells.py::test_cell[[]mlp-bf16[]], an ampbench cell, cannot run on "
                                 "pytest-xdist's workers*", "*1 passed, 1 error*"])


def test_a_json_that_cannot_be_written_at_the_end_goes_beside_it_and_the_summary_says_where(pytester):
    # the path turns into a folder while the tests run: the check at the start passed
    pytester.makeconftest("""
from pathlib import Path

def pytest_runtest_logfinish():
    Path("out.json").mkdir()
""")
    result = run(pytester, "--benchmark-json", "out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()  # no step may read the JSON as there
    fallback = pytester.path / f"out-{os.getpid()}.json"
    result.stdout.fnmatch_lines([f"ampbench: --benchmark-json out.json could not be written (*); "
                                 f"the results are in {fallback}; the run fails"])
    assert json.loads(fallback.read_text())["benchmarks"][0]["extra_info"] == {"speedup": 2.0}


def test_a_saved_run_that_cannot_be_written_falls_back_too(pytester):
    pytester.makeconftest("""
import shutil
from pathlib import Path

def pytest_runtest_logfinish():
    shutil.rmtree("store")
    Path("store").write_text("")
""")
    result = run(pytester, "--benchmark-save", "nightly", "--benchmark-storage", "store")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    fallback = pytester.path / f"ampbench-results-{os.getpid()}.json"
    result.stdout.fnmatch_lines([f"ampbench: the saved run nightly (--benchmark-storage *store) could not be written "
                                 f"(*); the results are in {fallback}; the run fails"])
    assert json.loads(fallback.read_text())["benchmarks"][0]["name"] == "test_cell"


def test_the_json_is_written_through_a_symlink_to_its_real_file(pytester):
    (pytester.path / "real").mkdir()
    (pytester.path / "real" / "out.json").write_text("{}")
    (pytester.path / "out.json").symlink_to(Path("real") / "out.json")
    result = run(pytester, "--benchmark-json", "out.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert (pytester.path / "out.json").is_symlink()
    assert json.loads((pytester.path / "real" / "out.json").read_text())["benchmarks"][0]["name"] == "test_cell"


def test_fallbacks_go_beside_the_file_then_to_the_working_and_the_temporary_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert fallback_paths(tmp_path / "out.json", pid=7)[:2] == [tmp_path / "out-7.json",
                                                                tmp_path / "ampbench-results-7.json"]
    assert fallback_paths(tmp_path / "gone" / "out.json", pid=7)[0] == tmp_path / "ampbench-results-7.json"
