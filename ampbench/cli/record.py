"""``ampbench baselines record``: a GPU's baseline file with learned tolerances in one job. It runs the speed
cells N times, each run a pytest process of its own into a history of the recording's own (a fresh process
is what a later run is: its own memory placement, kernel choices, compilation), then writes the file from
that history as ``baselines export`` does, every ratio's level and noise learned from the N runs and pooled
across the GPU model's cells (``history.pooling``), not the 3% a single recording stores.

The recording's folder keeps each run's JSON, its log and the history, so an interrupted recording resumes
where it stopped: the runs the history holds count, and only the rest are run. The recorder owns its folder
and its children: a lock keeps a second recorder out of the folder, SIGINT and SIGTERM end the pytest run
under way with its whole process group and leave nothing of that run in the history, and only runs of one
GPU model and software stack count and are learned from (runs of another stack are named and left out).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import sqlite3
import sys
import tempfile
import time
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

from ampbench.children import STOPPED, Signals, Stopped, run_owned
from ampbench.cli.common_args import add_baseline_dir
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.cli.values import whole_number
from ampbench.files import paths

if TYPE_CHECKING:
    from ampbench.history.rows import RunSummary
    from ampbench.history.store import History

DEFAULT_RUNS = 5
DEFAULT_DIR = Path(".ampbench") / "record"
DEFAULT_TESTS = "perf/test_speed.py"
# pytest's own statuses that end the recording: interrupted, internal error, usage error, no tests
STOPPING = {2: "interrupted", 3: "an internal error", 4: "a usage error", 5: "no test collected"}
STORE = "history.sqlite"  # the recording's history, in its folder
LOCK = "record.lock"  # holds the recorder's pid; its flock is what keeps a second recorder out
SHOWN_RUNS = 10  # runs the summary names before it counts the rest


_runs = whole_number(3, 100, " (a spread needs three runs)")


# what each command's help says of it (argparse fills the text to the terminal's width)
_RECORD_ABOUT = """Run the speed cells --runs times, each run a pytest process of its own appending to the
recording's history (DIR/history.sqlite), then write BASELINE_DIR/<gpu-slug>.json from it as `baselines export`
does: each cell's level and noise learned from the runs and pooled across the GPU model's cells. An interrupted
recording resumes: the runs DIR's history holds count. Only runs of the recording's GPU model and software (torch,
CUDA, cuDNN, driver, Triton, torchao, compute capability) count and are learned from: those of the first run this
command makes, or, where DIR holds enough runs already, of its latest run; DIR's other runs are named and left out.
One recorder at a time uses DIR. SIGINT or SIGTERM ends the run under way with its processes, and nothing of that
run is learned. Arguments after -- go to every pytest run (e.g. -- --perf-models gpt,mlp)."""

_RECORD_EXITS = """Exit status: 0 written, 2 a run that stopped the recording (pytest's usage or internal error, no
GPU, another stack than the recording's first run), DIR in use by another recorder or a file that cannot be written,
130 or 143 stopped by SIGINT or SIGTERM; the runs taken so far stay in DIR."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "record", help="record a GPU's baseline file from N fresh runs, its tolerances learned from them",
        description=_RECORD_ABOUT,
        epilog=_RECORD_EXITS)
    p.add_argument("--runs", type=_runs, default=DEFAULT_RUNS, metavar="N",
                   help=f"runs to learn from, 3 to 100 (default: {DEFAULT_RUNS})")
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, metavar="DIR",
                   help=f"the recording's folder: its history, each run's JSON and log (default: {DEFAULT_DIR})")
    add_baseline_dir(p, f"where the file is written (default: {paths.BASELINE_DIR})")
    p.add_argument("--tests", default=DEFAULT_TESTS, metavar="PATH",
                   help=f"the pytest target of each run (default: {DEFAULT_TESTS})")
    p.add_argument("--include-other-runs", action="store_true",
                   help="also count and learn from DIR's runs of the same GPU model on other software (default: "
                        "they are left out); another GPU model's runs never feed this GPU's file")
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS",
                   help="arguments added to every pytest run, after --")
    p.set_defaults(handler=command)


def _pytest_command(args: argparse.Namespace, run: int, empty: Path) -> list[str]:
    """One run's pytest: against no baseline file (every level comes from the recording's runs), into the
    recording's history, its JSON beside it; on a GPU, or it fails."""
    extra = [a for a in args.pytest_args if a != "--"]
    return [sys.executable, "-m", "pytest", args.tests, "-p", "no:cacheprovider", "-q", "--perf-require-gpu",
            "--perf-baseline-dir", str(empty), "--perf-history", str(args.dir / STORE),
            "--perf-label", f"record-{run}", "--benchmark-json", str(args.dir / f"run-{run}.json"), *extra]


def _outcome(log: Path) -> str:
    """pytest's closing line: '25 passed, 1 warning in 107.11s', else the log's last line."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    closing = [line for line in lines if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b", line)]
    return (closing or lines or ["no output"])[-1].strip("= ")


# -- the folder's lock ----------------------------------------------------------------------------------

class _Busy(Exception):
    """Another recorder holds the folder's lock; the text is its pid."""


def hold(directory: Path) -> int:
    """The recording's lock on `directory`: an open descriptor of its lock file, flocked, this process's pid
    written in it. The OS lets go of an flock when its process ends however it ends, so a recorder that
    died never blocks the next. _Busy, with the holder's pid, where another recorder holds it."""
    import fcntl  # POSIX's: imported where a recording starts, not wherever the commands are listed

    fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        if isinstance(error, BlockingIOError):
            raise _Busy(holder or "unknown") from None
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


# -- which runs count -----------------------------------------------------------------------------------

@contextmanager
def _opened(store: Path) -> Iterator[History]:
    """The history at `store`, its connections closed after: none is held while a run appends."""
    from ampbench.history.store import open_history

    history = open_history(str(store))
    try:
        yield history
    finally:
        history.release()


def _read_runs(store: Path) -> list[RunSummary]:
    """Every run of the recording's history, oldest first ([] without one)."""
    if not store.exists():
        return []
    with _opened(store) as history:
        return history.runs()[::-1]


def _kept(runs: int, directory: Path) -> str:
    if not runs:
        return f"No run was recorded before it in {directory}"
    return f"The {runs} run{'s' * (runs != 1)} before it stay in {directory}"


def _software_differences(run: RunSummary, like: RunSummary) -> list[str]:
    from ampbench.history.ingest import RUN_SOFTWARE

    return [f"{key} {run.software.get(key)}, not {like.software.get(key)}" for key in RUN_SOFTWARE
            if str(run.software.get(key)) != str(like.software.get(key))]


def _fits(run: RunSummary, like: RunSummary, include_other: bool) -> bool:
    """Whether `run` counts in a recording whose runs are like `like`'s."""
    return run.gpu == like.gpu and (include_other or not _software_differences(run, like))


def _difference(run: RunSummary, like: RunSummary) -> str:
    if run.gpu != like.gpu:
        return f"ran on {run.gpu}, not {like.gpu}"
    return f"ran on other software ({'; '.join(_software_differences(run, like))})"


def _why_left_out(run: RunSummary, like: RunSummary, store: Path) -> str:
    if run.gpu != like.gpu:
        return (f"{_difference(run, like)}: another GPU model's runs go to its own file (`ampbench baselines "
                f"export --history {store} --gpu {shlex.quote(run.gpu)}`)")
    return f"{_difference(run, like)}: --include-other-runs uses it"


class _Recording:
    """One invocation's recording into --dir, which the caller has locked."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.store = args, args.dir / STORE
        self.running: int | None = None  # the run under way: which of the N
        self.before: set[str] = set()  # the history's run ids as that run began
        self.named: set[str] = set()  # the runs left out that were named already

    def used(self, runs: list[RunSummary], like: RunSummary | None) -> list[RunSummary]:
        if like is None:
            return []
        return [r for r in runs if not r.smoke and _fits(r, like, self.args.include_other_runs)]

    def name_left_out(self, runs: list[RunSummary], like: RunSummary) -> None:
        for run in runs:
            if not run.smoke and run.id not in self.named and not _fits(run, like, self.args.include_other_runs):
                self.named.add(run.id)
                why = _why_left_out(run, like, self.store)
                named = f"{run.label} ({run.id})" if run.label else run.id
                print(f"ampbench: left out: run {named} of {self.args.dir} {why}")

    def record(self, signals: Signals) -> int:
        args = self.args
        empty = args.dir / "no-baselines"
        empty.mkdir(exist_ok=True)
        runs = _read_runs(self.store)
        # until this invocation makes a run, the recording is that of DIR's latest run
        gpu_runs = [r for r in runs if not r.smoke]
        like, made = (gpu_runs[-1] if gpu_runs else None), None
        used = self.used(runs, like)
        if used:
            print(f"ampbench: resuming the recording in {args.dir}: {len(used)} run{'s' * (len(used) != 1)} "
                  f"recorded already")
        if like is not None:
            self.name_left_out(runs, like)
        while len(used) < args.runs:
            step, number = len(used) + 1, len(gpu_runs) + 1  # the number names its files: no run's before
            cmd = _pytest_command(args, number, empty)
            print(f"ampbench: run {step} of {args.runs}: {shlex.join(cmd[1:])}", flush=True)
            start, log = time.monotonic(), args.dir / f"run-{number}.log"
            self.before, self.running = {r.id for r in runs}, step
            status = run_owned(cmd, log, signals)
            self.running = None
            print(f"ampbench: run {step} of {args.runs}: {_outcome(log)} ({time.monotonic() - start:.0f} s)",
                  flush=True)
            runs = _read_runs(self.store)
            gpu_runs = [r for r in runs if not r.smoke]
            new = [r for r in gpu_runs if r.id not in self.before]
            if status in STOPPING or not new:
                why = STOPPING.get(status, "its run did not reach the history")
                print(f"ampbench: error: run {step} stopped the recording ({why}, pytest exit {status}); see {log}. "
                      f"{_kept(step - 1, args.dir)}: the same command resumes",
                      file=sys.stderr)
                return EXIT_BAD_INPUT
            if made is None:  # this invocation's first run: the recording is of its GPU and software
                if like is not None and not _fits(new[-1], like, args.include_other_runs):
                    print(f"ampbench: run {step} ran on another GPU or software than {args.dir}'s runs before it: "
                          "the recording starts over on it (its run 1), and they are left out")
                like = made = new[-1]
                self.name_left_out(runs, like)
            elif not _fits(new[-1], made, args.include_other_runs):
                print(f"ampbench: error: run {step} {_difference(new[-1], made)}: the GPU or software changed during "
                      "the recording. The same command goes on from this run, the runs before it left out",
                      file=sys.stderr)
                return EXIT_BAD_INPUT
            used = self.used(runs, like)
        assert like is not None, "a recording of three runs or more has runs"
        return self.export(runs, used, like.gpu)

    def export(self, runs: list[RunSummary], used: list[RunSummary], gpu: str) -> int:
        from ampbench.history.connect import HistoryError
        from ampbench.history.export import write_baselines

        keep = {r.id for r in used}
        try:
            with _history_of(self.store, [r.id for r in runs if r.id not in keep]) as history:
                written = write_baselines(history, gpu, self.args.baseline_dir)
        except (HistoryError, OSError, sqlite3.Error) as exc:
            print(f"ampbench: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        names = ", ".join(r.label or r.id for r in used[:SHOWN_RUNS])
        more = f" and {len(used) - SHOWN_RUNS} more" if len(used) > SHOWN_RUNS else ""
        for path, entries in written:
            print(f"ampbench: {entries} entries learned from {len(used)} run{'s' * (len(used) != 1)} "
                  f"({names}{more}) written to {path}")
        return EXIT_OK

    def stopped(self, signum: int) -> int:
        """The message and status of a recording ended by `signum`; the run under way, ended already, is
        taken out of the history where its pytest had appended it before it ended."""
        name, args = signal.Signals(signum).name, self.args
        if self.running is None:
            print(f"ampbench: stopped by {name}; the runs recorded stay in {args.dir}: the same command resumes",
                  file=sys.stderr)
            return STOPPED[signum]
        outcome = "nothing of it is learned"
        try:
            partial = [r.id for r in _read_runs(self.store) if r.id not in self.before]
            if partial:
                with _opened(self.store) as history:
                    history.remove(partial)
                outcome += f" (the run it had appended, {', '.join(partial)}, is taken out of {self.store})"
        except Exception as exc:  # the stop is reported whatever the history says
            outcome = f"the run it may have appended could not be taken out of {self.store} ({exc})"
        print(f"ampbench: run {self.running} of {args.runs} stopped by {name}: its pytest was ended and {outcome}. "
              f"{_kept(self.running - 1, args.dir)}: the same command resumes", file=sys.stderr)
        return STOPPED[signum]


@contextmanager
def _history_of(store: Path, leave_out: Sequence[str]) -> Iterator[History]:
    """The recording's history, or where runs are left out a copy of it without them (in DIR, whose disk
    holds the history already): the file is learned from a history as a whole, and DIR keeps every run."""
    if not leave_out:
        with _opened(store) as history:
            yield history
        return
    with tempfile.TemporaryDirectory(prefix="export-", dir=store.parent) as tmp:
        copy = Path(tmp) / STORE
        with closing(sqlite3.connect(store)) as original, closing(sqlite3.connect(copy)) as target:
            original.backup(target)  # a consistent copy, the WAL's pages included
        with _opened(copy) as history:
            history.remove(leave_out)
            yield history


def command(args: argparse.Namespace) -> int:
    from ampbench.history.connect import HistoryError

    try:
        args.dir.mkdir(parents=True, exist_ok=True)
        lock = hold(args.dir)
    except _Busy as busy:
        print(f"ampbench: error: --dir {args.dir} is in use: another `ampbench baselines record` (pid {busy}) is "
              "recording into it; wait for it to end, or give another --dir", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:
        print(f"ampbench: error: --dir {args.dir}: cannot lock it ({error})", file=sys.stderr)
        return EXIT_BAD_INPUT
    recording = _Recording(args)
    try:
        with Signals() as signals:
            try:
                return recording.record(signals)
            except Stopped as stop:
                return recording.stopped(stop.signum)
            except HistoryError as error:
                print(f"ampbench: error: {error}", file=sys.stderr)
                return EXIT_BAD_INPUT
    finally:
        os.close(lock)
