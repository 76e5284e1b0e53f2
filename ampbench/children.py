"""Child processes a command owns: each started in a session of its own and ended with its whole process
group (SIGTERM, then SIGKILL after a grace), and the command's own SIGINT and SIGTERM turned into
`Stopped` while they run, so that no child outlives the command that started it. ``ampbench baselines
record`` runs its pytest children through it; ``ampbench bisect`` and ``ampbench ab`` run theirs as a `Child`,
with a timeout, in an environment whose PYTHONPATH the tree under test leads (`tree_env`)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

GRACE = 5.0  # seconds a group has to end on SIGTERM before SIGKILL
STOP_GRACE = 10.0  # seconds a stopped measurement (a `Child`) has to end on SIGTERM before SIGKILL
TAIL_LINES = 15  # of a failed run's output, quoted where it left no figure
# SIGINT and SIGTERM, with the status a shell reports for a process that signal killed
STOPPED: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Stopped(BaseException):
    """SIGINT or SIGTERM reached the recorder. A BaseException, as KeyboardInterrupt is, so that no
    `except Exception` on its way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Signals:
    """SIGINT and SIGTERM made into Stopped while the recording runs, the handlers before put back after.
    The pytest child runs in a session of its own, so a terminal's Ctrl-C reaches the recorder alone and
    ending the child is the recorder's to do. While a child is being started the signal waits (`held`):
    raised inside Popen, it would leave a child that nothing ends."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._holding = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        if threading.current_thread() is threading.main_thread():  # only the main thread may set handlers
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOPPED}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is not None:
            return  # a second signal while the first one's stop is under way
        self.signum = signum
        if not self._holding:
            raise Stopped(signum)

    @contextmanager
    def held(self) -> Iterator[None]:
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
        if self.signum is not None:
            raise Stopped(self.signum)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a process of it is there, not this user's to signal
        return True
    return True


def end_group(proc: subprocess.Popen, grace: float | None = None) -> None:
    """End `proc` and every process of its group (it leads a session of its own): SIGTERM, then SIGKILL
    to what is left after `grace` seconds (GRACE where None). Its own children (a compile worker, a
    writer it started) would otherwise outlive it, and could still append to a history or hold the device."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + (GRACE if grace is None else grace)
        while proc.poll() is None or group_alive(proc.pid):
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        else:
            return


def run_owned(cmd: Sequence[str], log: Path, signals: Signals, grace: float | None = None) -> int:
    """`cmd`'s exit status, its output in `log`, run in a session of its own; a Stopped ends it with its
    group first (``end_group``)."""
    proc = None
    with log.open("w") as out:
        try:
            with signals.held():
                proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ),
                                        start_new_session=True)
            return proc.wait()
        except Stopped:
            if proc is not None:
                end_group(proc, grace)
            raise


class TimedOut(Exception):
    """A child's process outlived its timeout, and its process group was ended."""

    def __init__(self, timeout: float, output: str, flag: str = "--step-timeout"):
        super().__init__(f"timed out after {timeout:g} s ({flag})")
        self.timeout = timeout
        self.output = output


@dataclass(frozen=True)
class Child:
    """A process a command starts (a bisect's measurement, an A/B run's side), in a session of its own, so
    that ending it ends all of its children too (a shell's commands, pytest's compile workers): at `timeout`
    seconds, where set, or when the process that started it is interrupted, each with `grace` seconds between
    SIGTERM and SIGKILL."""

    timeout: float | None = None
    grace: float = STOP_GRACE
    flag: str = "--step-timeout"  # the option that set the timeout, named where it ends a process

    def run(self, argv: Sequence[str] | str, cwd: Path, env: Mapping[str, str], log: Path,
            shell: bool = False) -> tuple[int, str]:
        """(exit status, its output) of `argv` run in `cwd`; the output is written to `log` as well.
        TimedOut, with the output, where it runs past the timeout."""
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                    shell=shell, start_new_session=True)
            try:
                status = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                end_group(proc, self.grace)
                raise TimedOut(self.timeout or 0.0, log.read_text(encoding="utf-8", errors="replace"),
                               self.flag) from None
            except BaseException:
                end_group(proc, self.grace)
                raise
        return status, log.read_text(encoding="utf-8", errors="replace")


def tree_env(tree: Path, extra_path: Sequence[str] = ()) -> dict[str, str]:
    """The environment a tree's code runs in: the tree's code first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *extra_path, *filter(None, [env.get("PYTHONPATH")])])
    env.pop("PYTEST_ADDOPTS", None)  # the command names every option its runs need
    return env


def tail(text: str) -> str:
    """The last TAIL_LINES lines of a child's output: what a problem quotes of a run that left no figure."""
    return "\n".join(text.rstrip().splitlines()[-TAIL_LINES:])


@dataclass(frozen=True)
class PytestRun:
    """How a pytest child ended: its exit status (None: ended at its timeout) and why it left no run JSON,
    with the tail of its output (None where it wrote one)."""

    status: int | None
    problem: str | None

    @property
    def timed_out(self) -> bool:
        return self.status is None


def run_pytest(child: Child, python: str, tree: Path, args: Sequence[str], after: Sequence[str], run_json: Path,
               log: Path) -> PytestRun:
    """pytest run by `python` in `tree` (its code first on PYTHONPATH) on `args`, with the run history off and
    its run written to `run_json`, then `after` (options that may override those before them): the one way
    a bisect's measurement and an A/B run's side start the suite."""
    run_json.unlink(missing_ok=True)
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, "--perf-history", "off",
            "--benchmark-json", str(run_json), *after]
    try:
        status, output = child.run(argv, tree, tree_env(tree), log)
    except TimedOut as exc:
        return PytestRun(None, f"pytest {exc}; its process group was ended ({log}):\n{tail(exc.output)}")
    if not run_json.exists():
        return PytestRun(status, f"pytest exited with status {status} and wrote no run ({log}):\n{tail(output)}")
    return PytestRun(status, None)
