"""The history's pytest side: ``--perf-history`` and ``--perf-label``, the store opened and checked before
the first cell, the session's run appended at its end, and the end of the terminal summary saying how far
the run's cells have learned their tolerances from it (``write_learned``, which ``ampbench.plugin.session``
calls after its baselines line). Loaded by ``ampbench.plugin``; it acts where ampbench does
(``ampbench.plugin.acts``).

The run goes in whole at the end of the session, after pytest-benchmark has written its JSON: the
cells' records (``ampbench.plugin.summary.keep_record``), the machine's info, the host's load, the suite's revision
and the label. The same run id, label, revision and load go into ``machine_info["ampbench"]``, so that
the JSON imported later is the same run. A store that fails at the end costs nothing else the run
wrote: the run is saved beside the default store as a JSON that ``ampbench history import`` loads, the
terminal says so in red, and the session's exit status is 1. A learned ratio that is no plausible
measurement (``plausible.checked_run``: 1e308, zero, a hundredfold off the cell's level) is left out of the
run appended, with a warning naming the cell, the figure and the bound; the rest of the run goes in.

``off`` turns the history off; an unreachable store, or one that takes no write (read-only, its disk
full), is a usage error before the first cell, never the history silently off. On the CPU smoke pass the history is off
unless ``--perf-history`` names a store:
smoke figures compare with nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import ampbench
from ampbench.files import paths
from ampbench.files.write import write_atomic
from ampbench.plugin import acts
from ampbench.plugin.options import GROUP, follows
from ampbench.settings import value_error_type

if TYPE_CHECKING:  # SQLAlchemy is imported where a history is opened: a run without ampbench's cells opens none
    from ampbench.history.store import History

OFF = "off"
# CI variables naming the commit under test, in the order they are read
LABEL_VARIABLES = ("GITHUB_SHA", "CI_COMMIT_SHA", "BUILDKITE_COMMIT", "GIT_COMMIT")
MAX_LABEL = 200
STATE_KEY = pytest.StashKey["HistorySession"]()


@dataclass
class HistorySession:
    history: History | None  # None: off
    run_id: str
    label: str | None
    suite_revision: str
    machine: dict | None = None  # machine_info["ampbench"] as pytest-benchmark's JSON has it
    line: str | None = None  # what the terminal summary says about the append
    failed: bool = False
    left_out: list = field(default_factory=list)  # the figures kept out of the history (``plausible.Implausible``)


def history_of(config: pytest.Config) -> History | None:
    """The session's history, its schema checked at configure; None where it is off."""
    state = config.stash.get(STATE_KEY, None)
    return None if state is None else state.history


def history_option(value: str) -> str:
    """--perf-history's type: off, a path or a database URL the history runs on (reached at configure),
    never a store that dies with the run (an in-memory SQLite database: ``outputs.memory_store_problem``)."""
    from ampbench.history.connect import store_url
    from ampbench.outputs import memory_store_problem

    if value.strip().lower() == OFF:
        return OFF
    problem = memory_store_problem(value)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem}, or off to run without a history")
    return store_url(value)


def _label(value: str) -> str:
    from ampbench.printable import one_line

    return one_line(value, MAX_LABEL)


label_option = value_error_type(_label)  # --perf-label's type: one line (``printable.one_line``)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(*GROUP)
    group.addoption("--perf-history", metavar="URL|off", default=None, type=history_option,
                    help="the run history each run is appended to: an SQLite file (a path or sqlite:///PATH), "
                         "postgresql://USER:PASSWORD@HOST/DB for a fleet of runners, or off; a store that cannot be "
                         "reached is a usage error (default: " + str(paths.HISTORY) + " under the rootdir; off on "
                         "the CPU smoke pass)")
    group.addoption("--perf-label", metavar="TEXT", default=None, type=label_option,
                    help="what the history calls the stack under test in this run, e.g. a commit of your code or a "
                         "container tag (default: the first of $" + ", $".join(LABEL_VARIABLES) + " that is set, "
                         "else none)")


def default_label() -> str | None:
    from ampbench.printable import printable

    # the environment is not checked as --perf-label is: what a terminal would act on is stored escaped
    return next((printable(os.environ[v].strip()) for v in LABEL_VARIABLES if os.environ.get(v, "").strip()), None)


def suite_revision() -> str:
    """``git describe`` of the ampbench checkout where it is one, else the package's version."""
    root = Path(ampbench.__file__).resolve().parent.parent
    try:
        top = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=5)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == root:
            described = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--tags"],
                                       capture_output=True, text=True, timeout=5)
            if described.returncode == 0 and described.stdout.strip():
                return described.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass  # no git: the version says what it can
    return f"ampbench {ampbench.__version__}"


def load_averages() -> dict:
    """The host's load averages (1, 5 and 15 minutes, where the system has them) and CPU count."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return {"cpus": os.cpu_count()}
    return {"load_1m": round(one, 2), "load_5m": round(five, 2), "load_15m": round(fifteen, 2),
            "cpus": os.cpu_count()}


def _device(config: pytest.Config):
    from ampbench.device import resolve

    return resolve(getattr(config.option, "perf_device", None) or "auto")


def _open(config: pytest.Config) -> History | None:
    opt = config.option
    # a run under --perf-memory-limit is no run of the card (cuDNN chose its algorithms under a workspace
    # cap): by default it is judged against the baseline file and taught to no history
    limited = getattr(opt, "perf_memory_limit", None) is not None
    if opt.perf_history == OFF or (opt.perf_history is None and (limited or _device(config).type == "cpu")):
        return None
    from ampbench.history.connect import HistoryError
    from ampbench.history.store import open_history

    url = opt.perf_history or str(config.rootpath / paths.HISTORY)
    try:
        history = open_history(url, create=True)
        history.check_writable()  # a store that takes no run would be found only at the end, hours on
    except HistoryError as error:
        raise pytest.UsageError(f"--perf-history: {error}; nothing was measured (off runs without a history)") from None
    history.release()  # no connection held through a session of hours: the append reconnects
    return history


@pytest.hookimpl(trylast=True)  # after ampbench.plugin.session has refused a bad --perf-device
def pytest_configure(config: pytest.Config) -> None:
    # an xdist worker's cells are its controller's run; the help and a collection measure nothing
    if hasattr(config, "workerinput") or config.option.help or config.option.collectonly or not acts(config):
        return
    if follows(config):  # node 0 keeps the run's history; this node runs no cell of its own
        return
    config.stash[STATE_KEY] = HistorySession(
        history=_open(config), run_id=str(uuid.uuid4()),
        label=config.option.perf_label or default_label(), suite_revision=suite_revision())


def run_fields(state: HistorySession) -> dict:
    """What the history adds to machine_info["ampbench"] (``ingest.RUN_KEYS``)."""
    return {"run_id": state.run_id, "label": state.label, "suite_revision": state.suite_revision,
            "host_load": load_averages()}


@pytest.hookimpl(trylast=True, optionalhook=True)  # after ampbench.plugin.session has written the ampbench block
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is not None:
        machine_info.setdefault("ampbench", {}).update(run_fields(state))
        state.machine = dict(machine_info["ampbench"])


def _records(config: pytest.Config) -> list:
    from ampbench.plugin import summary  # the records' types: loaded where ampbench acts

    # a record knows its test id as pytest-benchmark names it: the last part of the node id
    return [r if r.test_id else replace(r, test_id=nodeid.split("::")[-1])
            for nodeid, r in config.stash.get(summary.RECORDS_KEY, [])]


def _machine(config: pytest.Config, state: HistorySession) -> dict:
    """The machine info the run's JSON holds, where pytest-benchmark wrote one: the store and the JSON
    then say the same (and the GPU is asked once)."""
    if state.machine and state.machine.get("device"):
        return state.machine
    from ampbench.device import machine_info

    return {**machine_info(_device(config)), **run_fields(state)}


@pytest.hookimpl(trylast=True)  # after pytest-benchmark has written its JSON
def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    state = config.stash.get(STATE_KEY, None)
    if state is None or state.history is None:
        return
    records = _records(config)
    if not records:
        return
    from ampbench.history.connect import HistoryError
    from ampbench.history.ingest import session_run
    from ampbench.history.plausible import checked_run

    machine = _machine(config, state)
    run = session_run(records, machine, datetime.now(timezone.utc))
    try:
        # a figure no measurement gives would move its cell's level past any later run's reach: left out
        run, state.left_out = checked_run(state.history, run, records)
        appended = state.history.append(run)
    except HistoryError as error:
        state.failed = True
        state.line = f"ampbench: run {run.id} NOT appended: {error}; {_save(config, records, machine, run.when)}"
        # the history misses a run that later ones are judged against: CI must see it
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            state.line += f"; exit status {int(pytest.ExitCode.TESTS_FAILED)}"
        return
    finally:
        state.history.release()
    done = "appended to" if appended else "already in"
    state.line = f"ampbench: run {run.id} ({len(run.cells)} cells) {done} the history {state.history.name}"


def _save(config: pytest.Config, records: list, machine: dict, when: str) -> str:
    """Write the run where a later ``ampbench history import`` finds it; what to do, in words."""
    path = config.rootpath / paths.UNAPPENDED / f"run-{machine['run_id']}.json"
    document = {"machine_info": {"ampbench": machine}, "datetime": when, "commit_info": {},
                "benchmarks": [{"name": r.test_id, "extra_info": r.to_info()} for r in records]}
    try:
        write_atomic(path, document)
    except OSError as error:
        return f"nor could it be saved to {path} ({error.strerror or error}): its cells are in --benchmark-json only"
    return f"saved to {path}: load it with `ampbench history import {path}`"


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(STATE_KEY, None)
    if state is None:
        return
    for problem in state.left_out:
        terminalreporter.write_line(f"ampbench: warning: {problem}; left out of the history", yellow=True)
    if state.line:
        terminalreporter.write_line(state.line, red=state.failed, bold=state.failed)


def write_learned(terminalreporter, source, config: pytest.Config, what: str) -> None:
    """How far each cell's device tolerance has been learned from the history (`source`'s cells, `what`
    the summary calls them), this run's cells."""
    from ampbench.plugin import summary

    ran = {t for t in (r.test_id or nodeid.split("::")[-1] for nodeid, r in config.stash.get(summary.RECORDS_KEY, []))
           if source.cells.covers(t)}
    if not ran:
        return
    states = {t: line for t, line in source.states().items() if t in ran}
    learned, cells = source.learned_share()
    if not cells:
        others = sorted({r.gpu for r in source.history.runs() if not r.smoke} - {source.file.gpu})
        elsewhere = f" (it holds runs of {', '.join(others)}, never used for this one)" if others else ""
        terminalreporter.write_line(f"ampbench history: no earlier run of {source.file.gpu}{elsewhere}: this run's "
                                    f"{what} are learning")
        return
    terminalreporter.write_line(f"ampbench history: device tolerance learned and at most 1% in {learned} of {cells} "
                                f"{what} of {source.file.gpu}; this run's cells:")
    for test_id in sorted(ran):
        terminalreporter.write_line(f"  {test_id}: {states.get(test_id, 'learning: this run sets the level')}")
    _write_suspects(terminalreporter, source, config)


def _write_suspects(terminalreporter, source, config: pytest.Config) -> None:
    """This run's cells the history holds back as suspect (their device time below their level by more
    than noise says, or inconclusive below it): not learned from until later runs clear them, or someone
    accepts the change."""
    from ampbench.history.plausible import plausible
    from ampbench.history.statuses import SUSPECT
    from ampbench.plugin import summary
    from ampbench.results import TimedRecord
    from ampbench.results.ratios import DEVICE

    state = config.stash.get(STATE_KEY, None)
    left_out = {(i.test_id, i.figure) for i in state.left_out} if state is not None else set()
    held = []
    for nodeid, r in config.stash.get(summary.RECORDS_KEY, []):
        device = r.ratio(DEVICE) if isinstance(r, TimedRecord) else None  # a distributed cell's is named alike
        test_id, value = r.test_id or nodeid.split("::")[-1], device.speedup if device else None
        verdict = device.verdict if device else None
        # a figure left out of the history is no run of the cell's series: nothing to hold back
        if not source.cells.covers(test_id) or not plausible(value) or (test_id, DEVICE.history) in left_out:
            continue
        status = source.judged(test_id, DEVICE, value, None if verdict is None else str(verdict),
                              not (verdict is not None and verdict.failing))
        if status is not None and status.state == SUSPECT:
            held.append(f"  {test_id}: {status.reason}")
    if held:
        terminalreporter.write_line(f"ampbench history: {len(held)} of this run's cells held back as suspect, not "
                                    "learned from until later runs show their level held (or `ampbench history "
                                    "accept` makes theirs the level; `ampbench history explain TEST_ID` says more):",
                                    yellow=True)
        for line in held:
            terminalreporter.write_line(line, yellow=True)
