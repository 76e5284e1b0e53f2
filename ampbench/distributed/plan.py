"""One rank of a launch over several nodes, run by torchrun's c10d rendezvous::

    torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint HOST:PORT ... -m ampbench.distributed.plan \\
        --out DIR [--plan FILE]

Node 0's pytest decides what every launch runs (its cells, a confirming launch, the end of the run); the
other nodes' pytest processes start their agents without knowing it (``ampbench.distributed.nodes``). So
a launch carries its plan: node 0's first rank puts the plan FILE (a worker module, its arguments, the
files it reads) into the store torchrun made for this launch's ranks, every rank takes it from there,
writes its files into its own node's DIR and runs the module as a standalone launch would, its own
process group and all. Paths in the arguments name node 0's folders; ``{out}`` and ``{files}`` in them
become this node's DIR and the folder of the plan's files.

A worker writes each rank's documents (``<folder>/rank{R}.json``) on that rank's node; node 0 judges
them all, so afterwards every rank puts its documents into the store and node 0's first rank writes
every rank's into node 0's DIR. The first rank of each node writes ``DIR/plan.json``: what the node ran.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

PLAN_KEY = "ampbench/plan"
DOCS_KEY = "ampbench/docs/"  # + rank
PLAN_FILE = "plan.json"
OUT, FILES = "{out}", "{files}"


def plan_document(module: str, argv: list[str], files: dict[str, str] | None = None, what: str = "") -> dict:
    """A launch's plan: the worker module, its arguments (``{out}``, ``{files}`` standing for the node's
    folders), the files it reads by name, and what it runs, in words."""
    return {"module": module, "argv": argv, "files": files or {}, "what": what, "end": False}


END: dict[str, object] = {"module": None, "argv": [], "files": {}, "what": "the end of node 0's launches", "end": True}


def _store(timeout: float):
    """The store torchrun serves this launch's ranks (MASTER_ADDR, MASTER_PORT), as a client."""
    import torch.distributed as dist

    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=timeout))


def same_share(env: os._Environ | dict) -> str | None:
    """Why the nodes' ranks do not add up to nodes x ranks per node (each node runs world/nodes ranks,
    and the cells' figures assume it), or None."""
    world, local, nodes = (int(env[k]) for k in ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE"))
    if world == local * nodes:
        return None
    return f"{nodes} nodes run {world} ranks in all, this one {local}: every node must run as many"


def node_argv(argv: list[str], out: Path, files: Path) -> list[str]:
    """The plan's arguments on this node: its folders in place of ``{out}`` and ``{files}``."""
    return [a.replace(OUT, str(out)).replace(FILES, str(files)) for a in argv]


def rank_documents(out: Path, rank: int) -> dict[str, str]:
    """This rank's documents under `out`, by path relative to it."""
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob(f"rank{rank}.json"))}


def collect(store, out: Path, world: int) -> None:
    """Every rank's documents from the store into `out` (node 0's first rank)."""
    for r in range(world):
        for rel, text in json.loads(store.get(f"{DOCS_KEY}{r}")).items():
            path = out / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def run(args: argparse.Namespace) -> int:
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    store = _store(args.timeout)
    if args.plan is not None and local == 0:
        store.set(PLAN_KEY, args.plan.read_text())
    plan = json.loads(store.get(PLAN_KEY))
    args.out.mkdir(parents=True, exist_ok=True)
    if local == 0:
        (args.out / PLAN_FILE).write_text(json.dumps(plan))
    if plan["end"]:
        return 0
    why = same_share(os.environ)
    if why:
        raise RuntimeError(why)
    files = args.out / ".plan" / f"rank{rank}"  # a folder per rank: no two ranks write one file
    files.mkdir(parents=True, exist_ok=True)
    for name, text in plan["files"].items():
        (files / name).write_text(text)
    code = importlib.import_module(plan["module"]).main(node_argv(plan["argv"], args.out, files))
    store.set(f"{DOCS_KEY}{rank}", json.dumps(rank_documents(args.out, rank)))
    if args.plan is not None and local == 0:
        collect(store, args.out, world)
    return code or 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ampbench.distributed.plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="this node's folder for the launch's documents")
    p.add_argument("--plan", type=Path, default=None,
                   help="node 0's plan (JSON); the other nodes take it from the store")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds a rank waits for the plan, and node 0 for every rank's documents")
    args = p.parse_args(argv)
    try:
        return run(args)
    except BaseException:
        from ampbench.distributed.variants import exit_failed_rank  # torch and the zoo: only where needed

        exit_failed_rank()


if __name__ == "__main__":
    sys.exit(main())
