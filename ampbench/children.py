"""Child processes a command owns: each started in a session of its own and ended with its whole process
group (SIGTERM, then SIGKILL after a grace), and the command's own SIGINT and SIGTERM turned into
`Stopped` while they run, so that no child outlives the command that started it. ``ampbench baselines
record`` runs its pytest children through it; ``ampbench bisect`` ends its own (``bisect.measure.stop``)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

GRACE = 5.0  # seconds a group has to end on SIGTERM before SIGKILL
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
