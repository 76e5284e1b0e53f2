"""The distributed cells' launches from the pytest process, on one node or several.

On one node a launch is ``torchrun --standalone`` of a worker module (``launch.torchrun_command``). Over
several (``--perf-nnodes``), every node runs the same pytest command, and each launch is one torchrun
c10d rendezvous of one agent per node (``launch.rendezvous_command``), named by the run's id and the
launch's number, so that agents of two launches never meet:

- node 0 runs the cells. Its launches carry their plan (``plan``): the module and arguments its ranks,
  and every other node's, run. Node 0 alone judges, writes the results and keeps the history; after
  its last launching test (or at the end of its session, if it stopped short) it starts one last
  launch whose plan says that there is nothing more.
- every other node runs no test of its own: it starts an agent for the next launch, whatever node 0
  runs in it (a confirming launch too), again and again until that last plan (``follow``), and says
  which launches its ranks took part in and that node 0 holds the results.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ampbench.distributed.launch import (
    RDZV_SECONDS,
    LaunchResult,
    rendezvous_command,
    run_launch,
    torchrun_command,
)
from ampbench.distributed.plan import END, FILES, OUT, PLAN_FILE, plan_document
from ampbench.settings import Nodes

PLAN_MODULE = "ampbench.distributed.plan"
# a follower's limit on one launch: node 0 sets the real one (its ranks time out, and their peers with
# them), so this only ends an agent that node 0's launch left behind
FOLLOW_SECONDS = 4 * 3600.0
# seconds for the last launch, which runs no worker: the rendezvous and the ranks' start
END_SECONDS = RDZV_SECONDS + 120.0
# torchrun's words where an agent never met the others: a launch that did not happen, tried once more
# (a follower's agent may have reached node 0's store of the launch before, in the moment it closed)
_NO_RENDEZVOUS = ("RendezvousConnectionError", "RendezvousClosedError")


@dataclass
class NodeLauncher:
    """Starts a session's launches (node 0's, or a standalone run's), numbering them on several nodes."""

    nodes: Nodes
    root: Path  # the working directory of every launch
    launches: int = 0
    ended: bool = False

    def run(self, module: str, args: list[str], nproc: int, limit: float, out: Path,
            ship: tuple[Path, ...] = (), what: str = "") -> LaunchResult:
        """Launch `module` with `args` on `nproc` ranks per node, killed at `limit` seconds; every rank's
        documents end up in `out`. On several nodes, `out` in `args` stands for each node's own folder,
        and each path of `ship` for a copy of its file on each node."""
        if self.nodes.standalone:
            return run_launch(torchrun_command(module, args, nproc), limit, self.root)
        names = {str(p): p.name for p in ship}
        argv = [OUT if a == str(out) else f"{FILES}/{names[a]}" if a in names else a for a in args]
        plan = plan_document(module, argv, {p.name: p.read_text() for p in ship}, what)
        return self._launch(plan, nproc, limit, out)

    def end(self, nproc: int) -> LaunchResult | None:
        """The last launch of several nodes: its plan sends every other node home. None on one node, or
        where it was sent already."""
        if self.nodes.standalone or self.ended:
            return None
        self.ended = True
        with tempfile.TemporaryDirectory(prefix="ampbench-end-") as tmp:
            return self._launch(END, nproc, END_SECONDS, Path(tmp))

    def _launch(self, plan: dict, nproc: int, limit: float, out: Path) -> LaunchResult:
        out.mkdir(parents=True, exist_ok=True)
        path = out / "plan-node0.json"
        path.write_text(json.dumps(plan))
        assert self.nodes.endpoint is not None, "several nodes rendezvous at an endpoint (plugin.session checks it)"
        args = ["--out", str(out), "--plan", str(path), "--timeout", str(limit)]
        command = rendezvous_command(PLAN_MODULE, args, nproc, self.nodes.count, self.nodes.endpoint,
                                     launch_id(self.nodes, self.launches), hosts_store=True)
        self.launches += 1
        return run_launch(command, limit, self.root)


def launch_id(nodes: Nodes, number: int) -> str:
    """The rendezvous id of a run's launch `number`: the same on every node."""
    return f"{nodes.rdzv_id}-{number}"


@dataclass(frozen=True)
class Followed:
    """One launch of node 0's that a follower's ranks took part in."""

    number: int
    what: str
    result: LaunchResult


@dataclass
class Following:
    """What a follower did: the launches it followed, and why it stopped short where it did."""

    launches: list[Followed] = field(default_factory=list)
    failed: str | None = None  # why no more launches could be followed; None: node 0 said it was done

    @property
    def ok(self) -> bool:
        return self.failed is None and all(f.result.ok for f in self.launches)


def follow(nodes: Nodes, nproc: int, root: Path, base: Path, say: Callable[[str], None],
           tries: int = 2) -> Following:
    """Run this node's ranks of node 0's launches, one after the other, until node 0's last plan;
    `say` gets a line per launch."""
    assert nodes.endpoint is not None, "several nodes rendezvous at an endpoint (plugin.session checks it)"
    done = Following()
    number = 0
    while True:
        out = base / f"launch{number}"
        command = rendezvous_command(PLAN_MODULE, ["--out", str(out), "--timeout", str(RDZV_SECONDS)], nproc,
                                     nodes.count, nodes.endpoint, launch_id(nodes, number), hosts_store=False)
        for _ in range(tries):
            result = run_launch(command, FOLLOW_SECONDS, root)
            plan = _plan_of(out)
            if plan is not None or not any(word in result.output for word in _NO_RENDEZVOUS):
                break
        if plan is None:
            done.failed = f"launch {number} got no plan from node 0: {result.explain(nproc)}"
            return done
        if plan["end"]:
            return done
        done.launches.append(Followed(number, plan["what"] or plan["module"], result))
        state = "done" if result.ok else f"failed ({result.explain(nproc, lines=5)})"
        say(f"launch {number}: {plan['what'] or plan['module']}: {state} in {result.seconds:.0f} s")
        number += 1


def _plan_of(out: Path) -> dict | None:
    path = out / PLAN_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
