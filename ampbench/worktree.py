"""The git worktree a bisect (or an A/B run's side at a revision) runs in, under a temporary folder: made
detached at a revision, and removed at the end, on an error, on Ctrl-C and on SIGTERM, so that the user's
checkout (its HEAD, index, working files, branches and worktree list) is as it was. ``git bisect`` keeps its
state (refs/bisect/*, BISECT_LOG) per worktree: it goes with the worktree.

A bisect killed outright (SIGKILL, a machine that went down) cannot remove its worktree. Its folder is
named ``ampbench-bisect-*/tree`` and holds a lock file that its bisect keeps locked while it runs, so the
next bisect in the repository knows a leftover one by its name and its unheld lock, and removes it first.
"""

from __future__ import annotations

import fcntl
import os
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


def repository(repo: Path) -> Path:
    """The top folder of the git repository `repo` lies in. GitError saying so where git is not on PATH,
    `repo` is no folder, or it lies in no repository: each would otherwise surface later as a misleading
    error of some git command."""
    if shutil.which("git") is None:
        raise GitError("git is not on PATH: a bisect runs git (git worktree, git bisect); install git or add "
                       "its folder to PATH")
    if not Path(repo).is_dir():
        raise GitError(f"--repo {repo}: no such folder")
    done = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        said = done.stderr.strip()
        if "not a git repository" in said:
            raise GitError(f"{Path(repo).resolve()} is not inside a git repository (--repo names the repository "
                           "to bisect; default: the current folder's)")
        raise GitError(f"git rev-parse --show-toplevel in {repo}: {said or f'exit status {done.returncode}'}")
    return Path(done.stdout.strip())


def commit_sha(repo: Path, rev: str) -> str:
    """The commit `rev` names in `repo`, as a full sha; GitError naming it where it names none."""
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if not sha:
        raise GitError(f"revision {rev!r} names no commit in {repo}")
    return sha


def subject(repo: Path, sha: str) -> str:
    return git(repo, "log", "-1", "--format=%s", sha)


PREFIX = "ampbench-bisect-"  # the temporary folder's name: a later bisect knows a leftover worktree by it
TREE = "tree"  # the worktree's folder in it
RUNNING_LOCK = "running.lock"  # beside it: locked while its bisect runs, released by the system when that process ends


def _held(lock: Path) -> bool:
    """Whether a running process holds `lock` (a bisect that is still running)."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return False  # no lock file: a bisect killed before it made one
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def _bisect_worktrees(repo: Path) -> list[Path]:
    """The repository's detached worktrees in a bisect's temporary folder (``ampbench-bisect-*/tree``)."""
    found, path, detached = [], None, False
    for line in [*git(repo, "worktree", "list", "--porcelain").splitlines(), ""]:
        if line.startswith("worktree "):
            path, detached = Path(line[len("worktree "):]), False
        elif line == "detached":
            detached = True
        elif not line and path is not None:
            if detached and path.name == TREE and path.parent.name.startswith(PREFIX):
                found.append(path)
            path = None
    return found


def remove_leftovers(repo: Path) -> list[Path]:
    """Remove the worktrees that bisects killed outright left registered in `repo` (with their bisect
    state and temporary folders): those whose folder is gone (``git worktree prune``) and those whose
    bisect no longer holds its lock. A bisect still running keeps its own. The worktrees removed."""
    leftovers = [path for path in _bisect_worktrees(repo) if not _held(path.parent / RUNNING_LOCK)]
    git(repo, "worktree", "prune", check=False)
    for path in leftovers:
        if path.exists():
            git(repo, "worktree", "remove", "--force", "--force", str(path), check=False)
            shutil.rmtree(path.parent, ignore_errors=True)
    git(repo, "worktree", "prune", check=False)
    return leftovers


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where the bisect is, so that it cleans up as on Ctrl-C."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signum}")


class Worktree:
    """A detached worktree of `repo` at `rev` in a temporary folder (`path`), with `scratch` beside it for
    the bisect's own files; ``with`` removes both, whatever ends the block, SIGTERM included."""

    def __init__(self, repo: Path, rev: str):
        self.repo = repository(repo)
        self.rev = rev
        self.root = Path(tempfile.mkdtemp(prefix=PREFIX))
        self.path = self.root / TREE
        self.scratch = self.root / "scratch"
        self.removed: list[Path] = []  # the leftover worktrees of killed bisects, removed on entering
        self._lock: int | None = None
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None

    def __enter__(self) -> "Worktree":
        self._previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            self.scratch.mkdir()
            self._lock = os.open(self.root / RUNNING_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.removed = remove_leftovers(self.repo)
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
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None
            shutil.rmtree(self.root, ignore_errors=True)
        finally:
            signal.signal(signal.SIGINT, interrupted)
            signal.signal(signal.SIGTERM, self._previous if self._previous is not None else previous)
