"""The options and arguments several ``ampbench`` commands take, each declared once: a command module
adds one to its parser with the function here, passing its own help (and default, where commands differ),
so that the name, the metavar and the type of ``--gpu``, ``--history``, ``-o``, ``--baseline-dir``,
``--device``, ``--dry-run``, a RUN.json and a BASELINE.json are the same in every command that takes them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable, TypeVar

from ampbench.files import paths
from ampbench.history.connect import store_url

_P = TypeVar("_P", bound=argparse.ArgumentParser)

HISTORY_HELP = ("the history: an SQLite file (a path or sqlite:///PATH) or postgresql://USER:PASSWORD@HOST/DB "
                f"(default: {paths.HISTORY}, where a `pytest perf/` run on a GPU from this folder appends)")


def add_history(parser: _P, help: str = HISTORY_HELP, default: str | None = str(paths.HISTORY)) -> _P:
    """--history URL, checked as a URL when parsed (``history.connect.store_url``), the store opened by the
    command (``cli.history.history_store``); `parser` back, for a subcommand declared in one expression."""
    parser.add_argument("--history", type=store_url, default=default, metavar="URL", help=help)
    return parser


def add_gpu(parser: argparse.ArgumentParser, help: str) -> None:
    """--gpu NAME: the GPU model whose runs a command takes (default: none named; each command says what
    that means)."""
    parser.add_argument("--gpu", metavar="NAME", default=None, help=help)


def add_output(parser: argparse.ArgumentParser, metavar: str, help: str, default: Path | None = None) -> None:
    """-o/--output: where a command writes what it makes instead of standard output or its own default."""
    parser.add_argument("-o", "--output", type=Path, metavar=metavar, default=default, help=help)


def add_baseline_dir(parser: argparse.ArgumentParser, help: str, default: Path | None = paths.BASELINE_DIR,
                     type: Callable[[str], Path] = Path) -> None:
    """--baseline-dir DIR: the folder of the per-GPU baseline files; `type` checks it where a command only
    reads from it."""
    parser.add_argument("--baseline-dir", type=type, default=default, metavar="DIR", help=help)


def add_device(parser: argparse.ArgumentParser) -> None:
    """--device: what the commands that measure run on."""
    parser.add_argument("--device", default="auto", metavar="DEVICE",
                        help="auto, cpu, cuda or cuda:N (default: auto, CUDA where torch sees it)")


def add_dry_run(parser: argparse.ArgumentParser, help: str) -> None:
    """--dry-run: a command that rewrites a file prints what it would write instead."""
    parser.add_argument("--dry-run", action="store_true", help=help)


def add_runs(parser: argparse.ArgumentParser, help: str, dest: str = "runs", nargs: str | None = "+") -> None:
    """RUN.json: saved runs (pytest --benchmark-json files) a command reads; one with `nargs` None."""
    parser.add_argument(dest, type=Path, nargs=nargs, metavar="RUN.json", help=help)


def add_baseline_file(parser: argparse.ArgumentParser, help: str) -> None:
    """BASELINE.json: the baseline file a command reads or rewrites."""
    parser.add_argument("baseline", type=Path, metavar="BASELINE.json", help=help)


def add_pytest_args(parser: argparse.ArgumentParser, example: str) -> None:
    """--pytest-args ARGS: more arguments for each pytest process a command starts, split as a shell would.
    argparse takes a lone value that starts with a dash for an option of its own: such a value is given with
    ``=``, as the help says."""
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help=f"more arguments for each pytest run, e.g. '{example}'; a single flag is given with "
                             "=, as --pytest-args=--perf-require-gpu")
