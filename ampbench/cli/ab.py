"""``ampbench ab``: its arguments and the command, which runs ``ampbench.ab``'s pairs of base and head on one
card, prints a line per pair and the table of verdicts, and writes the A/B run JSON."""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from ampbench.ab.cells import TEST_FILES
from ampbench.ab.paired import MAX_PAIRS
from ampbench.cli.common_args import add_output, add_pytest_args
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from ampbench.cli.values import seconds_or_none, whole_number

DEFAULT_OUTPUT = Path("ab.json")
# an hour: far beyond one healthy process of the quick tier's cells, and still an end to a hung one
DEFAULT_RUN_TIMEOUT = 3600.0
MAX_PAIRS_LIMIT = 50

_AB_ABOUT = """Compare two trees of your project on this card: run the CELLs (default: the tier's speed and
memory cells) as pytest processes for --base and --head in pairs, in balanced random order (every two pairs ABBA or
BAAB), each process fresh, and judge each pair's log ratio of head to base: the device-time speedup over fp32, each
mode's own device time per step, and each mode's peak memory. A cell still undecided after a pair is run again, up to
--max-pairs. Each side runs with --perf-history off and no baseline file: nothing recorded enters the verdict, so a
GPU model with no baseline file gates from its first job. A side is a revision (checked out in a git worktree in a
temporary folder), the working tree (--head's default), or PACKAGE==VERSION: the head's code with that version in a
virtual environment of its own. Your checkout is only read."""

_AB_EXITS = """Exit status: 0 no cell regressed, 1 a regression or a cell that failed to run (under --strict also an
inconclusive cell), 2 bad usage, a revision that names no commit, a package pip could not install, or sides that ran
on different cards, 130 interrupted (worktrees and environments removed, your checkout as it was)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ab", help="compare two commits (or package versions) on this card, in paired runs",
                       description=_AB_ABOUT, epilog=_AB_EXITS)
    p.add_argument("cells", nargs="*", metavar="CELL",
                   help="cells, as node ids, test ids (test_speed[gpt-amp_fp16], test_memory[gpt-fp32]) or "
                        "MODEL:MODE, its speed and memory cells (default: the tier's speed and memory cells)")
    p.add_argument("--base", required=True, metavar="REV|PKG==V",
                   help="the base side: a revision (main, a sha, HEAD~1) or PACKAGE==VERSION")
    p.add_argument("--head", default=None, metavar="REV|PKG==V",
                   help="the head side (default: the working tree, uncommitted changes included)")
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="the git repository (default: the current folder's)")
    p.add_argument("--max-pairs", type=whole_number(1, MAX_PAIRS_LIMIT), default=MAX_PAIRS, metavar="N",
                   help="the most pairs a cell takes before it is called inconclusive; the looks spend their errors "
                        f"over this many (default: {MAX_PAIRS})")
    p.add_argument("--tests", default=" ".join(TEST_FILES), metavar="PATHS",
                   help="the test files, in the repository, that collect the cells (default: '%(default)s'; a "
                        "project of its own: its module with `from ampbench.suite import *`)")
    add_pytest_args(p, "--perf-tier full --perf-require-gpu")
    p.add_argument("--pip-args", default="", metavar="ARGS",
                   help="with PACKAGE==VERSION: more arguments for pip install, e.g. '--find-links DIR --no-index'")
    p.add_argument("--run-timeout", type=seconds_or_none, default=DEFAULT_RUN_TIMEOUT, metavar="SECONDS",
                   help="end one pytest process that runs longer than this, with its process group; its cells are "
                        f"errors (default: {DEFAULT_RUN_TIMEOUT:g}; 0 for no limit)")
    p.add_argument("--seed", type=int, default=None, metavar="N", help="the seed of the pairs' order (default: random)")
    p.add_argument("--work-dir", type=Path, default=None, metavar="DIR",
                   help="keep each process's run JSON and log here (default: a temporary folder, removed)")
    p.add_argument("--strict", action="store_true", help="an inconclusive cell fails the command too")
    add_output(p, "PATH", f"the A/B run JSON, which report, compare and export read (default: {DEFAULT_OUTPUT})",
               default=DEFAULT_OUTPUT)
    p.set_defaults(handler=command)


def _say(text: str) -> None:
    print(f"ampbench ab: {text}", file=sys.stderr, flush=True)


def command(args: argparse.Namespace) -> int:
    from ampbench.ab.cells import selection
    from ampbench.ab.result import paired_records, result_lines
    from ampbench.ab.runner import AbError, AbPlan, run_pairs
    from ampbench.ab.trees import Trees
    from ampbench.environments import InstallError
    from ampbench.results.paired_run import write_paired_run
    from ampbench.worktree import GitError

    try:
        chosen = selection(list(args.cells), shlex.split(args.tests))
    except ValueError as exc:
        print(f"ampbench ab: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="ampbench-ab-") as scratch:
        work = args.work_dir or Path(scratch)
        plan = AbPlan(chosen, shlex.split(args.pytest_args), work, args.max_pairs, args.seed, args.run_timeout)
        try:
            with Trees(args.repo, args.base, args.head, shlex.split(args.pip_args)) as trees:
                for side, tree in trees.sides.items():
                    _say(f"{side}: {tree.described}")
                outcome = run_pairs(trees.sides, plan, _say)
                records = paired_records(outcome, trees.sides)
                write_paired_run(args.output, records, outcome.machine_info, trees.sides["head"].commit_info)
        except KeyboardInterrupt:
            _say("interrupted; worktrees and environments removed, your checkout as it was")
            return EXIT_INTERRUPTED
        except (GitError, InstallError, AbError) as exc:
            print(f"ampbench ab: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    for line in result_lines(records):
        print(line)
    _say(f"{len(outcome.cells)} cells, {outcome.runs} runs in {outcome.seconds:.0f} s; written to {args.output}")
    verdicts = [c.verdict for c in outcome.cells.values()]
    if any(v.failing for v in verdicts) or (args.strict and any(v.warns for v in verdicts)):
        return EXIT_REGRESSION
    return EXIT_OK
