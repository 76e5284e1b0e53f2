"""The run JSON (--benchmark-json) says this run or nothing (``ampbench.plugin.checks``): a JSON that cannot
be written fails the session, its results in a fallback the summary names and the earlier file at the
path removed; a session refused after it started writes none and leaves none from before; a path that
would replace one of the suite's own inputs is a usage error before anything runs. And every cell's
entry names its model and mode, so that pytest-benchmark's compare groups any run by mode."""

from __future__ import annotations

import csv
import errno
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ampbench.files import write as files_write
from ampbench.outputs import replaced_input
from ampbench.plugin import checks

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]
# what an earlier run left at the path: a run's JSON, as pytest-benchmark writes it
EARLIER = json.dumps({"machine_info": {"node": "earlier"}, "commit_info": {}, "benchmarks": []}, indent=4)

BENCH = """
def test_cell(benchmark):
    benchmark.extra_info["speedup"] = 2.0
    benchmark.pedantic(lambda: None, rounds=2)
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(BENCH)
    pytester.makeini("[pytest]\nrequired_plugins = ampbench\n")  # a run of the suite: the checks act
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--perf-history", "off", *args)


def full_disk_under(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Every atomic write into `folder` fails as a full disk fails it (ENOSPC), the others go through."""
    real = files_write._write_text_atomic

    def write(path: Path, text: str) -> None:
        if Path(os.path.abspath(path)).is_relative_to(folder):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr(files_write, "_write_text_atomic", write)


# -- a JSON that cannot be written -----------------------------------------------------------------

def test_a_full_disk_fails_the_run_names_the_fallback_and_removes_the_earlier_json(pytester, monkeypatch,
                                                                                   tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("other-disk")
    monkeypatch.setattr(tempfile, "tempdir", str(elsewhere))  # the temporary folder lies on a disk with room
    full_disk_under(monkeypatch, pytester.path)
    (pytester.path / "out.json").write_text(EARLIER)
    result = run(pytester, "--benchmark-json", "out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    fallback = elsewhere / f"ampbench-results-{os.getpid()}.json"
    result.stdout.fnmatch_lines([f"ampbench: --benchmark-json out.json could not be written (*the disk is full); the "
                                 f"results are in {fallback}; the earlier out.json was removed; the run fails"])
    assert not (pytester.path / "out.json").exists(), "the earlier run's JSON stayed where this run's was asked"
    assert json.loads(fallback.read_text())["benchmarks"][0]["extra_info"] == {"speedup": 2.0}


def test_results_no_fallback_takes_fail_the_run_saying_they_are_lost(pytester, monkeypatch):
    full_disk_under(monkeypatch, Path("/"))
    (pytester.path / "out.json").write_text(EARLIER)
    result = run(pytester, "--benchmark-json", "out.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["ampbench: --benchmark-json out.json could not be written (*), nor could any "
                                 "fallback (*): the results are lost; the earlier out.json was removed; the run fails"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "out.json").exists()


def test_an_earlier_json_that_cannot_be_removed_is_named_as_not_this_runs(tmp_path, monkeypatch):
    stale = tmp_path / "out.json"
    stale.write_text(EARLIER)

    def refuse(self, missing_ok=False):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    assert checks.drop_stale(stale) == f"; the earlier {stale} could not be removed (Permission denied) and is NOT " \
                                       "this run's"
    monkeypatch.undo()
    assert checks.drop_stale(tmp_path) == ""  # a folder is left alone
    assert checks.drop_stale(stale) == f"; the earlier {stale} was removed" and not stale.exists()


# -- a refused session -----------------------------------------------------------------------------

CELL = '''
import pytest

@pytest.mark.parametrize("model_name, mode_name", [("mlp", "bf16")])
def test_speed(model_name, mode_name):
    pass
'''


def test_a_refused_run_writes_no_json_and_removes_the_earlier_one(tmp_path):
    from ampbench.cli import main

    fake = tmp_path / "site" / "torchvision"  # a torchvision built against another torch: the run is refused
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(CELL))
    out = tmp_path / "out.json"
    out.write_text(EARLIER)
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                             "--perf-device", "cpu", "--perf-history", "off", "--benchmark-json", str(out),
                             str(tmp_path / "test_cells.py")],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    output = result.stdout + result.stderr
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, output
    assert f"ampbench: --benchmark-json {out} not written: the run was refused; the earlier {out} was removed" in output
    assert not out.exists()
    assert main(["report", str(out), "-o", str(tmp_path / "report")]) != 0  # no run to call all-skipped


# -- a JSON over the suite's own inputs ------------------------------------------------------------

def overwrites(root: Path, target: Path | str, history: str | None = None, baseline_dir: Path | None = None) -> str:
    config = SimpleNamespace(rootpath=root, option=SimpleNamespace(
        benchmark_json=Path(target), perf_history=history, perf_baseline_dir=baseline_dir))
    problems = checks.overwrite_problems(config)  # type: ignore[arg-type]
    return problems[0] if problems else ""


def test_a_json_over_the_history_a_baseline_or_a_test_module_is_refused(tmp_path):
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "nvidia-h100.json").write_text('{"gpu": "NVIDIA H100"}')
    store = tmp_path / "runs.sqlite"
    store.write_bytes(b"SQLite format 3\x00")
    (tmp_path / "store-link.json").symlink_to(store)
    assert "would overwrite the run history" in overwrites(tmp_path, store, history=str(store))
    assert "would overwrite the run history" in overwrites(tmp_path, store, history=f"sqlite:///{store}")
    assert "would overwrite the run history" in overwrites(tmp_path, tmp_path / "store-link.json",
                                                           history=str(store))
    assert "would overwrite the run history" in overwrites(tmp_path, f"{store}-wal", history=str(store))
    # the default store, not made yet on the CPU: its folder is ampbench's own
    assert "a file in ampbench's state folder" in overwrites(tmp_path, tmp_path / ".ampbench" / "history.sqlite")
    assert "a file in the baseline folder" in overwrites(tmp_path, tmp_path / "baselines" / "nvidia-h100.json")
    assert "a file in the baseline folder" in overwrites(tmp_path, tmp_path / "baselines" / "new.json")
    assert "(--perf-baseline-dir)" in overwrites(tmp_path, tmp_path / "mine" / "x.json", baseline_dir=tmp_path / "mine")
    module = ROOT / "perf" / "test_speed.py"
    assert overwrites(ROOT, module) == (f"--benchmark-json {module} would overwrite {module}, an existing file that is "
                                        "no benchmark JSON of an earlier run; give a path of its own")
    assert "no benchmark JSON" in overwrites(tmp_path, store)  # a database, whatever the history is


def test_an_earlier_runs_json_an_empty_file_or_a_new_path_is_written(tmp_path):
    (tmp_path / "earlier.json").write_text(EARLIER)
    (tmp_path / "empty.json").write_text("")  # as mktemp makes one
    for name in ("earlier.json", "empty.json", "new.json"):
        assert overwrites(tmp_path, tmp_path / name, history=str(tmp_path / "h.sqlite")) == "", name
    assert replaced_input(tmp_path / "new.json", [], []) is None


def test_an_empty_file_with_sqlites_own_beside_it_is_a_database_not_a_place_for_json(tmp_path):
    # another store whose writer has not checkpointed: its main file may be empty, its runs in the -wal
    for suffix in ("-wal", "-journal"):
        store = tmp_path / f"other{suffix}.sqlite"
        store.write_text("")
        Path(f"{store}{suffix}").write_bytes(b"runs not yet checkpointed")
        assert "no benchmark JSON" in overwrites(tmp_path, store, history=str(tmp_path / "h.sqlite")), suffix


def test_a_json_over_a_test_module_stops_the_run_before_any_test(pytester):
    module = pytester.makepyfile(BENCH)
    result = run(pytester, "--benchmark-json", module.name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: --benchmark-json {module.name} would overwrite {module.name}, an existing file that is no " \
           "benchmark JSON" in result.stderr.str()
    assert module.read_text().strip() == BENCH.strip()


# -- every cell's entry names its model and mode ---------------------------------------------------

DISTRIBUTED = '''
import pytest
from ampbench.results import DistributedRecord, RatioFigures, SpeedRecord, Verdict
from ampbench.suite.outcome import STEP_TIMES, record_step_times

WALL = RatioFigures(speedup=1.5, speedup_low=1.4, speedup_high=1.6, rounds=3, confidence=0.99)


@pytest.mark.parametrize("model_name, mode_name", [("mlp", "amp_bf16")])
@pytest.mark.benchmark(group="speed", **STEP_TIMES)
def test_speed(benchmark, record_result, model_name, mode_name):
    record_result(SpeedRecord(model=model_name, mode=mode_name, device="cpu", ratios={"wall": WALL},
                              verdict=Verdict.PASS))
    record_step_times(benchmark, [0.010, 0.011, 0.012])


@pytest.mark.parametrize("dist_cell", [("mlp", "amp_bf16", "bf16_hook"), ("mlp", "fp32", "fp32")],
                         ids=["mlp-amp_bf16-bf16_hook", "mlp-fp32-fp32"])
@pytest.mark.benchmark(group="distributed", **STEP_TIMES)
def test_ddp_speed(benchmark, record_result, dist_cell):
    model, mode, comm = dist_cell
    record_result(DistributedRecord(model=model, mode=mode, comm=comm, device="cpu", ratios={"wall": WALL},
                                    verdict=Verdict.PASS))
    record_step_times(benchmark, [0.020, 0.021, 0.022])
'''


def test_distributed_cells_name_their_mode_so_compare_groups_by_it(tmp_path):
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(DISTRIBUTED))
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                             "--perf-device", "cpu", "--perf-history", "off", "--benchmark-json", str(out),
                             "--benchmark-group-by", "param:mode_name", str(tmp_path / "test_cells.py")],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr  # the run's own table, grouped by mode
    entries = json.loads(out.read_text())["benchmarks"]
    assert len(entries) == 3
    for entry in entries:
        assert {"model_name", "mode_name"} <= set(entry["params"]), entry["name"]
    ddp = next(e for e in entries if e["name"] == "test_ddp_speed[mlp-fp32-fp32]")
    assert ddp["params"] == {"dist_cell": ["mlp", "fp32", "fp32"], "model_name": "mlp", "mode_name": "fp32"}
    table = tmp_path / "compare.csv"
    compare = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(out), "--group-by",
                              "param:mode_name", "--csv", str(table)], capture_output=True, text=True, timeout=60)
    assert compare.returncode == 0, compare.stdout + compare.stderr
    rows = list(csv.DictReader(table.open()))
    assert sorted(r["param:mode_name"] for r in rows) == ["amp_bf16", "amp_bf16", "fp32"]
