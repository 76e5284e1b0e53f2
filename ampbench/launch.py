"""Starting a torchrun launch from a single-process caller (the pytest process), with a time limit that
no rank can outlive, and the ranks' own output to explain a failure."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# torchrun's --tee prefixes each line a worker prints with "[default<local rank>]:"
_RANK_LINE = re.compile(r"^\[default(\d+)\]:(.*)$")
_ROOT_CAUSE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+)", re.DOTALL)


def torchrun_command(module: str, args: list[str], nproc: int) -> list[str]:
    """``python -m torch.distributed.run`` in this interpreter: --standalone picks a free rendezvous port
    on localhost, so launches of parallel sessions do not collide; --tee 3 copies each rank's stdout and
    stderr into ours with a rank prefix."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--tee=3", "-m", module, *args]


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
        head = (f"timed out after {self.timeout:.0f} s; the launch's process group was killed" if self.timed_out
                else f"exit status {self.returncode} after {self.seconds:.0f} s")
        failed = self.failed_rank()
        ranks = [failed] if failed is not None else list(range(nproc))
        parts = [head]
        for r in ranks:
            tail = self.rank_lines(r)[-lines:]
            parts.append(f"--- rank {r}{' (root cause)' if r == failed else ''}, last lines:\n" + "\n".join(tail))
        if not any(self.rank_lines(r) for r in ranks):  # torchrun itself failed: its own last lines
            parts.append("--- torchrun, last lines:\n" + "\n".join(self.output.splitlines()[-lines:]))
        return "\n".join(parts)


def _kill_group(pgid: int, grace: float = 5.0) -> None:
    """SIGTERM to the whole process group (torchrun forwards it to its workers), SIGKILL to whatever is
    left after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def run_launch(command: list[str], timeout: float, cwd: Path) -> LaunchResult:
    """Run `command` in a new session (its own process group) with this process's environment as it
    is (NCCL_* and every other variable pass through untouched); at `timeout` the whole group is
    killed, and it is killed after a normal exit too, so no rank outlives the call."""
    t0 = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, _ = proc.communicate()
        code = None
    finally:
        _kill_group(proc.pid, grace=0.0)  # a rank that torchrun left behind
    return LaunchResult(code, out or "", time.monotonic() - t0, timeout)
