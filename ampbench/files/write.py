"""Writing a file the suite or the ``ampbench`` command produces: atomically (a temp file in the same
folder, fsync, rename), through a symlink to its real file, keeping an existing file's mode; and, before
minutes of measuring, why a path could not be written. Reading a file a user named is ``files.read``."""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from ampbench.files.read import special_kind


def _default_mode() -> int:
    # os.umask can only be read by setting it; set it straight back
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomic(path: Path, document: dict) -> None:
    """Write `document` as JSON to `path` atomically (``write_text_atomic``)."""
    write_text_atomic(path, json.dumps(document, indent=1, sort_keys=False) + "\n")


class PlainOSError(OSError):
    """An OSError whose text is a plain sentence already, completing "<path> ..."."""


# what stops a path from being written, by errno, completing "<path> ..."
_PLAIN: dict[int | None, str] = {errno.EROFS: "cannot be written: it is on a read-only file system",
          errno.EACCES: "cannot be written: this user may not write there",
          errno.EPERM: "cannot be written: this user may not write there",
          errno.EISDIR: "is a directory; give a file's path",
          errno.ENOSPC: "cannot be written: the disk is full",
          errno.EDQUOT: "cannot be written: the disk quota is used up",
          errno.ENAMETOOLONG: "cannot be written: its name is too long for its file system",
          errno.ENOENT: "cannot be written: its folder does not exist"}


def plain_problem(exc: OSError, path: Path | str) -> str:
    """Why `path` could not be written, in a sentence completing "<path> ...", from `exc`, raised writing it,
    a temp file beside it or a folder above it: never errno's own wording."""
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        blocker = next((p for p in Path(path).absolute().parents if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"cannot be written: {blocker} is a file, where a folder is needed"
    return _PLAIN.get(exc.errno, f"cannot be written ({(exc.strerror or str(exc)).lower()})")


def write_error(exc: OSError, path: Path | str) -> OSError:
    """`exc` as the OSError of writing `path` itself (not of a temp file beside it), in plain words
    (``plain_problem``); an error that carries no errno is already a sentence, and is kept."""
    if exc.errno is None or isinstance(exc, PlainOSError):
        return exc
    return PlainOSError(exc.errno, plain_problem(exc, path), str(path))


def described(exc: OSError) -> str:
    """One line of an OSError of writing: '<path>: <plain problem>'."""
    path = exc.filename2 or exc.filename
    if path is None or exc.errno is None:
        return str(exc)
    return f"{path}: {exc.strerror if isinstance(exc, PlainOSError) else plain_problem(exc, path)}"


def write_text_atomic(path: Path, text: str) -> None:
    """``_write_text_atomic``; an OSError names `path` as given, in plain words (``write_error``)."""
    try:
        _write_text_atomic(path, text)
    except OSError as exc:
        raise write_error(exc, path) from None


# how old a writer's temp file beside its target must be to be taken for one a killed writer left: writing
# a file takes seconds; a writer an hour into one is gone
STALE_TEMP_S = 3600.0


def remove_stale_temps(path: Path, now: float | None = None) -> list[Path]:
    """Remove the temp files a writer of `path` killed mid-write left beside it ('.<name>.XXXXXXXX.tmp', as
    ``write_text_atomic`` names them, full-size and never read), where older than STALE_TEMP_S; those
    removed. A younger one may be another writer's, still writing."""
    pattern = re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}\.tmp")
    now = time.time() if now is None else now
    removed: list[Path] = []
    try:
        candidates = [p for p in path.parent.iterdir() if pattern.fullmatch(p.name)]
    except OSError:
        return removed
    for stale in candidates:
        try:
            if now - stale.lstat().st_mtime > STALE_TEMP_S and stat.S_ISREG(stale.lstat().st_mode):
                stale.unlink()
                removed.append(stale)
        except OSError:  # gone already, or not ours to remove
            continue
    return removed


def _write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder, fsync and rename, keeping an
    existing file's mode and, where permitted, its owner and group (mkstemp makes the temp file 0600);
    a new file gets the mode open() would give it under the umask. A symlink is followed to its real
    file, which is written; the link stays a link (renaming onto it would replace the link and leave
    the real file as it was)."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        before = path.stat()
    except FileNotFoundError:
        before = None
    kind = special_kind(before.st_mode) if before is not None else None
    if kind is not None:  # a rename would put a file in its place: a device node, a FIFO someone reads
        raise PlainOSError(errno.EISDIR if kind == "a directory" else errno.EEXIST,
                           _PLAIN[errno.EISDIR] if kind == "a directory" else f"is {kind}, not a regular file",
                           str(path))
    remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), stat.S_IMODE(before.st_mode) if before else _default_mode())
            if before is not None and (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                try:
                    os.fchown(f.fileno(), before.st_uid, before.st_gid)
                except PermissionError:  # only root may give a file away; the writer then owns it
                    pass
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append_text(path: Path | str, text: str) -> None:
    """Append `text` to `path` (made where missing) in one write, so that a reader of the file (a CI job's
    step summary) gets all of it or nothing: where the disk fills part-way, the part appended is cut off
    again. An OSError names `path` in plain words (``write_error``)."""
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            start, written = os.fstat(fd).st_size, 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
            except BaseException:
                if written and stat.S_ISREG(os.fstat(fd).st_mode):
                    os.ftruncate(fd, start)  # no half a table: the file as it was before
                raise
        finally:
            os.close(fd)
    except OSError as exc:
        raise write_error(exc, path) from None


def unwritable_reason(path: Path, make_parents: bool = True) -> str | None:
    """Why a file cannot be written at `path`, or None: it must be no directory or other special file,
    not read-only, and a file must be creatable in its folder (probed: os.access says yes to root on a
    read-only mount). `make_parents`: a missing folder is made (as ``write_atomic`` does), so the
    nearest existing parent is probed; else a missing folder is the reason."""
    path = Path(os.path.realpath(path))  # where the write goes: a symlink's real file
    if path.exists():
        kind = special_kind(path.stat().st_mode)
        if kind is not None:
            return f"{path} is {kind}, not a file"
        if not os.access(path, os.W_OK):
            return f"{path} is not writable"
    folder = path.parent
    if not make_parents and not folder.exists():
        return f"folder {folder} does not exist"
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=".ampbench-probe.", dir=folder)
    except OSError as exc:
        return f"cannot create a file in {folder}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def same_file(output: Path, source: Path) -> bool:
    """Whether writing `output` would replace `source`: the same path, a link to it, or a hard link (the
    same inode); a missing file is compared by its real path."""
    try:
        return os.path.samefile(output, source)
    except OSError:
        return os.path.realpath(output) == os.path.realpath(source)
