"""``ampbench bisect``: its arguments (declared here, added to the command by ``args``) and the command,
which runs ``ampbench.bisect``'s commit or package bisect, prints the outcome and writes the record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ampbench.ab.paired import MAX_PAIRS
from ampbench.cli.common_args import add_gpu, add_pytest_args
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_OK, EXIT_REGRESSION
from ampbench.cli.values import fraction, seconds_or_none, whole_number
from ampbench.settings import DEFAULT_TOLERANCE

_pairs = whole_number(1, 20)


_tolerance = fraction(0.9, "0.005 for 0.5%")

# an hour: far beyond a healthy measurement of a few cells (the suite's includes its compiles and its rounds
# until the interval is tight), and still an end to a hung one the same day
DEFAULT_STEP_TIMEOUT = 3600.0


# what each command's help says of it (argparse fills the text to the terminal's width)
_BISECT_ABOUT = """Check that --bad regresses against --good, then run `git bisect run` in a git worktree in a
temporary folder (your checkout is never touched), with a second worktree at --good kept for the whole bisect: each
step runs the CELLs as pytest (--benchmark-json, --perf-history off, no baselines) in pairs of fresh processes, the
good tree and the commit under test back to back on the same card in balanced order (ABBA or BAAB), and judges each
cell's pairs as `ampbench ab` does; undecided cells take another pair, up to --max-pairs. A step is bad where any
cell regresses beyond --tolerance, good where every cell passes, skipped otherwise. With --history, each step is
held to the history's level instead. With --package, the versions of a package are bisected, each in a virtual
environment of its own, paired against the first version's. Prints the first bad commit with each cell's drop
against the good side, its interval and the kernels that moved, and writes every step and its pairs to --record."""

_BISECT_EXITS = """Exit status: 0 a first bad commit or version named, 1 none named (the bad side does not regress,
or only skipped steps are left), 2 bad usage, revisions or a git command that failed, 130 interrupted (the worktrees
removed, the repository as it was, the steps taken until then written to --record, which --resume goes on from)."""


def _versions(value: str) -> list[str]:
    versions = [v.strip() for v in value.split(",") if v.strip()]
    if len(versions) < 2 or len(set(versions)) != len(versions):
        raise argparse.ArgumentTypeError(f"expects two or more distinct versions, oldest first, got {value!r}")
    return versions


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bisect", help="find the commit (or package version) that made speed cells slower",
        description=_BISECT_ABOUT, epilog=_BISECT_EXITS)
    p.add_argument("cells", nargs="*", metavar="CELL",
                   help="speed cells, as test ids (test_speed[gpt-amp_fp16], test_speed[gpt-amp_bf16-compiled]) or "
                        "MODEL:MODE (gpt:amp_fp16); none with --step-command")
    p.add_argument("--good", metavar="REV", help="a revision where the cells are fast (with --package: the "
                                                 "project's revision is --rev)")
    p.add_argument("--bad", metavar="REV", default="HEAD", help="a later revision where they are slow (default: HEAD)")
    p.add_argument("--repo", type=Path, default=Path("."), metavar="DIR",
                   help="the git repository (default: the current folder's)")
    p.add_argument("--max-pairs", type=_pairs, default=MAX_PAIRS, metavar="N",
                   help="the most pairs (good side, then commit, or the other way round) a step's undecided cell "
                        f"takes; a clear step is decided in one or two (default: {MAX_PAIRS})")
    p.add_argument("--tolerance", type=_tolerance, default=DEFAULT_TOLERANCE, metavar="FRACTION",
                   help="the least relative drop against the good side that is bad; the paired speedup's own "
                        "tolerance (0.25%%) where smaller, the history's spread where wider "
                        f"(default: {DEFAULT_TOLERANCE})")
    p.add_argument("--history", metavar="URL", default=None,
                   help="hold each step to a level from this run history (read only), its latest counted runs on "
                        "--gpu, instead of pairing it with the good side")
    add_gpu(p, "with --history: the GPU model (default: its only one)")
    p.add_argument("--no-check-bad", dest="check_bad", action="store_false",
                   help="do not pair the bad side with the good side before bisecting (default: paired, and a "
                        "bad side that does not regress stops the bisect)")
    p.add_argument("--record", type=Path, default=Path("bisect.json"), metavar="PATH",
                   help="the JSON record of every step (default: bisect.json)")
    p.add_argument("--resume", action="store_true",
                   help="go on from the steps --record holds, of an earlier run of the same bisect (the same "
                        "--good, --bad and CELLs) that was interrupted or ran out of time: its steps are not "
                        "measured again, and the record written holds them first (default: start afresh)")
    p.add_argument("--test-file", default="perf/test_speed.py", metavar="PATH",
                   help="the module, in the repository, that collects the suite's speed test (default: "
                        "perf/test_speed.py; a project of its own: its module with `from ampbench.suite import *`)")
    p.add_argument("--gate", choices=("device", "wall"), default="device",
                   help="the speedup judge_step, as --perf-gate (default: device)")
    add_pytest_args(p, "-p ampbench.slowdown --perf-device cuda:1")
    p.add_argument("--step-command", default=None, metavar="CMD",
                   help="measure with this shell command, run in the tree at each step, instead of the suite: "
                        "its last line of output is {\"speedup\": S, \"low\": L, \"high\": H}")
    p.add_argument("--step-timeout", type=seconds_or_none, default=DEFAULT_STEP_TIMEOUT, metavar="SECONDS",
                   help="end a measurement (one pytest run or step command, either side of a pair) that runs "
                        "longer than this, with its whole process group; a step that timed out is a failed step, "
                        "named so, and git bisect skips its commit "
                        f"(default: {DEFAULT_STEP_TIMEOUT:g}, an hour, far beyond a healthy measurement of a few "
                        "cells, compiles included; 0 for no limit)")
    p.add_argument("--package", default=None, metavar="NAME",
                   help="bisect the versions of this package instead of commits (pip install NAME==V)")
    p.add_argument("--versions", type=_versions, default=None, metavar="V1,V2,...",
                   help="with --package: its versions, oldest (good) first, newest (bad) last")
    p.add_argument("--rev", default="HEAD", metavar="REV",
                   help="with --package: the project's revision (default: HEAD)")
    p.add_argument("--pip-args", default="", metavar="ARGS",
                   help="with --package: more arguments for pip install, e.g. '--find-links DIR --no-index' or "
                        "'--index-url https://download.pytorch.org/whl/cu130'")
    p.set_defaults(handler=command)


def _usage(args: argparse.Namespace) -> str | None:
    if args.package is None and args.good is None:
        return "--good REV is needed (or --package with --versions)"
    if args.package is not None and args.versions is None:
        return "--package needs --versions V1,V2,... (oldest first)"
    if args.versions is not None and args.package is None:
        return "--versions needs --package NAME"
    if args.step_command is None and not args.cells:
        return "name one or more CELLs (test_speed[gpt-amp_fp16] or gpt:amp_fp16), or give --step-command"
    if args.step_command is not None and args.cells:
        return "--step-command measures its own figure: name no CELL with it"
    if args.step_command is not None and args.history is not None:
        return "--history holds the suite's cells: name CELLs instead of --step-command"
    if args.package is not None and args.history is not None:
        return "--history holds the commits' steps to its level: a package bisect pairs each version with the first"
    if args.resume and args.package is not None:
        return "--resume goes on from a commit bisect's record; a package bisect starts afresh"
    return None


def _resumed(args: argparse.Namespace) -> tuple[dict | None, str | None]:
    """The earlier record --resume goes on from, or why there is none to read."""
    import json

    if not args.resume:
        return None, None
    try:
        record = json.loads(args.record.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"--resume: no record at {args.record} to go on from (--record names it)"
    except (OSError, ValueError) as exc:
        return None, f"--resume: {args.record} is no readable record: {exc}"
    return (record, None) if isinstance(record, dict) else (None, f"--resume: {args.record} holds no bisect record")


def command(args: argparse.Namespace) -> int:
    import shlex

    from ampbench.bisect.cells import named_cell
    from ampbench.bisect.commits import Plan, bisect_commits
    from ampbench.bisect.levels import LevelError
    from ampbench.bisect.measure import CommandMeasurer, SuiteMeasurer
    from ampbench.bisect.outcome import BisectInterrupted, report_lines, write_record
    from ampbench.bisect.versions import bisect_versions
    from ampbench.environments import InstallError
    from ampbench.worktree import GitError

    problem = _usage(args)
    if problem is None:
        try:
            [named_cell(c) for c in args.cells]
        except ValueError as exc:
            problem = str(exc)
    resume = None
    if problem is None:
        resume, problem = _resumed(args)
    if problem is not None:
        print(f"ampbench bisect: error: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    measurer = (CommandMeasurer(args.step_command, timeout=args.step_timeout) if args.step_command is not None else
                SuiteMeasurer(list(args.cells), sys.executable, args.test_file, args.gate,
                              shlex.split(args.pytest_args), timeout=args.step_timeout))
    plan = Plan(args.tolerance, args.check_bad, args.history, args.gpu, args.max_pairs, resume)
    try:
        if args.package is not None:
            record = bisect_versions(args.repo, args.rev, args.package, args.versions, measurer, plan,
                                             shlex.split(args.pip_args))
        else:
            record = bisect_commits(args.repo, args.good, args.bad, measurer, plan)
    except BisectInterrupted as exc:
        write_record(args.record, exc.record)
        print(f"ampbench bisect: interrupted; the worktrees are removed and the repository is as it was; the "
              f"{len(exc.record['steps'])} steps taken written to {args.record}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("ampbench bisect: interrupted; the worktrees are removed and the repository is as it was",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    except (GitError, LevelError, InstallError) as exc:
        print(f"ampbench bisect: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for line in report_lines(record):
        print(f"ampbench bisect: {line}")
    write_record(args.record, record)
    print(f"ampbench bisect: every step written to {args.record}")
    return EXIT_OK if record.get("first_bad") else EXIT_REGRESSION
