"""The ``ampbench`` command's entry point: its arguments parsed (``args``), the subcommand run by the
handler its parser set, and what ends a command early (an unusable file, a closed pipe, a path that
cannot be written) turned into its exit status (``exits``)."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from ampbench.baselines.file import BaselineError
from ampbench.cli.args import build_parser
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_PIPE_CLOSED
from ampbench.files.write import PlainOSError, described, plain_problem
from ampbench.history.connect import HistoryError
from ampbench.report import RunError
from ampbench.report.compare import CompareError


def main(argv: Sequence[str] | None = None) -> int:
    _replace_unwritable()
    args = build_parser().parse_args(argv)
    try:
        status = args.handler(args)  # set by the subcommand's parser (``args.COMMAND_MODULES``)
        sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback-like complaint
        return status
    except BrokenPipeError:
        # the rest of the output has no reader: quietly, and nothing more written to the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE_CLOSED
    # a file that cannot be read, two runs that must not be compared, an output folder in the way
    except (RunError, CompareError, BaselineError, HistoryError) as exc:
        print(f"ampbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        # an output path that cannot be written: the path the user gave, in plain words (files.write); an
        # error naming no file came of the command's output itself (a full disk under `> FILE`)
        if exc.filename is None and exc.errno is not None:
            exc = PlainOSError(exc.errno, plain_problem(exc, _stdout_name()), _stdout_name())
            _drop_stdout()
        print(f"ampbench: error: {described(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _replace_unwritable() -> None:
    """A run's label or a GPU's name may hold what the output's encoding cannot (PYTHONIOENCODING=ascii, a
    C locale): printed as its escape ('caf\\xe9'), not a UnicodeEncodeError half-way through a table."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and (getattr(stream, "encoding", None) or "").lower().replace("-", "") != "utf8":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # a stream that cannot change now keeps its own
                pass


def _stdout_name() -> str:
    """How messages name standard output: with the file it is, where the system says."""
    try:
        target = os.readlink(f"/proc/self/fd/{sys.stdout.fileno()}")
    except (OSError, ValueError, AttributeError):
        return "standard output"
    return f"standard output ({target})" if target.startswith("/") else "standard output"


def _drop_stdout() -> None:
    """Nothing more is written to an output that failed: its buffered rest would fail again at exit."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
