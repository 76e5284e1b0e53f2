"""Every file README.md's commands write into the checkout is one git ignores, so that following the README
leaves `git status` clean: a run's JSON (``--benchmark-json``), a report (``-o``), a JUnit file, the
exports. Outputs the README writes to be committed (``docs/``, ``baselines/``) are the exception."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = re.compile(r"(?:^|\s)(?:-o|--output|--benchmark-json|--junit)\s+(?P<path>[^\s#`]+)")
COMMITTED = ("docs/", "baselines/")


def _outputs() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"^```(?:bash|sh|console)?\n(.*?)^```", text, flags=re.M | re.S)
    found = {m["path"] for block in blocks for m in OUTPUT.finditer(block)}
    return sorted(p for p in found if not p.startswith(COMMITTED) and "$" not in p)


def test_the_readme_names_outputs():
    assert {"out.json", "report", "figures.json", "margins.json", "bmf.json"} <= set(_outputs())


@pytest.mark.parametrize("path", _outputs())
def test_each_output_the_readme_writes_is_ignored_by_git(path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("git, or the repository's .git, is missing: the ignore rules cannot be asked")
    # a folder (``-o report``) is ignored where a file in it is: a rule ending in / matches folders only
    asked = [subprocess.run(["git", "check-ignore", "--quiet", "--no-index", p], cwd=ROOT).returncode
             for p in (path, f"{path}/index.html")]
    assert 0 in asked, f"README.md writes {path} into the checkout, and .gitignore does not ignore it"
