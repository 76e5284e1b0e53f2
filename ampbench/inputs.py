"""Reading a file a user named: one-line problems that name what is wrong with it, never an errno
dump or a traceback. Importable without torch or pytest."""

from __future__ import annotations

from pathlib import Path


class UnreadableFile(ValueError):
    """A file that cannot be read as text; ``problem`` completes "<path>: ..."."""

    def __init__(self, path: Path | str, problem: str):
        self.path, self.problem = Path(path), problem
        super().__init__(f"{path}: {problem}")


def read_text(path: Path | str, what: str, empty_means: str | None = None) -> str:
    """The UTF-8 text of `path`; UnreadableFile where it is missing, a directory, unreadable, not
    UTF-8 text or empty. `what` says what the file should have been ("a baseline file"), `empty_means`
    what an empty one says about how it came about, where that is known."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UnreadableFile(path, "no such file") from None
    except IsADirectoryError:
        raise UnreadableFile(path, f"is a directory; give {what}") from None
    except OSError as exc:
        raise UnreadableFile(path, f"cannot be read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UnreadableFile(path, f"is not UTF-8 text (byte {exc.start}), so not {what}") from None
    if not text.strip():
        raise UnreadableFile(path, f"is empty; {empty_means}" if empty_means else f"is empty, so not {what}")
    return text
