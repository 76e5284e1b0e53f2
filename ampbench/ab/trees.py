"""The two trees an A/B run measures, each a folder of the project's code and the interpreter that runs it:
the working tree (the head by default), a commit checked out in a git worktree in a temporary folder, or the
head's code with another version of a package (``torch==2.11.0``) in a virtual environment of its own. The
worktrees and environments are removed when the run ends, however it ends: the user's checkout is only
read, never checked out or written.
"""

from __future__ import annotations

import re
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from ampbench.environments import Environments
from ampbench.worktree import Worktree, commit_sha, git, repository

WORKING_TREE = "working tree"
# a side named as a package at a version: pip's NAME==VERSION
_PINNED = re.compile(r"^(?P<package>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)$")


@dataclass(frozen=True)
class Tree:
    """One side: the folder its cells run in, the interpreter they run with, what it is in words, and the
    commit its code is at (with whether it has uncommitted changes), as a run's commit_info names it."""

    path: Path
    python: str
    described: str
    commit: str = ""
    dirty: bool = False

    @property
    def commit_info(self) -> dict[str, object]:
        return {"id": self.commit, "dirty": self.dirty}


def side_kind(spec: str | None) -> str:
    """What `spec` names: the working tree (None), a package at a version, or a revision."""
    if spec is None or spec == WORKING_TREE:
        return "working tree"
    return "package" if _PINNED.match(spec) else "revision"


class Trees:
    """The base and head trees named by `base` and `head` (None: the working tree) in the repository at
    `repo`; ``with`` makes them and removes what it made, Ctrl-C and SIGTERM included."""

    def __init__(self, repo: Path, base: str, head: str | None = None, pip_args: list[str] | None = None):
        self.repo = repository(repo)
        self.specs = {"base": base, "head": head}
        self.pip_args = pip_args or []
        self._stack = ExitStack()
        self.sides: dict[str, Tree] = {}

    def __enter__(self) -> "Trees":
        try:
            # a revision is checked first, so that a wrong one costs no worktree
            shas = {side: commit_sha(self.repo, spec) for side, spec in self.specs.items()
                    if side_kind(spec) == "revision" and spec is not None}
            for side, spec in self.specs.items():
                if side_kind(spec) != "package":
                    self.sides[side] = self._revision(shas[side], spec or "") if side in shas else self._working()
            for side, spec in self.specs.items():
                found = _PINNED.match(spec or "")
                if found is not None:
                    self.sides[side] = self._package(found["package"], found["version"])
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _working(self) -> Tree:
        dirty = bool(git(self.repo, "status", "--porcelain", "--untracked-files=no", check=False))
        sha = git(self.repo, "rev-parse", "HEAD", check=False)
        state = f"{sha[:12]} with uncommitted changes" if dirty else sha[:12]
        return Tree(self.repo, sys.executable, f"{WORKING_TREE} ({state})" if state else WORKING_TREE, sha, dirty)

    def _revision(self, sha: str, spec: str) -> Tree:
        tree = self._stack.enter_context(Worktree(self.repo, sha))
        named = f" ({spec})" if not sha.startswith(spec) else ""
        return Tree(tree.path, sys.executable, f"{sha[:12]}{named}", sha)

    def _package(self, package: str, version: str) -> Tree:
        """The head's code (the other side's where the head is the package) with `package` at `version`."""
        other = next((t for t in self.sides.values()), None) or self._working()
        root = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="ampbench-ab-envs-")))
        envs = Environments(root, package, other.path, list(self.pip_args))
        return Tree(other.path, envs.python(version), f"{package}=={version} on {other.described}", other.commit,
                    other.dirty)
