"""Fixtures the harness's own tests share."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


@pytest.fixture
def read_only_mount(tmp_path):
    """A folder remounted read-only (tmpfs), where this user may mount; else the test skips."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a read-only folder needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "none", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("this machine does not let root mount a tmpfs")
    yield folder
    subprocess.run(["umount", "--lazy", str(folder)], check=True)  # the commands leave their pools to exit
