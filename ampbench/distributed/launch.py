"""Starting a torchrun launch from a single-process caller (the pytest process), with a time limit that
no rank can outlive, and the ranks' own output to explain a failure; and the plugins every rank loads."""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ampbench.distributed.processes import alive, stat_fields

# torchrun's --tee prefixes each line a worker prints with "[default<local rank>]:"
_RANK_LINE = re.compile(r"^\[default(\d+)\]:(.*)$")
_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+)", re.DOTALL)
_CPP_FRAME = re.compile(r"^\s*frame #\d+:")


# Modules named here (comma-separated) are imported by every rank before it builds anything, and their
# ``worker_configure()`` called: how a pytest plugin of the launching session (``ampbench.slowdown``)
# reaches the ranks, processes of their own that inherit only the environment.
WORKER_PLUGINS_ENV = "AMPBENCH_WORKER_PLUGINS"


def worker_plugins() -> list[str]:
    """The module names WORKER_PLUGINS_ENV holds, in order."""
    return [n.strip() for n in os.environ.get(WORKER_PLUGINS_ENV, "").split(",") if n.strip()]


# what the worker plugins' ``worker_configure()`` returned: an object with ``applied`` (what it changed in
# the steps since it was last cleared, e.g. ``ampbench.slowdown``'s injected fraction) is asked per cell
_CONFIGURED: list = []


def load_worker_plugins() -> list[str]:
    """Import the modules WORKER_PLUGINS_ENV names and call each one's ``worker_configure()``; their names."""
    names = worker_plugins()
    for name in names:
        _CONFIGURED.append(importlib.import_module(name).worker_configure())
    return names


def injected(clear: bool = False) -> float | str | None:
    """What a worker plugin injected into this rank's steps (``applied``) since the last clear; `clear`
    starts anew (before a cell). A rank's document carries it: a slowdown on one node's ranks alone is
    named in node 0's record of the cell, so that no history counts that run as the cell's noise."""
    found = next((a for c in _CONFIGURED if (a := getattr(c, "applied", None)) is not None), None)
    if clear:
        for c in _CONFIGURED:
            if hasattr(c, "applied"):
                c.applied = None
    return found


def torchrun_command(module: str, args: list[str], nproc: int) -> list[str]:
    """``python -m torch.distributed.run`` in this interpreter: --standalone picks a free rendezvous port
    on localhost, so launches of parallel sessions do not collide; --tee 3 copies each rank's stdout and
    stderr into ours with a rank prefix."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--tee=3", "-m", module, *args]


# seconds a node's agent waits for the other nodes' at a launch's start (torchrun's join_timeout, and the
# c10d store's read_timeout, which bounds a follower's wait for node 0's store): node 0 may spend a while
# between two launches (judging, tests that launch nothing)
RDZV_SECONDS = 1800


def rendezvous_command(module: str, args: list[str], nproc: int, nnodes: int, endpoint: str, run_id: str,
                       hosts_store: bool) -> list[str]:
    """torchrun through its c10d rendezvous: `nnodes` agents, one per node, meet at `endpoint`, where the
    agent of `hosts_store` (node 0's) serves the store; every other agent is its client, even on the same
    machine (two agents that both tried to host it would race for the port). `run_id` names this one
    launch, so that no agent of another joins it. No restarts: a failed rank fails the launch."""
    conf = f"is_host={int(hosts_store)},join_timeout={RDZV_SECONDS},read_timeout={RDZV_SECONDS}"
    return [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}", f"--rdzv-conf={conf}",
            "--max-restarts=0", "--tee=3", "-m", module, *args]


@dataclass(frozen=True)
class LaunchResult:
    returncode: int | None  # None: killed at the time limit
    output: str
    seconds: float
    timeout: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def rank_lines(self, rank: int) -> list[str]:
        return [m.group(2) for m in map(_RANK_LINE.match, self.output.splitlines()) if m and int(m.group(1)) == rank]

    def failed_rank(self) -> int | None:
        """The rank torchrun names as the root cause of a failure, if it named one."""
        m = _ROOT_CAUSE.search(self.output)
        return int(m.group(1)) if m else None

    def explain(self, nproc: int, lines: int = 15) -> str:
        """What went wrong, with the last lines of the failing rank (every rank's after a hang)."""
        head = (f"timed out after {self.timeout:.0f} s; the launch and its ranks were killed" if self.timed_out
                else f"exit status {self.returncode} after {self.seconds:.0f} s")
        failed = self.failed_rank()
        ranks = [failed] if failed is not None else list(range(nproc))
        parts = [head]
        for r in ranks:
            # without the frames of C++ stack traces: NCCL's watchdog and CUDA errors print a dozen or
            # more after their message, which would push the message itself out of the last lines
            tail = [line for line in self.rank_lines(r) if not _CPP_FRAME.match(line)][-lines:]
            parts.append(f"--- rank {r}{' (root cause)' if r == failed else ''}, last lines:\n" + "\n".join(tail))
        if not any(self.rank_lines(r) for r in ranks):  # torchrun itself failed: its own last lines
            parts.append("--- torchrun, last lines:\n" + "\n".join(self.output.splitlines()[-lines:]))
        return "\n".join(parts)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        fields = stat_fields(int(entry.name))
        if fields and len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _kill_tree(pid: int, grace: float = 5.0) -> None:
    """SIGTERM to the process group of `pid` and of every process below it, SIGKILL to whatever is left
    after `grace` seconds. torchrun starts each rank in a session of its own, so killing torchrun's
    group alone leaves a rank that is slow to die (a CUDA context tearing down, SIGTERM ignored)
    running for ever once torchrun is gone: the ranks are found while torchrun still lives."""
    procs = [pid, *_descendants(pid)]
    groups = set()
    for p in procs:
        try:
            groups.add(os.getpgid(p))
        except ProcessLookupError:
            pass
    groups.discard(os.getpgrp())  # never this process's own group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        for send, target in [*((os.killpg, g) for g in groups), *((os.kill, p) for p in procs)]:
            try:
                send(target, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while any(map(alive, procs)) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not any(map(alive, procs)):
            return


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_launch(command: list[str], timeout: float, cwd: Path) -> LaunchResult:
    """Run `command` in a new session (its own process group) with this process's environment as it
    is (NCCL_* and every other variable pass through untouched); at `timeout` it is killed with every
    process below it, and its group is killed after a normal exit too, so no rank outlives the call."""
    t0 = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    code: int | None = None
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)  # before torchrun is reaped: its ranks are found below it only while it lives
        out, _ = proc.communicate()
    finally:
        if proc.returncode is None:  # interrupted: nothing may outlive the call either
            _kill_tree(proc.pid, grace=0.0)
        else:
            _kill_group(proc.pid)  # whatever torchrun left in its own group
    return LaunchResult(code, out or "", time.monotonic() - t0, timeout)
