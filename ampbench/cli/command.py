"""The ``ampbench`` command's entry point: its arguments parsed (``args``), the subcommand run by the
handler its parser set, and what ends a command early (an unusable file, a closed pipe, a path that
cannot be written) turned into its exit status (``exits``)."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from ampbench.baselines.store import BaselineError
from ampbench.cli.args import build_parser
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_PIPE_CLOSED
from ampbench.files.write import described
from ampbench.history.connect import HistoryError
from ampbench.report import RunError
from ampbench.report.compare import CompareError


def main(argv: Sequence[str] | None = None) -> int:
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
        # an output path that cannot be written: the path the user gave, in plain words (files.write)
        print(f"ampbench: error: {described(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
