"""``ampbench ab`` on the CPU, in a real two-commit git repository of a project that runs the suite: an A/A
run fails no cell, a gross slowdown planted in the head is a regression of its cell (its speedup and its
step time), the pairs run in balanced order, and an interrupt leaves the checkout as it was."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ampbench.ab.cells import node_ids, selection
from ampbench.ab.runner import balanced_orders
from ampbench.cli import main
from tests.test_bisect import PLANTED, PROJECT, ROOT, SUITE, _git, make_repo, repo_state

CELL = "test_speed[mlp-bf16]"
CPU = ["--tests", "perf/test_ampbench.py", "--pytest-args", "--perf-device cpu", "--seed", "1"]


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project whose second commit plants a slowdown of mlp's bf16 steps (the slowdown plugin in its
    conftest): the shas, oldest first."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    repo = tmp_path / "project"
    shas = make_repo(repo, 2, 1, {"pyproject.toml": PROJECT, "perf/test_ampbench.py": SUITE, "conftest.py": "\n"},
                     {"conftest.py": PLANTED})
    return repo, shas


def test_pairs_run_in_balanced_order():
    for seed in range(20):
        orders = balanced_orders(8, random.Random(seed))
        assert len(orders) == 8
        for block in range(0, 8, 2):
            assert orders[block:block + 2] in (["AB", "BA"], ["BA", "AB"])
    assert balanced_orders(3, random.Random(0))[:2] in (["AB", "BA"], ["BA", "AB"])


def test_cells_are_named_by_node_id_test_id_or_model_and_mode():
    assert node_ids("gpt:amp_fp16")[0] == ["perf/test_speed.py::test_speed[gpt-amp_fp16]",
                                          "perf/test_memory.py::test_memory[gpt-amp_fp16]"]
    assert node_ids("gpt:fp32")[0] == ["perf/test_memory.py::test_memory[gpt-fp32]"]  # fp32 has no speed cell
    assert node_ids("test_memory[gpt-bf16]", ["perf/test_ampbench.py"])[0] == [
        "perf/test_ampbench.py::test_memory[gpt-bf16]"]
    assert selection([]) == ["perf/test_speed.py", "perf/test_memory.py"]
    assert selection(["mlp:bf16", "gpt:bf16"])[-4:] == ["--perf-models", "mlp,gpt", "--perf-precisions", "bf16"]
    for bad, said in (("gpt:nonsense", "unknown precision mode"), ("gpt", "neither a node id")):
        with pytest.raises(ValueError, match=said):
            node_ids(bad)


def test_an_unknown_base_is_a_usage_error_and_leaves_no_worktree(project, capsys):
    repo, _ = project
    before = repo_state(repo)
    assert main(["ab", CELL, "--repo", str(repo), "--base", "no-such-branch", *CPU]) == 2
    assert "names no commit" in capsys.readouterr().err
    assert repo_state(repo) == before


def _figures(path: Path) -> dict:
    document = json.loads(path.read_text())
    return {b["name"]: b["extra_info"] for b in document["benchmarks"]}


def test_an_a_a_run_fails_no_cell(project, tmp_path, capsys):
    repo, shas = project
    _git(repo, "checkout", "-q", shas[0])
    out = tmp_path / "aa.json"
    status = main(["ab", CELL, "--repo", str(repo), "--base", shas[0], "--max-pairs", "2", "-o", str(out), *CPU])
    printed = capsys.readouterr()
    assert status == 0, printed.out + printed.err
    cell = _figures(out)[CELL]
    assert cell["kind"] == "paired" and cell["verdict"] not in ("regression", "error")
    assert set(cell["figures"]) == {"speedup", "step_time"}
    assert "pair 1 of at most 2" in printed.err
    assert CELL in printed.out


def test_a_gross_slowdown_in_the_head_is_a_regression_of_its_cell(project, tmp_path, capsys):
    repo, shas = project
    out = tmp_path / "ab.json"
    status = main(["ab", CELL, "--repo", str(repo), "--base", shas[0], "--max-pairs", "3", "-o", str(out), *CPU])
    printed = capsys.readouterr()
    assert status == 1, printed.out + printed.err
    cell = _figures(out)[CELL]
    assert cell["verdict"] == "regression", cell["message"]
    assert cell["figures"]["speedup"]["verdict"] == "regression"
    assert cell["figures"]["step_time"]["verdict"] == "regression"
    assert cell["figures"]["step_time"]["change"] > 1.0  # the planted work is many times the step
    assert cell["base"].startswith(shas[0][:12]) and cell["head"].startswith("working tree")
    assert set(cell["order"]) <= {"A", "B"} and len(cell["order"]) == 2 * cell["pairs"]


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupt_leaves_the_checkout_as_it_was(project, tmp_path, how):
    repo, shas = project
    _git(repo, "checkout", "-q", "-b", "work")
    (repo / "conftest.py").write_text("import time\ntime.sleep(120)\n")  # an uncommitted edit: its runs hang
    before = repo_state(repo)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "ampbench", "ab", CELL, "--repo", str(repo), "--base", shas[0],
                             *CPU, "-o", str(tmp_path / "ab.json")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("ampbench ab: head:"):
            break
    time.sleep(3)
    assert proc.poll() is None, "".join(seen)
    proc.send_signal(how)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, "".join(seen) + out
    assert "interrupted" in out
    assert repo_state(repo) == before
    assert list(scratch.iterdir()) == [], "the temporary worktree and folders must be removed"
    assert not (tmp_path / "ab.json").exists()
