"""Git repositories made for the bisect's tests (tests/test_bisect.py, tests/test_bisect_resume.py): a step
command that times a planted delay, and a repository whose commit `planted` plants it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# times a planted delay: the speedup of a 2 ms sleep over the same sleep plus the delay delay.txt holds
MEASURE = '''import json, os, pathlib, statistics, time
{import_delay}
if os.environ.get("SIDES_LOG"):  # which tree measured, at which commit: the pairing test reads it
    with open(os.environ["SIDES_LOG"], "a") as log:
        log.write(os.getcwd() + " " + pathlib.Path("note.txt").read_text())
if pathlib.Path("hang").exists():
    time.sleep(120)
if pathlib.Path("broken").exists():
    raise SystemExit("no figure here")
def timed(extra):
    t = time.perf_counter(); time.sleep(0.002 + extra); return time.perf_counter() - t
ratios = sorted(timed(0) / timed(DELAY) for _ in range(7))
kernels = [{{"name": "sleep", "ms": 2.0}}] + ([{{"name": "planted_delay", "ms": DELAY * 1e3}}] if DELAY else [])
print(json.dumps({{"speedup": statistics.median(ratios), "low": ratios[1], "high": ratios[-2], "kernels": kernels}}))
'''
FROM_FILE = 'DELAY = float(pathlib.Path("delay.txt").read_text())'
STEP = f"{sys.executable} measure.py"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def make_repo(path: Path, commits: int, planted: int, files: dict[str, str], plant: dict[str, str]) -> list[str]:
    """A repository of `commits` commits holding `files`, `plant`'s files written at commit `planted`:
    the shas, oldest first."""
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "bisect@example.com")
    _git(path, "config", "user.name", "bisect")
    shas = []
    for i in range(commits):
        for name, text in (files if i == 0 else plant if i == planted else {}).items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        (path / "note.txt").write_text(f"change {i}\n")
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", f"change {i}" + (" (the slow one)" if i == planted else ""))
        shas.append(_git(path, "rev-parse", "HEAD"))
    return shas


def repo_state(repo: Path) -> dict[str, str]:
    """What the bisect must leave as it was: HEAD, the index and working files, the refs, the worktrees."""
    return {what: _git(repo, *args) for what, args in {
        "head": ("rev-parse", "HEAD"), "branch": ("symbolic-ref", "HEAD"), "status": ("status", "--porcelain"),
        "refs": ("for-each-ref",), "worktrees": ("worktree", "list", "--porcelain"),
        "index": ("ls-files", "--stage")}.items()}
