"""A virtual environment per version of a package (torch, torchvision, torchao, ...), the project installed
there with --no-deps: what ``ampbench bisect --package`` measures at each version and ``ampbench ab`` at a
side named ``torch==2.11.0``.

An environment inherits the packages of the running interpreter (a ``.pth`` file naming its
site-packages, read after the environment's own), so that only the package under test is installed
into it; pip installs the version asked for into the environment, which comes first.
"""

from __future__ import annotations

import site
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

INHERIT_PTH = "ampbench-bisect-inherited.pth"


class InstallError(RuntimeError):
    """pip could not make a version's environment: the message names the version and what pip said."""


@dataclass
class Environments:
    """One virtual environment per version of `package` under `root`, made on first use."""

    root: Path
    package: str
    project: Path
    pip_args: list[str] = field(default_factory=list)  # --find-links DIR, --no-index, --index-url URL
    made: dict[str, str] = field(default_factory=dict)

    def _pip(self, python: str, *args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                               "--disable-pip-version-check", *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise InstallError(f"pip install {' '.join(args)}: exit status {done.returncode}: "
                               + "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:]))

    def python(self, version: str) -> str:
        """The interpreter of `version`'s environment, which holds it and the project."""
        if version in self.made:
            return self.made[version]
        folder = self.root / f"{self.package}-{version}"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True)
        python = str(folder / "bin" / "python")
        own = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
        inherited = [p for p in [*site.getsitepackages(), site.getusersitepackages()] if Path(p).is_dir()]
        Path(own, INHERIT_PTH).write_text("".join(f"{p}\n" for p in inherited), encoding="utf-8")
        self._pip(python, *self.pip_args, f"{self.package}=={version}")
        self._pip(python, "--no-deps", "--no-build-isolation", str(self.project))
        self.made[version] = python
        return python
