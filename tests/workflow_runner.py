"""One job of a workflow, run step by step as GitHub's runner runs it, on this machine (`Machine`):

- each `run:` step in the runner's shell (`bash -e` where the step names none, `bash --noprofile --norc
  -eo pipefail` for `shell: bash`), as the machine's non-root user, in the workspace, with the runner's
  variables (HOME, RUNNER_TEMP, GITHUB_WORKSPACE, GITHUB_EVENT_NAME, ...), the workflow's, the job's and
  the step's `env:`, and the files GITHUB_ENV (a later step's environment), GITHUB_PATH (prepended to a
  later step's PATH), GITHUB_OUTPUT (`steps.ID.outputs`) and GITHUB_STEP_SUMMARY;
- `${{ }}` and `if:` evaluated (tests/workflow_expressions.py), `continue-on-error` honoured;
- each `uses:` step by a stand-in (`STAND_INS`): checkout copies this working tree into the workspace as a
  commit with a bare `origin`; setup-python gives a venv of the machine's Python (its `python-version`
  is not honoured); download-artifact copies a recorded run's files, and needs a `run-id` with a token;
  upload-artifact checks that its paths find something; github-script runs its script in node against recorded
  REST answers; the PR comment and github-action-benchmark check the file they are given;
- a step named in `replace` (by its id) runs a stand-in script instead of its own (the GPU suite);
- the job's `runs-on`, `container:`, `services:` and `timeout-minutes` are not modelled, and a matrix
  job runs its first combination unless one is given.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from workflow_expressions import Evaluator, as_text, truthy
from workflow_python import User

ROOT = Path(__file__).resolve().parents[1]
SHELLS = {None: ["bash", "-e"], "bash": ["bash", "--noprofile", "--norc", "-eo", "pipefail"], "sh": ["sh", "-e"]}
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class StepFailed(Exception):
    """A stand-in's step failed; the message is its output."""


@dataclass(frozen=True)
class Machine:
    """What the job runs on: `user`, the system Python's bin folder first on PATH, `tools` (stand-ins for
    the GPU runner's own tools, as nvidia-smi) after it, and `offline` variables that point pip at a
    wheelhouse instead of the index."""
    user: User
    python: Path
    tools: Path
    offline: dict[str, str]


@dataclass
class StepResult:
    name: str
    outcome: str  # success, failure or skipped, as steps.ID.outcome
    output: str = ""

    def __str__(self) -> str:
        return f"step {self.name!r}: {self.outcome}\n{self.output[-6000:]}"


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


def step_name(step: dict) -> str:
    return str(step.get("name") or step.get("uses") or step.get("run", "").strip().splitlines()[0])


def _read_pairs(path: Path) -> dict[str, str]:
    """GITHUB_ENV and GITHUB_OUTPUT's `NAME=value` and `NAME<<DELIMITER` lines."""
    pairs, lines = {}, path.read_text().splitlines() if path.exists() else []
    while lines:
        line = lines.pop(0)
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body = []
            while lines and lines[0] != delimiter:
                body.append(lines.pop(0))
            lines = lines[1:]
            pairs[name] = "\n".join(body)
        elif "=" in line:
            name, value = line.split("=", 1)
            pairs[name] = value
    return pairs


@dataclass
class JobRun:
    workflow: Path
    job: str
    machine: Machine
    root: Path
    event_name: str
    event: dict = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    matrix: dict[str, Any] | None = None
    artifacts: dict[str, dict[str, Path]] = field(default_factory=dict)  # name: {file in it: its source}
    api: dict[str, Any] = field(default_factory=dict)  # "actions.listWorkflowRuns": its answer's data
    replace: dict[str, str] = field(default_factory=dict)  # step id: the script that stands in for it
    run_id: str = "1000"
    results: list[StepResult] = field(default_factory=list)
    summary: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    api_calls: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.doc = load(self.workflow)
        self.spec = self.doc["jobs"][self.job]
        if self.matrix is None:
            axes = self.spec.get("strategy", {}).get("matrix", {})
            self.matrix = {name: values[0] for name, values in axes.items() if isinstance(values, list)}
        self.workspace, self.temp, self.home = self.root / "workspace", self.root / "temp", self.root / "home"
        self.tool_cache, self.files = self.root / "toolcache", self.root / "files"
        self.paths: list[str] = []  # GITHUB_PATH's folders, the newest first
        self.env_file: dict[str, str] = {}  # GITHUB_ENV's variables
        self.steps: dict[str, dict] = {}
        self.failed = False

    @property
    def github(self) -> dict[str, Any]:
        return {"event_name": self.event_name, "event": self.event, "sha": "0" * 40, "ref": "refs/heads/main",
                "ref_name": "main", "repository": "owner/repo", "repository_owner": "owner", "run_id": self.run_id,
                "run_number": "1", "run_attempt": "1", "workflow": self.doc.get("name", self.workflow.name),
                "job": self.job, "actor": "owner", "token": "stand-in-token", "workspace": str(self.workspace),
                "server_url": "https://github.com", "api_url": "https://api.github.com"}

    def evaluator(self, env: dict[str, str]) -> Evaluator:
        contexts = {"github": self.github, "env": env, "secrets": self.secrets, "matrix": self.matrix,
                    "steps": self.steps, "job": {"status": "failure" if self.failed else "success"},
                    "runner": {"name": "stand-in-runner", "os": "Linux", "arch": "X64", "temp": str(self.temp),
                               "tool_cache": str(self.tool_cache)}, "vars": {}, "inputs": {}, "needs": {}}
        return Evaluator(contexts, {"always": lambda: True, "success": lambda: not self.failed,
                                    "failure": lambda: self.failed, "cancelled": lambda: False,
                                    "hashFiles": self._hash_files})

    def _hash_files(self, *patterns: str) -> str:
        found = sorted({path for pattern in patterns
                        for path in glob.glob(str(self.workspace / pattern), recursive=True) if os.path.isfile(path)})
        if not found:
            return ""
        return hashlib.sha256(b"".join(hashlib.sha256(Path(path).read_bytes()).digest() for path in found)).hexdigest()

    def _base_env(self) -> dict[str, str]:
        github = self.github
        env = {"HOME": str(self.home), "USER": self.machine.user.name, "LOGNAME": self.machine.user.name,
               "LANG": "C.UTF-8", "SHELL": "/bin/bash", "CI": "true", "GITHUB_ACTIONS": "true",
               "GITHUB_EVENT_PATH": str(self.root / "event.json"), "RUNNER_TEMP": str(self.temp),
               "RUNNER_TOOL_CACHE": str(self.tool_cache), "RUNNER_NAME": "stand-in-runner", "RUNNER_OS": "Linux",
               "RUNNER_ARCH": "X64", **self.machine.offline}
        for name in ("event_name", "sha", "ref", "ref_name", "repository", "repository_owner", "run_id", "run_number",
                     "run_attempt", "workflow", "job", "actor", "workspace", "server_url", "api_url"):
            env[f"GITHUB_{name.upper()}"] = as_text(github[name])
        return env

    def run(self) -> list[StepResult]:
        """Every step in order; the results, each step's outcome with its output."""
        for folder in (self.workspace, self.temp, self.home, self.tool_cache, self.files):
            folder.mkdir(parents=True, exist_ok=True)
        (self.root / "event.json").write_text(json.dumps(self.event))
        self.machine.user.own(self.root)
        self.base = self._base_env()
        outer = self.evaluator(self.base)
        workflow_env = {name: outer.interpolate(as_text(value)) for name, value in self.doc.get("env", {}).items()}
        inner = self.evaluator({**self.base, **workflow_env})
        self.job_env = {**workflow_env, **{name: inner.interpolate(as_text(value))
                                           for name, value in self.spec.get("env", {}).items()}}
        if "if" in self.spec and not self.evaluator(self.job_env).condition(self.spec["if"]):
            return self.results
        for index, step in enumerate(self.spec["steps"]):
            self._step(index, step)
        return self.results

    def _step(self, index: int, step: dict) -> None:
        env = {**self.base, **self.job_env, **self.env_file}
        evaluator = self.evaluator(env)
        key = step.get("id", f"__{index}")
        if not evaluator.condition(step.get("if")):
            self.steps[key] = {"outcome": "skipped", "conclusion": "skipped", "outputs": {}}
            self.results.append(StepResult(step_name(step), "skipped"))
            return
        files = {name: self.files / f"{index}-{name.lower()}" for name in
                 ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        for path in files.values():
            path.write_text("")
            self.machine.user.own(path)
        env.update({name: evaluator.interpolate(as_text(value)) for name, value in step.get("env", {}).items()})
        env.update({name: str(path) for name, path in files.items()})
        env["PATH"] = os.pathsep.join([*self.paths, str(self.machine.python), str(self.machine.tools), SYSTEM_PATH])
        try:
            if key in self.replace:
                output = "(a stand-in for this step)\n" + self._script(index, self.replace[key], step, env)
            elif "uses" in step:
                action = step["uses"].partition("@")[0]
                if action not in STAND_INS:
                    raise StepFailed(f"the test has no stand-in for the action {action}")
                given = {name: evaluator.interpolate(as_text(value)) for name, value in step.get("with", {}).items()}
                output = STAND_INS[action](self, given, env)
            else:
                output = self._script(index, evaluator.interpolate(step["run"]), step, env)
            outcome = "success"
        except StepFailed as failure:
            output, outcome = str(failure), "failure"
        self.env_file.update(_read_pairs(files["GITHUB_ENV"]))
        self.paths[:0] = reversed([line for line in files["GITHUB_PATH"].read_text().splitlines() if line.strip()])
        self.summary.append(files["GITHUB_STEP_SUMMARY"].read_text())
        continue_on_error = truthy(evaluator.value(step.get("continue-on-error", False)))
        conclusion = "success" if continue_on_error else outcome
        self.failed |= conclusion == "failure"
        self.steps[key] = {"outcome": outcome, "conclusion": conclusion, "outputs": _read_pairs(files["GITHUB_OUTPUT"])}
        self.results.append(StepResult(step_name(step), outcome, output))

    def _script(self, index: int, script: str, step: dict, env: dict[str, str]) -> str:
        shell = step.get("shell", self.spec.get("defaults", {}).get("run", {}).get("shell"))
        if shell not in SHELLS:
            raise StepFailed(f"the test runs no `shell: {shell}`")
        path = self.temp / f"step-{index}.sh"
        path.write_text(script)
        self.machine.user.own(path)
        cwd = self.workspace / step.get("working-directory", ".")
        done = self.machine.user.run([*SHELLS[shell], str(path)], cwd=cwd, env=env, timeout=600,
                                     stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise StepFailed(f"{done.stdout}\n(exit status {done.returncode})")
        return done.stdout

    def as_user(self, args: list[str], env: dict[str, str], what: str) -> str:
        """`args` as the job's user in the workspace; its output, or the step failed saying `what` failed."""
        done = self.machine.user.run(args, cwd=self.workspace, env=env, timeout=600, stderr=subprocess.STDOUT)
        if done.returncode != 0:
            raise StepFailed(f"{what} failed (exit status {done.returncode}):\n{done.stdout}")
        return done.stdout


_UNTRACKED = {".git", ".venv", ".nox", "__pycache__", "build", ".pytest_cache", ".hypothesis"}


def _tree() -> list[str]:
    """This checkout's files: git's tracked and untracked ones, less what it ignores (outside a git checkout,
    every file but those of environments, caches and builds)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        return [name for name in listed.stdout.split("\0") if name and (ROOT / name).is_file()]
    return [str(path.relative_to(ROOT)) for path in ROOT.rglob("*") if path.is_file()
            and not _UNTRACKED & set(path.relative_to(ROOT).parts) and ".egg-info" not in str(path)]


def checkout(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    for name in _tree():
        (run.workspace / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, run.workspace / name)
    run.machine.user.own(run.workspace)
    git = ["git", "-c", "user.name=checkout", "-c", "user.email=checkout@example.com", "-c", "commit.gpgsign=false"]
    origin = run.root / "origin.git"
    origin.mkdir(exist_ok=True)
    run.machine.user.own(origin)
    env = {**env, "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (["init", "-q", "--bare", str(origin)], ["init", "-q", "-b", "main"], ["add", "-A"],
                 ["commit", "-q", "-m", "the commit measured"], ["remote", "add", "origin", str(origin)],
                 ["push", "-q", "origin", "main"]):
        run.as_user([*git, *args], env, f"git {args[0]}")
    return f"checked out this working tree (ref {given.get('ref') or 'the event commit'}) with a local origin"


def setup_python(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    location = run.tool_cache / "Python" / "x64"
    run.as_user([str(run.machine.python / "python3"), "-m", "venv", str(location)], env, "making its Python")
    run.paths.insert(0, str(location / "bin"))
    return f"the machine's Python, not {given.get('python-version')}, at {location}"


def download_artifact(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    name = given.get("name", "")
    if given.get("run-id", run.run_id) != run.run_id and not given.get("github-token"):
        raise StepFailed("download-artifact reads another run's artifact only with a github-token")
    if name not in run.artifacts:
        raise StepFailed(f"no artifact {name!r} among the recorded runs' ({sorted(run.artifacts)})")
    folder = run.workspace / given.get("path", ".")
    for file, source in run.artifacts[name].items():
        (folder / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, folder / file)
    run.machine.user.own(folder)
    return f"artifact {name} of run {given.get('run-id')} into {folder}"


def upload_artifact(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    paths = [line.strip() for line in given.get("path", "").splitlines() if line.strip()]
    missing = [path for path in paths if not glob.glob(str(run.workspace / path))]
    # the action uploads what its paths find and passes over a path that finds nothing (a pull request's
    # job writes no junit.xml); an artifact that finds nothing at all is a mistake of the workflow's here
    if not paths or missing == paths:
        raise StepFailed(f"artifact {given.get('name')}: nothing at {missing or 'no path'}")
    found = [path for path in paths if path not in missing]
    return f"artifact {given.get('name')}: {', '.join(found)}" + (f" (nothing at {', '.join(missing)})"
                                                                  if missing else "")


_GITHUB_SCRIPT = r"""
const fs = require('fs');
const answers = JSON.parse(fs.readFileSync(process.env.STAND_IN_ANSWERS, 'utf8'));
const calls = [];
const method = (group, name) => async (params) => {
  calls.push({ method: `${group}.${name}`, params });
  fs.writeFileSync(process.env.STAND_IN_CALLS, JSON.stringify(calls));
  if (!(`${group}.${name}` in answers)) throw new Error(`the test recorded no answer of github.rest.${group}.${name}`);
  return { data: answers[`${group}.${name}`] };
};
const rest = new Proxy({}, {
  get: (_, group) => new Proxy({}, { get: (__, name) => method(String(group), String(name)) }) });
const [owner, repo] = process.env.GITHUB_REPOSITORY.split('/');
const context = { repo: { owner, repo }, runId: Number(process.env.GITHUB_RUN_ID),
  eventName: process.env.GITHUB_EVENT_NAME,
  payload: JSON.parse(fs.readFileSync(process.env.GITHUB_EVENT_PATH, 'utf8')) };
const core = {
  setOutput: (name, value) => fs.appendFileSync(process.env.GITHUB_OUTPUT, `${name}=${value}\n`),
  info: (text) => console.log(text), notice: (text) => console.log(`::notice::${text}`),
  warning: (text) => console.log(`::warning::${text}`),
  setFailed: (text) => { console.log(`::error::${text}`); process.exitCode = 1; },
};
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
new AsyncFunction('github', 'context', 'core', 'require', fs.readFileSync(process.env.STAND_IN_SCRIPT, 'utf8'))(
  { rest }, context, core, require,
).then((result) => {  // the action's own handling of what the script returns, by its result-encoding
  const encoding = process.env.STAND_IN_ENCODING || 'json';
  if (!['json', 'string'].includes(encoding)) throw new Error('"result-encoding" must be either "string" or "json"');
  const output = encoding === 'json' ? JSON.stringify(result) : String(result);
  core.setOutput('result', output === undefined ? '' : output);
}).catch((error) => { console.log(`::error::${error.message}`); process.exitCode = 1; });
"""


def github_script(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    node = shutil.which("node")
    if node is None:
        raise StepFailed("node is not installed: the github-script stand-in runs the script in node")
    names = ("main.js", "script.js", "answers.json", "calls.json")
    files = {name: run.temp / f"github-script-{name}" for name in names}
    for name, text in (("main.js", _GITHUB_SCRIPT), ("script.js", given["script"]),
                       ("answers.json", json.dumps(run.api)), ("calls.json", "[]")):
        files[name].write_text(text)
        run.machine.user.own(files[name])
    env = {**env, "STAND_IN_ANSWERS": str(files["answers.json"]), "STAND_IN_CALLS": str(files["calls.json"]),
           "STAND_IN_SCRIPT": str(files["script.js"]), "STAND_IN_ENCODING": given.get("result-encoding", "")}
    try:
        return run.as_user([node, str(files["main.js"])], env, "the script")
    finally:
        run.api_calls.extend(json.loads(files["calls.json"].read_text()))


def sticky_comment(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    path = run.workspace / given.get("path", "")
    if not given.get("header") or not path.is_file() or not path.read_text().strip():
        raise StepFailed(f"the comment needs a header and a non-empty file, given {given}")
    run.comments.append(path.read_text())
    return f"the comment {given['header']}: {path.stat().st_size} bytes of {given['path']}"


def github_action_benchmark(run: JobRun, given: dict[str, str], env: dict[str, str]) -> str:
    path = run.workspace / given.get("output-file-path", "")
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise StepFailed(f"{given.get('name')}: no benchmark file to chart: {error}") from error
    fields = {"name", "unit", "value"}
    if not entries or not all(isinstance(entry, dict) and fields <= set(entry) and
                              isinstance(entry["value"], (int, float)) for entry in entries):
        raise StepFailed(f"{path.name} is not a list of {sorted(fields)} entries")
    if given.get("tool") not in ("customBiggerIsBetter", "customSmallerIsBetter"):
        raise StepFailed(f"tool {given.get('tool')!r} does not read the custom JSON format")
    return f"{given.get('name')}: {len(entries)} points"


STAND_INS: dict[str, Callable[[JobRun, dict[str, str], dict[str, str]], str]] = {
    "actions/checkout": checkout, "actions/setup-python": setup_python, "actions/download-artifact": download_artifact,
    "actions/upload-artifact": upload_artifact, "actions/github-script": github_script,
    "marocchino/sticky-pull-request-comment": sticky_comment,
    "benchmark-action/github-action-benchmark": github_action_benchmark,
}


def run_script(script: str, shell: str | None, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`script` in the runner's shell for `shell:` (None: the default, bash without pipefail)."""
    return subprocess.run([*SHELLS[shell], "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
