"""The exit statuses of every ``ampbench`` command, as its help and README.md state them."""

from __future__ import annotations

EXIT_OK = 0
# a failing verdict (a regression, a non-finite or parity-failed convergence cell, a cell whose test stopped with
# an error; under --strict also an inconclusive one), a test the new run lost, a fidelity difference
EXIT_REGRESSION = 1
EXIT_BAD_INPUT = 2  # bad usage or unusable input, like argparse's own usage errors
EXIT_INTERRUPTED = 130  # the shell's status of a command ended by Ctrl-C
# the status a shell gives a tool stopped by SIGPIPE: the reader of the output went away (`| head -1`)
EXIT_PIPE_CLOSED = 128 + 13
