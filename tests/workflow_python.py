"""The machine a workflow's steps run on in the tests, as a self-hosted runner's is: a non-root user, and a
system Python that is externally managed (PEP 668), without the network.

- ``runner_user``: the user the steps run as: this one where it is not root, else a non-root user with a
  login shell from the password database.
- ``pep668_python``: a Python installation of its own (not a venv, where pip ignores the marker), made
  of a copy of a system interpreter of the test's Python version that the user can run, its standard
  library linked in, an EXTERNALLY-MANAGED marker beside it, and the test environment's packages as its
  site packages (a `.pth`), as a runner's Python holds torch. A venv made from it with
  --system-site-packages sees them, as the workflows' venvs see the runner's CUDA build of torch.
- ``wheelhouse``: wheels of the installed setuptools (a build's) and SQLAlchemy (with what it requires),
  packed from this environment, for `pip install` with PIP_NO_INDEX and PIP_FIND_LINKS: the workflows'
  installs run as they are written, from these wheels instead of the package index (`install --upgrade
  pip` finds no newer pip among them and keeps the venv's).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import pwd
import shutil
import site
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

MARKER_TEXT = "[externally-managed]\nError=This Python is the system's: make a venv (python3 -m venv) to install.\n"
_PROBE = ("import importlib.util, json, site, sys, sysconfig; print(json.dumps({'venv': sys.prefix != sys.base_prefix,"
          " 'version': list(sys.version_info[:2]), 'prefix': sys.base_prefix,"
          " 'stdlib': sysconfig.get_paths()['stdlib'], 'platstdlib': sysconfig.get_paths()['platstdlib'],"
          " 'site': site.getsitepackages(),"
          " 'ensurepip': importlib.util.find_spec('ensurepip') is not None}))")
_SKIPPED = {"site-packages", "dist-packages", "EXTERNALLY-MANAGED", "__pycache__"}


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def run(self, args: list[str], **kwargs) -> subprocess.CompletedProcess:
        """`args` as this user (switched to where this process is root), with its output as text."""
        if os.geteuid() == 0 and self.uid != 0:
            kwargs.update(user=self.uid, group=self.gid, extra_groups=[])
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        return subprocess.run(args, text=True, stdin=subprocess.DEVNULL, **kwargs)

    def own(self, path: Path) -> None:
        """Hand `path` and everything under it to this user, as the runner's files are its user's."""
        if os.geteuid() != 0:
            return
        os.lchown(path, self.uid, self.gid)
        for folder, dirs, files in os.walk(path):
            for name in (folder, *(os.path.join(folder, entry) for entry in dirs + files)):
                os.lchown(name, self.uid, self.gid)


def runner_user() -> User | str:
    """The non-root user the steps run as, or why there is none."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return User(entry.pw_name, entry.pw_uid, entry.pw_gid)
    for entry in sorted(pwd.getpwall(), key=lambda entry: entry.pw_uid):
        if 1000 <= entry.pw_uid < 65534 and not entry.pw_shell.endswith(("nologin", "false")):
            return User(entry.pw_name, entry.pw_uid, entry.pw_gid)
    return ("this machine has no non-root user with a login shell (uid 1000 or above in the password database): "
            "the workflows' steps are tested only as a runner runs them, as such a user")


def _probe(user: User, python: str | Path) -> dict | None:
    try:
        done = user.run([str(python), "-I", "-c", _PROBE], timeout=60)
    except OSError:  # not executable by the user, or its folder not reachable
        return None
    return json.loads(done.stdout) if done.returncode == 0 else None


def _interpreters() -> list[Path]:
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    found = [Path(getattr(sys, "_base_executable", sys.executable)), Path(sys.base_prefix, "bin", version),
             Path("/usr/bin", version), Path("/usr/local/bin", version)]
    on_path = shutil.which(version)
    return list(dict.fromkeys(path.resolve() for path in (*found, *([Path(on_path)] if on_path else []))
                              if path.exists()))


def pep668_python(folder: Path, user: User) -> Path | str:
    """The bin folder of an externally managed Python installation built in `folder`, or why none can be:
    no system interpreter of this Python version that `user` can run, with ensurepip (for `-m venv`)."""
    tried = []
    for interpreter in _interpreters():
        found = _probe(user, interpreter)
        why = (f"not runnable as {user.name}" if not found else "a venv" if found["venv"]
               else f"Python {found['version']}" if found["version"] != list(sys.version_info[:2])
               else "no ensurepip (for `python3 -m venv`)" if not found["ensurepip"] else "")
        libraries = [Path(path) for path in dict.fromkeys((found["stdlib"], found["platstdlib"]))] if found else []
        if found and not why and not all(library.is_relative_to(found["prefix"]) for library in libraries):
            why = f"its standard library lies outside its prefix {found['prefix']}"
        if why or not found:
            tried.append(f"{interpreter}: {why}")
            continue
        prefix = folder / "python"
        shutil.rmtree(prefix, ignore_errors=True)
        (prefix / "bin").mkdir(parents=True)
        binary = prefix / "bin" / interpreter.name
        shutil.copy2(interpreter, binary)  # copied, not linked: the interpreter finds its prefix from its own path
        for alias in {"python3", "python"} - {binary.name}:
            (prefix / "bin" / alias).symlink_to(binary.name)
        for library in libraries:
            mirror = prefix / library.relative_to(found["prefix"])
            mirror.mkdir(parents=True, exist_ok=True)
            for entry in library.iterdir():
                if entry.name not in _SKIPPED and not (mirror / entry.name).exists():
                    (mirror / entry.name).symlink_to(entry)
        own = _probe(user, binary)
        if not own or Path(own["prefix"]) != prefix or not own["site"]:
            tried.append(f"{interpreter}: its copy does not find its standard library beside it")
            continue
        Path(own["stdlib"], "EXTERNALLY-MANAGED").write_text(MARKER_TEXT)
        packages = Path(own["site"][0])
        packages.mkdir(parents=True, exist_ok=True)
        (packages / "test-environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        return prefix / "bin"
    return (f"no system Python {sys.version_info.major}.{sys.version_info.minor} with ensurepip that "
            f"{user.name} can run, to stand in for the runner's: " + "; ".join(tried))


def _closure(names: tuple[str, ...]) -> list[importlib.metadata.Distribution]:
    """The installed distributions `names` name, with every one they require, transitively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        dist = importlib.metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _pack(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    files = [file for file in dist.files or [] if file.parts[0] != ".." and "__pycache__" not in file.parts]
    info = next(file.parts[0] for file in files if file.parts[0].endswith(".dist-info"))
    tags = [line.split(":", 1)[1].strip() for line in (dist.read_text("WHEEL") or "").splitlines()
            if line.startswith("Tag:")]
    wheel = folder / f"{info.removesuffix('.dist-info')}-{tags[0]}.whl"
    records = []
    with zipfile.ZipFile(wheel, "w") as archive:
        for file in files:
            path = Path(str(dist.locate_file(file)))
            if file.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json") or not path.is_file():
                continue
            data = path.read_bytes()
            archive.writestr(file.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append(f"{file.as_posix()},sha256={digest},{len(data)}")
        archive.writestr(f"{info}/RECORD", "\n".join([*records, f"{info}/RECORD,,"]) + "\n")
    return wheel


def wheelhouse(folder: Path, names: tuple[str, ...] = ("setuptools", "sqlalchemy")) -> Path:
    """`folder` holding a wheel of each installed distribution `names` need, packed from this environment."""
    folder.mkdir(parents=True, exist_ok=True)
    for dist in _closure(names):
        _pack(dist, folder)
    return folder
