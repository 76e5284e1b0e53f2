"""``ampbench baselines record``: a GPU's baseline file with learned tolerances in one job. It runs the speed
cells N times, each run a pytest process of its own into a history of the recording's own (a fresh process
is what a later run is: its own memory placement, kernel choices, compilation), then writes the file from
that history as ``baselines export`` does, every ratio's level and noise learned from the N runs and pooled
across the GPU model's cells (``history.pooling``), not the 3% a single recording stores.

The recording's folder keeps each run's JSON, its log and the history, so an interrupted recording resumes
where it stopped: the runs the history holds count, and only the rest are run.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.cli.values import whole_number
from ampbench.files import paths

DEFAULT_RUNS = 5
DEFAULT_DIR = Path(".ampbench") / "record"
DEFAULT_TESTS = "perf/test_speed.py"
# pytest's own statuses that end the recording: interrupted, internal error, usage error, no tests
STOPPING = {2: "interrupted", 3: "an internal error", 4: "a usage error", 5: "no test collected"}


_runs = whole_number(3, 100, " (a spread needs three runs)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record", help="record a GPU's baseline file from N fresh runs, its tolerances learned from them",
        description="Run the speed cells --runs times, each run a pytest process of its own appending to the "
                    "recording's history (DIR/history.sqlite), then write BASELINE_DIR/<gpu-slug>.json from "
                    "it as `baselines export` does: each cell's level and noise learned from the runs and pooled "
                    "across the GPU model's cells. An interrupted recording resumes: the runs DIR's history "
                    "holds count. Arguments after -- go to every pytest run (e.g. -- --perf-models gpt,mlp).",
        epilog="Exit status: 0 written, 2 a run that stopped the recording (pytest's usage or internal error, "
               "no GPU) or a file that cannot be written; the runs taken so far stay in DIR.")
    p.add_argument("--runs", type=_runs, default=DEFAULT_RUNS, metavar="N",
                   help=f"runs to learn from, 3 to 100 (default: {DEFAULT_RUNS})")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, metavar="DIR",
                   help=f"the recording's folder: its history, each run's JSON and log (default: {DEFAULT_DIR})")
    p.add_argument("--baseline-dir", type=Path, default=paths.BASELINE_DIR, metavar="DIR",
                   help=f"where the file is written (default: {paths.BASELINE_DIR})")
    p.add_argument("--tests", default=DEFAULT_TESTS, metavar="PATH",
                   help=f"the pytest target of each run (default: {DEFAULT_TESTS})")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                   help="arguments added to every pytest run, after --")
    p.set_defaults(handler=command)


def _pytest_command(args: argparse.Namespace, run: int, empty: Path) -> list[str]:
    """One run's pytest: against no baseline file (every level comes from the recording's runs), into the
    recording's history, its JSON beside it; on a GPU, or it fails."""
    extra = [a for a in args.pytest_args if a != "--"]
    return [sys.executable, "-m", "pytest", args.tests, "-p", "no:cacheprovider", "-q", "--perf-require-gpu",
            "--perf-baseline-dir", str(empty), "--perf-history", str(args.dir / "history.sqlite"),
            "--perf-label", f"record-{run}", "--benchmark-json", str(args.dir / f"run-{run}.json"), *extra]


def _recorded(args: argparse.Namespace) -> int:
    """The runs the recording's history has already (0 without one)."""
    store = args.dir / "history.sqlite"
    if not store.exists():
        return 0
    from ampbench.history.store import open_history

    return sum(1 for r in open_history(str(store)).runs() if not r.smoke)


def _outcome(log: Path) -> str:
    """pytest's closing line: '25 passed, 1 warning in 107.11s', else the log's last line."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    closing = [line for line in lines if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b", line)]
    return (closing or lines or ["no output"])[-1].strip("= ")


def command(args: argparse.Namespace) -> int:
    args.dir.mkdir(parents=True, exist_ok=True)
    empty = args.dir / "no-baselines"
    empty.mkdir(exist_ok=True)
    done = _recorded(args)
    if done:
        print(f"ampbench: resuming the recording in {args.dir}: {done} run{'s' * (done != 1)} recorded already")
    for run in range(done + 1, args.runs + 1):
        cmd = _pytest_command(args, run, empty)
        print(f"ampbench: run {run} of {args.runs}: {shlex.join(cmd[1:])}", flush=True)
        start = time.monotonic()
        log = args.dir / f"run-{run}.log"
        with log.open("w") as out:
            status = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ)).returncode
        print(f"ampbench: run {run} of {args.runs}: {_outcome(log)} ({time.monotonic() - start:.0f} s)", flush=True)
        if status in STOPPING or _recorded(args) < run:
            why = STOPPING.get(status, "its run did not reach the history")
            print(f"ampbench: error: run {run} stopped the recording ({why}, pytest exit {status}); see {log}. "
                  f"The {run - 1} run{'s' * (run != 2)} before it stay in {args.dir}: the same command resumes",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
    from ampbench.history.connect import HistoryError
    from ampbench.history.export import write_baselines
    from ampbench.history.store import open_history

    try:
        written = write_baselines(open_history(str(args.dir / "history.sqlite")), None, args.baseline_dir)
    except (HistoryError, OSError) as exc:
        print(f"ampbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path, entries in written:
        print(f"ampbench: {entries} entries learned from {args.runs} runs written to {path}")
    return EXIT_OK
