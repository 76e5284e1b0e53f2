"""``ampbench bisect`` where a step or the repository misbehaves: a step that hangs is ended at the step
timeout with its whole process group and named as a failed step; a step command that exits non-zero
is a failed step whatever it printed; a worktree left registered by a bisect killed outright is removed
by the next bisect; and git missing from PATH, or a folder outside any repository, is said plainly."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ampbench.bisect.judge import SKIP
from ampbench.bisect.measure import CommandMeasurer, Measurement, StepFigure
from ampbench.bisect.pairs import GoodSide, pair_rule, paired_step
from ampbench.bisect.step import run_step
from ampbench.cli import main
from ampbench.cli.args import build_parser
from ampbench.worktree import PREFIX, RUNNING_LOCK, TREE, Worktree
from tests.test_bisect import ROOT, _git, make_repo

# a step that prints a steady figure, or, where the commit holds "hang", writes its pid to argv[1] and hangs
HANGS = '''import json, os, pathlib, sys, time
if pathlib.Path("hang").exists():
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(120)
print(json.dumps({"speedup": 1.0, "low": 0.99, "high": 1.01}))
'''


def _alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie left for a parent that does not reap it has ended."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def hang_repo(tmp_path):
    """Three commits: the first measures, the second and third hang."""
    shas = make_repo(tmp_path / "repo", 3, 1, {"measure.py": HANGS}, {"hang": "this commit's step hangs\n"})
    return tmp_path / "repo", shas


def test_a_measurement_past_the_timeout_is_ended_with_its_process_group(tmp_path):
    measurer = CommandMeasurer("sleep 60 & echo $! > child.pid; wait", log_dir=str(tmp_path / "logs"), timeout=1,
                               grace=1)
    t0 = time.monotonic()
    measurement = measurer(tmp_path, "step1")
    assert time.monotonic() - t0 < 10, "the step was not ended at its timeout"
    assert measurement.timed_out and measurement.figures == {}
    assert measurement.problem.startswith("step command timed out after 1 s (--step-timeout); its process group "
                                          "was ended")
    # the shell's own child, in the shell's group, went with it
    assert _gone(int((tmp_path / "child.pid").read_text()))


def test_a_hung_step_is_a_failed_step_naming_the_timeout(hang_repo, tmp_path, capsys):
    repo, shas = hang_repo
    pid_file = tmp_path / "step.pid"
    step = f"{sys.executable} measure.py {pid_file}"
    base = ["bisect", "--repo", str(repo), "--good", shas[0], "--bad", shas[-1], "--step-command", step,
            "--tolerance", "0.3", "--step-timeout", "4"]
    # the bad side hangs: the bisect stops, saying why, not that it "does not regress"
    t0 = time.monotonic()
    assert main([*base, "--record", str(tmp_path / "bad.json")]) == 1
    out = capsys.readouterr().out
    assert (f"no first bad commit named: the bad side {shas[-1][:12]} could not be judged: step command timed "
            "out after 4 s (--step-timeout)") in out, out
    bad_side = json.loads((tmp_path / "bad.json").read_text())["steps"][0]
    assert (bad_side["kind"], bad_side["verdict"], bad_side["answer"]) == ("bad side", "error", "skip")
    assert len(bad_side["pairs"]) == 1, "a timed-out measurement is not taken again"
    assert _gone(int(pid_file.read_text()))
    # under git bisect run: the step's measurement is ended, and its commit skipped, named as timed out
    pid_file.unlink()
    status = main([*base, "--no-check-bad", "--record", str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "only skipped commits are left" in out
    assert time.monotonic() - t0 < 60, "each hung step must end at the 4 s timeout"
    record = json.loads((tmp_path / "b.json").read_text())
    (hung,) = record["steps"]
    assert (hung["commit"], hung["verdict"], hung["answer"]) == (shas[1], "error", "skip")
    assert len(hung["pairs"]) == 1
    assert hung["problem"].startswith("step command timed out after 4 s (--step-timeout); its process group was "
                                      "ended")
    assert _gone(int(pid_file.read_text()))


def test_an_interrupted_bisect_ends_the_measurement_its_step_started(hang_repo, tmp_path):
    repo, shas = hang_repo
    pid_file = tmp_path / "step.pid"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "ampbench", "bisect", "--repo", str(repo), "--good", shas[0],
                             "--bad", shas[-1], "--no-check-bad", "--step-timeout", "0", "--step-command",
                             f"{sys.executable} measure.py {pid_file}", "--record", str(tmp_path / "b.json")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert _gone(pid), "the hung measurement outlived the bisect"


def test_a_good_side_that_times_out_ends_the_step_skipped():
    calls = []

    def measurer(tree, label):
        calls.append((str(tree), label))
        if str(tree) == "good":
            return Measurement({}, 3.0, "step command timed out after 3 s (--step-timeout)", timed_out=True)
        return Measurement({"command": StepFigure(1.0, 0.99, 1.01)}, 1.0)

    found = paired_step(measurer, GoodSide("good", None, "abc"), Path("head"), "step1",  # type: ignore[arg-type]
                        pair_rule(0.01), 6, lambda line: None)
    assert found.code == SKIP and len(found.pairs) == 1 and len(calls) <= 2, "no pair after a timeout"
    assert found.problem.startswith("the good side abc: step command timed out after 3 s")
    assert found.cells["command"].problem.startswith("pair 1 left no figure: the good side: step command timed out")


def test_a_step_stops_at_its_first_regression_and_takes_pairs_only_while_undecided():
    orders = []

    def steady(head: float):
        def measurer(tree, label):
            orders.append(str(tree))
            speedup = head if str(tree) == "head" else 1.0
            return Measurement({"command": StepFigure(speedup, speedup * 0.999, speedup * 1.001)}, 0.1)
        return measurer

    bad = paired_step(steady(0.5), GoodSide("good", None, "abc"), Path("head"), "s", pair_rule(0.01), 6,
                      lambda line: None)  # type: ignore[arg-type]
    assert bad.code == 1 and len(bad.pairs) == 2, "a regression needs two pairs, and no more"
    assert sorted(orders) == ["good", "good", "head", "head"]
    same = paired_step(steady(1.0), GoodSide("good", None, "abc"), Path("head"), "s", pair_rule(0.01), 6,
                       lambda line: None)  # type: ignore[arg-type]
    assert same.code == 0 and len(same.pairs) == 1, "a quiet unchanged cell passes at its first pair"


def test_step_timeout_takes_seconds_or_zero_for_none():
    parse = build_parser().parse_args
    assert parse(["bisect", "--step-timeout", "2.5"]).step_timeout == 2.5
    assert parse(["bisect", "--step-timeout", "0"]).step_timeout is None
    assert parse(["bisect"]).step_timeout == 3600
    for bad in ("-1", "soon", "inf"):
        with pytest.raises(SystemExit):
            parse(["bisect", "--step-timeout", bad])


def test_a_step_command_that_fails_is_a_failed_step_whatever_it_printed(tmp_path):
    (tmp_path / "exits.py").write_text('import json, sys\n'
                                       'print(json.dumps({"speedup": 1.0, "low": 0.99, "high": 1.01}))\n'
                                       'sys.exit(int(sys.argv[1]))\n')
    failing = f"{sys.executable} exits.py 3"
    failed = CommandMeasurer(failing, log_dir=str(tmp_path))(tmp_path, "s1")
    assert failed.figures == {}
    assert failed.problem.startswith("step command exited with status 3, a failed step, though it printed the "
                                     "figure 1.000x [0.990, 1.010]")
    ok = CommandMeasurer(f"{sys.executable} exits.py 0", log_dir=str(tmp_path))(tmp_path, "s2")
    assert set(ok.figures) == {"command"} and ok.problem is None
    # judged as a step: no figure to pair with the good side's, so git bisect skips the commit
    config = {"measurer": {"kind": "command", "command": failing, "log_dir": str(tmp_path)},
              "good": {"tree": str(tmp_path), "python": None, "label": "g"}, "tolerance": 0.01, "max_pairs": 6,
              "steps_file": str(tmp_path / "steps.jsonl")}
    answer, record = run_step(config, tmp_path, "a" * 40, "s")
    assert answer == SKIP and record["verdict"] == "error" and len(record["pairs"]) == 2
    assert "exited with status 3" in record["problem"]


def _leftover(repo: Path, sha: str, parent: Path) -> Path:
    """A worktree registered as a bisect registers its own, in a folder named as a bisect names it."""
    tree = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent)) / TREE
    _git(repo, "worktree", "add", "--detach", str(tree), sha)
    return tree


def test_worktrees_left_by_killed_bisects_are_removed_by_the_next(tmp_path):
    repo = tmp_path / "repo"
    shas = make_repo(repo, 3, 1, {"a.txt": "a\n"}, {"a.txt": "b\n"})
    left = tmp_path / "left"
    left.mkdir()
    # killed mid-bisect: its folder and its lock file are there, the lock held by no one
    killed = _leftover(repo, shas[0], left)
    _git(killed, "bisect", "start", shas[-1], shas[0])
    (killed.parent / RUNNING_LOCK).touch()
    # killed, and its temporary folder cleaned away since: only its registration is left
    emptied = _leftover(repo, shas[0], left)
    shutil.rmtree(emptied.parent)
    # a bisect still running (its lock held) keeps its worktree
    running = _leftover(repo, shas[0], left)
    lock = os.open(running.parent / RUNNING_LOCK, os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)
    # a worktree of the user's on a branch is no bisect's, whatever its folder's name
    user = Path(tempfile.mkdtemp(prefix=PREFIX, dir=left)) / TREE
    _git(repo, "worktree", "add", "-q", "-b", "mine", str(user), shas[0])
    try:
        with Worktree(repo, shas[0]) as wt:
            assert {p.resolve() for p in wt.removed} == {killed.resolve(), emptied.resolve()}
            _git(wt.path, "bisect", "start", shas[-1], shas[0])  # the new bisect works
        listed = {Path(line[len("worktree "):]).resolve()
                  for line in _git(repo, "worktree", "list", "--porcelain").splitlines()
                  if line.startswith("worktree ")}
        assert listed == {repo.resolve(), running.resolve(), user.resolve()}
        assert not killed.parent.exists()
    finally:
        os.close(lock)


def test_git_missing_or_no_repository_is_said_plainly(tmp_path, monkeypatch, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # wherever tmp_path lies, no repository above
    commit = ["bisect", "--repo", str(plain), "--good", "HEAD~1", "--step-command", "true"]
    package = ["bisect", "--repo", str(plain), "--package", "p", "--versions", "1,2", "--step-command", "true"]
    for args in (commit, package):
        assert main(args) == 2
        assert f"ampbench bisect: error: {plain.resolve()} is not inside a git repository" in capsys.readouterr().err
    assert main(["bisect", "--repo", str(tmp_path / "nowhere"), "--good", "x", "--step-command", "true"]) == 2
    assert f"--repo {tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    no_git = tmp_path / "bin"
    no_git.mkdir()
    monkeypatch.setenv("PATH", str(no_git))
    for args in (commit, package):
        assert main(args) == 2
        assert "ampbench bisect: error: git is not on PATH" in capsys.readouterr().err
