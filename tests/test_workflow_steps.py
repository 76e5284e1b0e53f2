"""Each example workflow's job, run step by step as a default self-hosted runner runs it: as a non-root
user, on a system Python that refuses pip outside a venv (PEP 668), with the job's environment, GITHUB_ENV,
GITHUB_PATH and GITHUB_OUTPUT honoured, and without the network (pip installs from wheels of this
environment's packages). A recorded run stands in for the GPU suite, recorded REST answers for GitHub's
API, and stand-ins for the actions (tests/workflow_runner.py says what each does). A test fails on any
step that fails, naming it with its output; a step's continue-on-error hides nothing here."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="the workflows are read with PyYAML (pip install -e '.[examples]')")
pytest.importorskip("packaging", reason="the wheelhouse reads requirements with packaging")

from workflow_expressions import Evaluator  # noqa: E402
from workflow_python import User, pep668_python, runner_user, wheelhouse  # noqa: E402
from workflow_runner import SYSTEM_PATH, JobRun, Machine, StepResult, load, run_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES, DATA = ROOT / "examples", ROOT / "tests" / "data"
GPU, FLEET, DASHBOARD = (EXAMPLES / f"github-actions-{name}.yml" for name in ("gpu", "gpu-fleet", "dashboard"))
RECORDED = DATA / "h100_run.json"  # a clean run: its report passes --fail-on-regression
PAIRED = DATA / "paired_h100.json"  # an A/B run: a regression, a pass, an inconclusive and an improved cell
JUNIT = ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" failures="0" '
         'skipped="0" tests="0"/></testsuites>')
NVIDIA_SMI = ("#!/bin/sh\necho 'name, driver_version, clocks.sm [MHz], clocks.max.sm [MHz]'\n"
              "echo 'NVIDIA H100 80GB HBM3, 580.159.04, 1980 MHz, 1980 MHz'\n")


@pytest.fixture(scope="module")
def user() -> User:
    found = runner_user()
    if isinstance(found, str):
        pytest.skip(found)
    return found


@pytest.fixture(scope="module")
def machine(user: User):
    """The runner's machine, in a folder the user can reach (pytest's own tmp folders are root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="ampbench-runner-"))
    try:
        root.chmod(0o755)
        python = pep668_python(root / "system", user)
        if isinstance(python, str):
            pytest.skip(python)
        tools = root / "tools"
        tools.mkdir()
        (tools / "nvidia-smi").write_text(NVIDIA_SMI)
        (tools / "nvidia-smi").chmod(0o755)
        wheels = wheelhouse(root / "wheels")
        user.own(root)
        yield Machine(user, python, tools, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels),
                                            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"})
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def job_root(machine: Machine) -> Path:
    root = Path(tempfile.mkdtemp(prefix="job-", dir=machine.python.parents[1]))
    root.chmod(0o755)
    return root


def recorded(root: Path, source: Path, name: str) -> Path:
    """A copy of a recorded file the job's user can read."""
    (root / "recorded").mkdir(exist_ok=True)
    return Path(shutil.copy(source, root / "recorded" / name))


def suite_stand_in(workflow: Path, run: Path) -> dict[str, str]:
    """In place of the GPU suite step: the recorded run written where the step's pytest writes its JSON,
    an empty JUnit file where it writes its XML, and the run appended to the history its --perf-history
    names, as the suite's plugin does (unless that is `off`)."""
    script = next(step["run"] for step in load(workflow)["jobs"]["perf"]["steps"] if step.get("id") == "suite")
    found = [re.search(pattern, script) for pattern in (r'--perf-history "\$(\w+)"', r"--benchmark-json (\S+)",
                                                        r"--junitxml (\S+)")]
    assert all(found), f"{workflow.name}: the suite step's pytest names no --perf-history, JSON or JUnit file"
    history, json_out, junit = (match.group(1) for match in found if match)
    return {"suite": f"cp {run} {json_out}\nprintf '%s\\n' '{JUNIT}' > {junit}\n"
                     f'if [ "${history}" != off ]; then\n'
                     f'  ampbench history import {json_out} --history "${history}"\nfi\n'}


def passed(run: JobRun, results: list[StepResult], skipped: frozenset[str] = frozenset()) -> None:
    failed = [result for result in results if result.outcome == "failure"]
    assert not failed, (f"{run.workflow.name} as {run.machine.user.name}, {len(failed)} step(s) failed:\n\n"
                        + "\n\n".join(map(str, failed)))
    assert {result.name for result in results if result.outcome == "skipped"} == skipped, results


def test_the_stand_in_system_python_refuses_pip_outside_a_venv(machine: Machine):
    """pip ignores the marker in a venv: the stand-in is an installation of its own, which it refuses."""
    done = machine.user.run([str(machine.python / "python3"), "-m", "pip", "install", "--no-index", "ampbench"],
                            env={"PATH": SYSTEM_PATH, "HOME": "/nonexistent"}, timeout=120)
    assert done.returncode != 0 and "externally-managed-environment" in done.stdout + done.stderr, done


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed: the stand-in for "
                                "actions/github-script runs the workflow's script in node")


def gpu_api(previous: bool) -> dict:
    """GitHub's answers to the find-the-previous-run script: this run, main's successful runs (this one
    among them, and one before it), and that run's artifact."""
    return {"actions.getWorkflowRun": {"id": 1000, "workflow_id": 77},
            "actions.listWorkflowRuns": {"workflow_runs": [{"id": 1000}, {"id": 999}] if previous else []},
            "actions.listWorkflowRunArtifacts": {"artifacts": [{"name": "ampbench-run", "expired": False}]}}


@needs_node
def test_the_gpu_workflow_on_a_push_to_main(machine: Machine, job_root: Path):
    """The history lands in the user's home; the previous run is found through the REST API, fetched by
    run id, and compared with; no `gh`, no root."""
    run = JobRun(GPU, "perf", machine, job_root, "push", {"ref": "refs/heads/main"},
                 artifacts={"ampbench-run": {"out.json": recorded(job_root, RECORDED, "previous.json")}},
                 api=gpu_api(previous=True), replace=suite_stand_in(GPU, recorded(job_root, RECORDED, "out.json")))
    passed(run, run.run(), skipped=frozenset({"Comment on the pull request",
                                              "Compare with the pull request's base on this card"}))
    assert (run.home / ".ampbench" / "history.sqlite").stat().st_size > 0
    listed = next(call for call in run.api_calls if call["method"] == "actions.listWorkflowRuns")["params"]
    assert (listed["workflow_id"], listed["branch"], listed["status"]) == (77, "main", "success")
    assert [call["params"]["run_id"] for call in run.api_calls if "Artifacts" in call["method"]] == [999]
    summary = "".join(run.summary)
    assert "Compared with" in summary and "## ampbench:" in summary


def passing_pairs(root: Path) -> Path:
    """The recorded A/B run's cells that pass or improved: what `ampbench ab` writes for a clean pull request."""
    document = json.loads(PAIRED.read_text())
    document["benchmarks"] = [b for b in document["benchmarks"] if b["extra_info"]["verdict"] in ("pass", "improved")]
    (root / "recorded").mkdir(exist_ok=True)
    path = root / "recorded" / "ab.json"
    path.write_text(json.dumps(document))
    return path


@needs_node
def test_the_gpu_workflow_on_a_pull_request(machine: Machine, job_root: Path):
    """A pull request runs the A/B run against its base (not the suite), leaves the history alone, compares
    with no run of main, and posts its summary, the paired table, as the comment."""
    ab = next(step["run"] for step in load(GPU)["jobs"]["perf"]["steps"] if step.get("id") == "ab")
    assert 'ampbench ab --base "$BASE_SHA"' in ab and "-o out.json" in ab
    run = JobRun(GPU, "perf", machine, job_root, "pull_request",
                 {"number": 7, "pull_request": {"number": 7, "base": {"sha": "0" * 40}}},
                 api=gpu_api(previous=False), replace={"ab": f"cp {passing_pairs(job_root)} out.json\n"})
    passed(run, run.run(), skipped=frozenset({"Run the suite", "Find the last successful run on main",
                                              "Fetch the last successful run on main"}))
    assert (run.home / ".ampbench").is_dir() and not (run.home / ".ampbench" / "history.sqlite").exists()
    assert run.comments and run.comments[0] == (run.workspace / "report" / "summary.md").read_text()
    assert "Head over base" in run.comments[0]


def test_in_the_suggested_container_the_history_lies_in_its_volume(tmp_path):
    """The commented `container:` mounts a volume where AMPBENCH_STORE_DIR points, and the history step
    puts the store there: a container's own home goes with it."""
    lines = GPU.read_text().splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip().startswith("# container:"))
    end = next(index for index in range(start, len(lines)) if not lines[index].lstrip().startswith("#"))
    block = [line.replace("# ", "", 1).split("  # ")[0] for line in lines[start:end]]  # uncommented, less notes
    container = yaml.safe_load("\n".join(block))["container"]
    folder = container["env"]["AMPBENCH_STORE_DIR"]
    assert any(volume.split(":")[1] == folder for volume in container["volumes"]), container
    step = next(step for step in load(GPU)["jobs"]["perf"]["steps"] if step.get("name") == "Where the history lives")
    volume = tmp_path / folder.strip("/")
    env = {"PATH": SYSTEM_PATH, "HOME": str(tmp_path / "home"), "GITHUB_ENV": str(tmp_path / "env"),
           "GITHUB_EVENT_NAME": "push", "AMPBENCH_STORE_DIR": str(volume)}
    done = run_script(step["run"], step.get("shell"), tmp_path, env)
    assert done.returncode == 0 and volume.is_dir(), done.stderr
    assert f"STORE={volume}/history.sqlite" in (tmp_path / "env").read_text().splitlines()


def test_the_fleet_workflow_appends_to_its_one_database(machine: Machine, job_root: Path):
    """The database every host shares (an SQLite file here, where the fleet's is PostgreSQL) holds the run."""
    shared = job_root / "database"
    shared.mkdir()
    machine.user.own(shared)
    url = f"sqlite:///{shared}/history.sqlite"
    run = JobRun(FLEET, "perf", machine, job_root, "push", secrets={"AMPBENCH_HISTORY_URL": url},
                 replace=suite_stand_in(FLEET, recorded(job_root, RECORDED, "out.json")))
    passed(run, run.run())
    assert (shared / "history.sqlite").stat().st_size > 0
    assert "changes in the run history" in "".join(run.summary)


def test_the_fleet_workflow_without_its_database_fails_at_once_saying_what_is_missing(machine: Machine,
                                                                                       job_root: Path):
    run = JobRun(FLEET, "perf", machine, job_root, "push")
    first = run.run()[0]
    assert first.outcome == "failure" and "AMPBENCH_HISTORY_URL" in first.output, first


def test_the_fleets_history_changes_step_fails_where_the_command_does(tmp_path):
    """Its output goes through tee, in the runner's bash without pipefail: the command's status must win."""
    step = next(step for step in load(FLEET)["jobs"]["perf"]["steps"] if step.get("name") == "Changes in the history")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ampbench").write_text("#!/bin/sh\necho 'ampbench: not a database' >&2\nexit 2\n")
    (tmp_path / "bin" / "ampbench").chmod(0o755)
    summary = tmp_path / "summary.md"
    env = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{SYSTEM_PATH}", "GITHUB_STEP_SUMMARY": str(summary),
           "AMPBENCH_HISTORY": "postgresql://nowhere/ampbench"}
    done = run_script(step["run"], step.get("shell"), tmp_path, env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not a database" in summary.read_text()


def test_the_dashboard_workflow_charts_a_run(machine: Machine, job_root: Path):
    """The run's artifact fetched by run id with the job's token; gh-pages created on the (local) origin;
    the export's log holds no pip ERROR line (a dependency conflict logged for the package installed
    without torch). The recorded run holds one cell past its line (resnet50 amp_fp16, a margin of 9): the
    last step fails the job naming it, and it alone."""
    event = {"workflow_run": {"id": 555, "event": "push", "head_sha": "a" * 40}}
    run = JobRun(DASHBOARD, "dashboard", machine, job_root, "workflow_run", event,
                 artifacts={"ampbench-run": {"out.json": recorded(job_root, DATA / "h100_speed_device.json",
                                                                  "out.json")}})
    *charted, last = run.run()
    passed(run, charted)
    assert last.name.startswith("Fail on a cell past its line") and last.outcome == "failure", last
    assert "test_speed[resnet50-amp_fp16]" in last.output and "1 cell past its line" in last.output, last
    results = charted
    export = next(result for result in results if result.name.startswith("Export"))
    errors = [line for line in export.output.splitlines() if line.startswith("ERROR")]
    assert not errors, export
    pages = machine.user.run(["git", "-C", str(job_root / "origin.git"), "rev-parse", "--verify", "gh-pages"])
    assert pages.returncode == 0, pages.stderr


@pytest.mark.parametrize(("expression", "value"), [
    ("github.event_name == 'PUSH' && 'full' || 'quick'", "full"),  # strings compare ignoring case
    ("steps.previous-run.outputs.result != ''", False),  # a missing output is null, which equals ''
    ("format('ampbench-pr-{0}', github.event.pull_request.number)", "ampbench-pr-7"),
    ("!(1 == 2) && null", None),
    ("hashFiles('nothing/*') != ''", False),
])
def test_the_expression_evaluator_follows_githubs_rules(expression, value):
    contexts = {"github": {"event_name": "push", "event": {"pull_request": {"number": 7}}},
                "steps": {"previous-run": {"outputs": {}}}}
    assert Evaluator(contexts, {"hashFiles": lambda *patterns: ""}).evaluate(expression) == value


def test_an_if_without_a_status_function_means_success_and_it():
    failed = Evaluator({"github": {"event_name": "push"}}, {"success": lambda: False, "always": lambda: True})
    assert not failed.condition("github.event_name == 'push'")
    assert failed.condition("${{ always() && github.event_name == 'push' }}")


if sys.platform != "linux":  # the runner's shell, users and interpreters as a Linux runner has them
    pytestmark = pytest.mark.skip(reason="the workflows' steps are run as a Linux runner runs them")
