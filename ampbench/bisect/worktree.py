"""The git worktree a bisect runs in, under a temporary folder: made detached at a revision, and removed
at the end, on an error, on Ctrl-C and on SIGTERM, so that the user's checkout (its HEAD, index, working
files, branches and worktree list) is as it was. ``git bisect`` keeps its state (refs/bisect/*,
BISECT_LOG) per worktree: it goes with the worktree."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any, Callable


class GitError(RuntimeError):
    """A git command the bisect needs failed; the message names it and what git said."""


def git(repo: Path, *args: str, check: bool = True) -> str:
    """`git args` in `repo`: its standard output, stripped; GitError where it fails and `check`."""
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {repo}: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout.strip()


def commit_sha(repo: Path, rev: str) -> str:
    """The commit `rev` names in `repo`, as a full sha; GitError naming it where it names none."""
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not sha:
        raise GitError(f"revision {rev!r} names no commit in {repo}")
    return sha


def subject(repo: Path, sha: str) -> str:
    return git(repo, "log", "-1", "--format=%s", sha)


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where the bisect is, so that it cleans up as on Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signum}")


class Worktree:
    """A detached worktree of `repo` at `rev` in a temporary folder (`path`), with `scratch` beside it for
    the bisect's own files; ``with`` removes both, whatever ends the block, SIGTERM included."""

    def __init__(self, repo: Path, rev: str):
        self.repo = Path(git(Path(repo), "rev-parse", "--show-toplevel"))
        self.rev = rev
        self.root = Path(tempfile.mkdtemp(prefix="ampbench-bisect-"))
        self.path = self.root / "tree"
        self.scratch = self.root / "scratch"
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> "Worktree":
        self._previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            self.scratch.mkdir()
            git(self.repo, "worktree", "add", "--detach", str(self.path), self.rev)
        except BaseException:
            self.close()
            raise
        return self

    def checkout(self, sha: str) -> None:
        git(self.path, "checkout", "--quiet", "--detach", sha)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove the worktree, its bisect state and the temporary folder; put SIGTERM's handler back. A
        signal during the removal waits until it is done."""
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        interrupted = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if self.path.exists():
                git(self.path, "bisect", "reset", check=False)
                git(self.repo, "worktree", "remove", "--force", str(self.path), check=False)
            git(self.repo, "worktree", "prune", check=False)
            shutil.rmtree(self.root, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, interrupted)
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else previous)
