"""``ampbench bisect`` on the CPU, in real git repositories made here: the commit a slowdown was planted
in is named, with the steps and their pairs recorded; each step is paired with the good side's own
worktree, in balanced order, and that worktree is removed at the end; the suite's own cell is measured at
each commit (the slowdown plugin planted in a commit's conftest); package versions are bisected, each in
its own environment, from wheels built here; an interrupt (Ctrl-C, SIGTERM) leaves the repository as it
was, both worktrees removed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ampbench.bisect.cells import BisectCell, named_cell, pytest_args
from ampbench.bisect.judge import BAD, GOOD, SKIP, Level, answer, judge_cell, level_of
from ampbench.bisect.measure import StepFigure
from ampbench.cli import main
from ampbench.verdict import Verdict
from tests.bisect_repos import FROM_FILE, MEASURE, STEP, _git, make_repo, repo_state

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture
def delay_repo(tmp_path):
    files = {"measure.py": MEASURE.format(import_delay=FROM_FILE), "delay.txt": "0\n"}
    shas = make_repo(tmp_path / "repo", 7, 4, files, {"delay.txt": "0.004\n"})
    return tmp_path / "repo", shas


def test_cells_are_named_by_test_id_or_model_and_mode():
    assert named_cell("test_speed[gpt-amp_fp16]") == BisectCell("gpt", "amp_fp16")
    assert named_cell("gpt:amp_fp16") == BisectCell("gpt", "amp_fp16")
    assert named_cell("test_speed[gpt-amp_bf16-compiled]") == BisectCell("gpt", "amp_bf16", compiled=True)
    assert named_cell("gpt:amp_bf16:compiled").test_id == "test_speed[gpt-amp_bf16-compiled]"
    with pytest.raises(ValueError, match="unknown precision mode 'fp9'"):
        named_cell("gpt:fp9")
    with pytest.raises(ValueError, match="neither a speed cell's test id"):
        named_cell("test_memory[gpt-amp_fp16]")
    args = pytest_args([BisectCell("gpt", "amp_fp16"), BisectCell("mlp", "bf16")], "perf/test_speed.py")
    assert args[:2] == ["perf/test_speed.py::test_speed[gpt-amp_fp16]", "perf/test_speed.py::test_speed[mlp-bf16]"]
    assert args[2:] == ["--perf-models", "gpt,mlp", "--perf-precisions", "amp_fp16,bf16", "--perf-compile", "off"]


def test_a_step_held_to_the_historys_level_is_bad_below_its_line_good_above_it_and_skipped_between():
    level = level_of("c", [StepFigure(2.0, 1.98, 2.02), StepFigure(2.02, 2.0, 2.04)], 0.01, "measured")
    assert level.tolerance == pytest.approx(0.01)  # the good runs' spread (1%) is no wider than the floor
    assert judge_cell(StepFigure(1.9, 1.88, 1.92), level) is Verdict.REGRESSION
    assert judge_cell(StepFigure(2.0, 1.99, 2.01), level) is Verdict.PASS
    assert judge_cell(StepFigure(1.99, 1.96, 2.02), level) is Verdict.INCONCLUSIVE
    assert answer({"a": Verdict.PASS, "b": Verdict.REGRESSION}) == BAD
    assert answer({"a": Verdict.PASS, "b": Verdict.IMPROVED}) == GOOD
    assert answer({"a": Verdict.PASS, "b": Verdict.INCONCLUSIVE}) == SKIP
    wide = level_of("c", [StepFigure(2.0, 1.9, 2.1), StepFigure(2.2, 2.1, 2.3)], 0.01, "measured")
    assert wide.tolerance == pytest.approx(0.2 / wide.speedup)  # the good side's own spread widens its line
    assert Level.from_json(wide.to_json()) == wide


def test_the_planted_commit_is_named_and_every_step_recorded(delay_repo, tmp_path, capsys):
    repo, shas = delay_repo
    before = repo_state(repo)
    record_path = tmp_path / "bisect.json"
    status = main(["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--step-command", STEP,
                   "--tolerance", "0.3", "--record", str(record_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"first bad commit: {shas[4]} 'change 4 (the slow one)'" in out
    assert "ampbench bisect: step 1:" in out and "pair 1 of at most 6" in out
    assert "kernels: kernels per step +4.000 ms against the good side; new: planted_delay 4.000 ms" in out
    record = json.loads(record_path.read_text())
    assert record["first_bad"] == {"commit": shas[4], "subject": "change 4 (the slow one)"}
    steps = [s for s in record["steps"] if s["kind"] == "step"]
    assert 2 <= len(steps) <= 3, "six commits after the good side take at most three steps"
    assert record["steps"][0]["kind"] == "bad side" and record["steps"][0]["answer"] == "bad"
    for step in steps:
        cell = step["cells"]["command"]
        bad = shas.index(step["commit"]) >= 4
        assert step["answer"] == ("bad" if bad else "good")
        assert step["verdict"] in ("regression", "pass") and step["seconds"] > 0
        assert cell["ratio_low"] <= cell["ratio"] <= cell["ratio_high"] and cell["pairs"] == len(step["pairs"])
        assert cell["pairs"] >= (2 if bad else 1), "a regression needs two pairs, a pass one"
        assert (cell["drop"] < -0.3) == bad
    assert record["max_pairs"] == 6 and record["tolerance"] == 0.3 and "levels" not in record
    assert repo_state(repo) == before


def test_each_step_is_paired_with_the_good_tree_in_balanced_order(delay_repo, tmp_path, monkeypatch, capsys):
    repo, shas = delay_repo
    before = repo_state(repo)
    sides = tmp_path / "sides.log"
    monkeypatch.setenv("SIDES_LOG", str(sides))
    status = main(["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--step-command", STEP,
                   "--tolerance", "0.3", "--record", str(tmp_path / "b.json")])
    assert status == 0, capsys.readouterr().out
    record = json.loads((tmp_path / "b.json").read_text())
    measured = [line.rsplit(" ", 2) for line in sides.read_text().splitlines()]  # [tree, "change", i]
    good_tree = measured[0][0] if measured[0][2] == "0" else measured[1][0]
    trees = {tree for tree, _, _ in measured}
    assert len(trees) == 2 and Path(good_tree).name == "tree", "the good side has a worktree of its own"
    runs = iter(measured)
    for step in record["steps"]:
        orders = [p["order"] for p in step["pairs"]]
        assert all(orders[i:i + 2] in (["AB", "BA"], ["BA", "AB"]) for i in range(0, len(orders) - 1, 2))
        for pair in step["pairs"]:  # each pair: the good tree at the good commit and this commit's tree
            for letter in pair["order"]:
                tree, _, change = next(runs)
                if letter == "A":
                    assert (tree, change) == (good_tree, "0")
                else:
                    assert tree != good_tree and shas[int(change)] == step["commit"]
            assert set(pair["good"]) == set(pair["head"]) == set(pair["verdicts"]) == {"command"}
    assert next(runs, None) is None, "every measurement is one side of a recorded pair"
    assert not Path(good_tree).exists() and repo_state(repo) == before, "the good tree is removed at the end"


def test_a_bad_side_that_does_not_regress_names_no_commit(delay_repo, tmp_path, capsys):
    repo, shas = delay_repo
    status = main(["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[3], "--step-command", STEP,
                   "--tolerance", "0.3", "--record", str(tmp_path / "b.json")])
    assert status == 1
    assert f"the bad side {shas[3][:12]} does not regress" in capsys.readouterr().out


def test_revisions_that_make_no_bisect_are_refused(delay_repo, capsys):
    repo, shas = delay_repo
    assert main(["bisect", "--repo", str(repo), "--good", shas[3], "--bad", shas[1], "--step-command", STEP]) == 2
    assert "is no ancestor of --bad" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(repo), "--good", "nosuchrev", "--step-command", STEP]) == 2
    assert "revision 'nosuchrev' names no commit" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(repo), "--good", shas[0]]) == 2
    assert "name one or more CELLs" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(repo), "--good", shas[0], "--step-command", STEP, "--history", "h.db"]) == 2
    assert "--history holds the suite's cells" in capsys.readouterr().err
    assert main(["bisect", "gpt:fp9", "--repo", str(repo), "--good", shas[0]]) == 2
    assert "unknown precision mode 'fp9'" in capsys.readouterr().err


def test_steps_without_a_figure_are_skipped_and_no_commit_is_named(tmp_path, capsys):
    repo = tmp_path / "repo"
    files = {"measure.py": MEASURE.format(import_delay=FROM_FILE), "delay.txt": "0\n"}
    shas = make_repo(repo, 4, 1, files, {"broken": "every later commit's step leaves no figure\n"})
    record_path = tmp_path / "b.json"
    status = main(["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--no-check-bad",
                   "--step-command", STEP, "--tolerance", "0.3", "--record", str(record_path)])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "no first bad commit named: only skipped commits are left" in out
    assert "its last line is no figure" in out
    record = json.loads(record_path.read_text())
    assert record["first_bad"] is None
    assert {s["answer"] for s in record["steps"]} == {"skip"}
    # a pair without the commit's figure adds nothing: the second such pair gives the cell up
    assert all(len(s["pairs"]) == 2 and s["verdict"] == "error" for s in record["steps"])


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_leaves_the_repository_as_it_was(tmp_path, how):
    repo = tmp_path / "repo"
    files = {"measure.py": MEASURE.format(import_delay=FROM_FILE), "delay.txt": "0\n"}
    make_repo(repo, 5, 1, files, {"hang": "every later commit's step hangs\n"})
    _git(repo, "checkout", "-q", "-b", "work")
    (repo / "note.txt").write_text("an edit of the user's, not committed\n")
    before = repo_state(repo)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "ampbench", "bisect", "--repo", str(repo), "--good", "main~4",
                             "--bad", "main", "--no-check-bad", "--step-command", STEP, "--record",
                             str(tmp_path / "b.json")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = []
    for line in proc.stdout:  # into git bisect run: its first step hangs
        seen.append(line)
        if "each step paired against the good side" in line:
            break
    time.sleep(3)
    assert proc.poll() is None, "".join(seen)
    assert len(_git(repo, "worktree", "list").splitlines()) == 3, "the bisect's worktree and the good side's"
    proc.send_signal(how)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + out
    assert "interrupted; the worktrees are removed" in out
    assert repo_state(repo) == before
    assert (repo / "note.txt").read_text() == "an edit of the user's, not committed\n"
    assert list(scratch.iterdir()) == [], "both temporary worktrees must be removed"
    record = json.loads((tmp_path / "b.json").read_text())
    assert record["interrupted"] is True and record["first_bad"] is None and record["steps"] == []


def _suite_env(monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


PROJECT = '[tool.pytest.ini_options]\nrequired_plugins = ["ampbench"]\n'
SUITE = "from ampbench.suite import *  # noqa: F403\n"
# the planted slowdown: the slowdown plugin, loaded from the project's conftest, slows mlp's bf16 steps
PLANTED = ('import os\n\nos.environ["AMPBENCH_SLOWDOWN"] = "mlp:bf16:20"\n'
           'pytest_plugins = ("ampbench.slowdown",)\n')


def test_the_suites_cell_is_measured_at_each_commit_and_the_planted_one_named(tmp_path, monkeypatch, capsys):
    _suite_env(monkeypatch)
    repo = tmp_path / "project"
    shas = make_repo(repo, 6, 3, {"pyproject.toml": PROJECT, "perf/test_ampbench.py": SUITE, "conftest.py": "\n"},
                     {"conftest.py": PLANTED})
    record_path = tmp_path / "bisect.json"
    # the CPU smoke pass states wide intervals (a good side's run may say [0.2, 8]x): a line at half the good
    # side's speedup lies far enough above the 20-fold stall's ratio for its pairs to fail it within six
    status = main(["bisect", "test_speed[mlp-bf16]", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1],
                   "--test-file", "perf/test_ampbench.py", "--pytest-args", "--perf-device cpu",
                   "--tolerance", "0.5", "--record", str(record_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"first bad commit: {shas[3]} 'change 3 (the slow one)'" in out, out
    assert "test_speed[mlp-bf16]:" in out and "against the good side's" in out
    record = json.loads(record_path.read_text())
    first = next(s for s in reversed(record["steps"]) if s["commit"] == shas[3])
    cell = first["cells"]["test_speed[mlp-bf16]"]
    assert cell["verdict"] == "regression" and cell["drop"] < -0.85 and cell["pairs"] >= 2


WHEEL = '[project]\nname = "tinypkg"\nversion = "{version}"\n[tool.setuptools]\npackages = ["tinypkg"]\n'
PROJECT_PKG = '[project]\nname = "bisected"\nversion = "0"\n[tool.setuptools]\npy-modules = ["measure"]\n'


def test_package_versions_are_bisected_each_in_its_own_environment(tmp_path, capsys):
    from importlib.metadata import version

    if tuple(map(int, re.match(r"(\d+)\.(\d+)", version("pip")).groups())) < (22, 3):
        pytest.skip(f"pip {version('pip')} installs into another environment only from 22.3 (--python)")
    wheels = tmp_path / "wheels"
    for ver, delay in (("1.0", 0), ("1.1", 0), ("1.2", 0.004), ("1.3", 0.004), ("1.4", 0.004)):
        src = tmp_path / f"src-{ver}"
        (src / "tinypkg").mkdir(parents=True)
        (src / "pyproject.toml").write_text(WHEEL.format(version=ver))
        (src / "tinypkg" / "__init__.py").write_text(f"DELAY = {delay}\n")
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                                "-w", str(wheels), str(src)], capture_output=True, text=True)
        if built.returncode != 0:
            pytest.skip(f"no wheel could be built here without the network: {built.stderr.strip()[-300:]}")
    repo = tmp_path / "repo"
    make_repo(repo, 1, 0, {"measure.py": MEASURE.format(import_delay="from tinypkg import DELAY"),
                           "pyproject.toml": PROJECT_PKG}, {})
    record_path = tmp_path / "bisect.json"
    status = main(["bisect", "--repo", str(repo), "--package", "tinypkg", "--versions", "1.0,1.1,1.2,1.3,1.4",
                   "--pip-args", f"--no-index --find-links {wheels}", "--step-command", "python measure.py",
                   "--tolerance", "0.3", "--record", str(record_path)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "first bad version: tinypkg==1.2" in out
    record = json.loads(record_path.read_text())
    assert record["first_bad"]["commit"] == "tinypkg==1.2"
    assert {s["commit"]: s["answer"] for s in record["steps"]} == {
        "tinypkg==1.4": "bad", "tinypkg==1.2": "bad", "tinypkg==1.1": "good"}


def test_the_level_is_taken_from_the_history_reading_only(tmp_path):
    from ampbench.bisect.levels import LevelError, history_levels
    from ampbench.history.store import open_history
    from tests.history_runs import H100, speed_record, speed_run

    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    history = open_history(url)
    kernels = [{"name": "gemm", "ms": 1.5}]
    for i, value in enumerate((2.0, 2.02, 1.98, 2.0)):
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_fp16", value, kernels=kernels)], at=i))
    history.release()
    stored = (tmp_path / "history.sqlite").read_bytes()
    levels = history_levels(url, None, ["test_speed[gpt-amp_fp16]"], 0.005)
    level = levels["test_speed[gpt-amp_fp16]"]
    assert level.speedup == pytest.approx(2.0, rel=1e-3)
    assert level.tolerance == pytest.approx(0.02, rel=1e-2)  # the runs' own spread, wider than the floor
    assert level.values == (2.0, 2.02, 1.98, 2.0) and level.kernels == kernels
    assert level.source == f"history: 4 runs on {H100}"
    assert (tmp_path / "history.sqlite").read_bytes() == stored
    with pytest.raises(LevelError, match=r"no counted run of test_speed\[mlp-bf16\] device_speedup"):
        history_levels(url, H100, ["test_speed[mlp-bf16]"], 0.005)


def test_the_suite_runs_the_named_cells_with_the_bisects_options(tmp_path):
    from ampbench.bisect.measure import SuiteMeasurer

    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path / "argv"}\necho "PYTHONPATH=$PYTHONPATH"\nexit 4\n')
    fake.chmod(0o755)
    measurer = SuiteMeasurer(["gpt:amp_fp16"], str(fake), pytest_args=["-p", "ampbench.slowdown"],
                             baseline_dir=str(tmp_path / "baselines"), tolerance=0.01, log_dir=str(tmp_path / "logs"))
    measurement = measurer(tmp_path, "good2-abc")
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[:6] == ["-m", "pytest", "-q", "-p", "no:cacheprovider", "perf/test_speed.py::test_speed[gpt-amp_fp16]"]
    joined = " ".join(argv)
    for part in ("--perf-models gpt --perf-precisions amp_fp16 --perf-compile off", "--perf-gate device",
                 "--perf-history off", f"--benchmark-json {tmp_path / 'logs' / 'good2-abc.json'}",
                 "-p ampbench.slowdown", "--perf-tolerance 0.01",
                 f"--perf-baseline-dir {tmp_path / 'baselines'}"):
        assert part in joined
    assert "--perf-update-baselines" not in joined
    assert measurement.figures == {}
    assert measurement.problem.startswith("pytest exited with status 4 and wrote no run")
    assert f"PYTHONPATH={tmp_path}" in measurement.problem  # the tree's own code first


def test_a_step_held_to_the_historys_level_is_measured_once_where_decided_and_twice_where_not(tmp_path):
    from ampbench.bisect.step import run_step

    (tmp_path / "figure.py").write_text('import json, sys\nv = float(sys.argv[1])\n'
                                        'print(json.dumps({"speedup": v, "low": v * 0.99, "high": v * 1.01}))\n')
    level = level_of("command", [StepFigure(2.0, 1.99, 2.01)], 0.05, "history: 1 run on a card")

    def held(value: float) -> tuple[int, dict]:
        config = {"measurer": {"kind": "command", "command": f"{sys.executable} figure.py {value}",
                               "log_dir": str(tmp_path)},
                  "levels": {"command": level.to_json()}, "steps_file": str(tmp_path / "steps.jsonl")}
        return run_step(config, tmp_path, "a" * 40, "s")

    code, record = held(2.0)
    assert code == GOOD and len(record["attempts"]) == 1 and "pairs" not in record
    assert record["cells"]["command"]["good_speedup"] == pytest.approx(2.0)
    code, record = held(1.0)
    assert code == BAD and record["cells"]["command"]["drop"] == pytest.approx(-0.5)
    code, record = held(1.9)  # its interval straddles the line at 1.9
    assert code == SKIP and len(record["attempts"]) == 2
