"""``ampbench report`` and ``ampbench compare``: a saved run made into a report (with an older run to
compare with, a JUnit file's failures and a history's trends), and two runs held against each other: their
arguments (``add_parser``) and the commands (``report``, ``compare``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ampbench.cli.common_args import add_gpu, add_history, add_output, add_runs
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from ampbench.cli.history import history_store
from ampbench.cli.values import relative
from ampbench.files.write import append_text, same_file
from ampbench.printable import plural, printable
from ampbench.progress import Progress
from ampbench.report import Run, build_report, failed_tests, load_run, render_comparison_markdown, write_report
from ampbench.report.compare import (
    DEFAULT_ACCURACY_TOLERANCE,
    DEFAULT_MEMORY_TOLERANCE,
    DEFAULT_TOLERANCE,
    compare_runs,
    format_text,
)
from ampbench.verdict import Verdict

# what each command's help says of it (argparse fills the text to the terminal's width)
_REPORT_ABOUT = """Write DIR/index.html (one self-contained file: open it in a browser), DIR/summary.md (for a CI
job summary, e.g. >> $GITHUB_STEP_SUMMARY) and PNG charts of speedup, memory, largest batch and throughput. With
--compare, also the change of every test against an older run, with its verdict. The report is written to a
temporary folder and moved into place at the end, so a failure leaves no partial report."""

_COMPARE_ABOUT = """Hold every test of NEW.json against the same test in OLD.json with the suite's statistics: OLD's
speedup is the baseline, NEW's 99% interval must not lie wholly below baseline x (1 - tolerance). Memory ratio,
largest batch and accuracy are held to relative tolerances."""


def _add_tolerances(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tolerance", type=relative, default=DEFAULT_TOLERANCE, metavar="FRACTION",
                   help="smallest relative drop of a speedup that counts as a regression; cells measured with "
                        f"more noise get more, as in the suite (default: {DEFAULT_TOLERANCE})")
    p.add_argument("--memory-tolerance", type=relative, default=DEFAULT_MEMORY_TOLERANCE,
                   metavar="FRACTION", help="relative growth of a memory ratio, or shrinkage of the largest batch, "
                                            f"that counts as a regression (default: {DEFAULT_MEMORY_TOLERANCE})")
    p.add_argument("--accuracy-tolerance", type=relative, default=DEFAULT_ACCURACY_TOLERANCE,
                   metavar="FRACTION", help="relative drop of a convergence test's accuracy that counts as a "
                                            f"regression (default: {DEFAULT_ACCURACY_TOLERANCE})")
    p.add_argument("--strict", action="store_true",
                   help="an inconclusive verdict fails too (exit status 1), like pytest's --perf-strict")
    p.add_argument("--allow-missing", action="store_true",
                   help="a test the old run had and the new one lacks (deselected, skipped, crashed) does not fail; "
                        "without it, it does (exit status 1)")
    p.add_argument("--cross-device", action="store_true",
                   help="judge runs from different devices (e.g. a CPU smoke run against a GPU run) by their ratios "
                        "over fp32; without it, such a pair is refused (exit status 2)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser(
        "report", help="turn a run into DIR/index.html, DIR/summary.md and PNG charts",
        description=_REPORT_ABOUT)
    add_runs(rep, "benchmark JSON of the run to report on", dest="run", nargs=None)
    rep.add_argument("--compare", type=Path, metavar="OLD.json", default=None,
                     help="an older run of the same suite to compare with (e.g. the last run on main)")
    add_output(rep, "DIR", "folder for the report; an earlier report there is replaced, a folder holding anything "
                           "the report did not write is refused (default: report)", default=Path("report"))
    rep.add_argument("--junit", type=Path, metavar="JUNIT.xml", default=None,
                     help="pytest's --junitxml file of the same run: its failed tests are listed at the top")
    add_history(rep, "a run history (an SQLite file, sqlite:///PATH or postgresql://...): add a trend chart of each "
                     "speed cell's device-time speedup over its runs and the tolerance learned (default: none, no "
                     "trends)", default=None)
    add_gpu(rep, "with --history: the GPU model whose runs are drawn (default: the run's own)")
    rep.add_argument("--fail-on-regression", action="store_true",
                     help="exit with status 1 when a verdict fails (a regression, non-finite training, an fp32 "
                          "reference "
                          "that did not learn), by the run's own verdicts or against --compare")
    _add_tolerances(rep)
    rep.set_defaults(handler=report)

    cmp_ = sub.add_parser(
        "compare", help="per-test verdicts of NEW.json against OLD.json; exit status 1 on a regression",
        description=_COMPARE_ABOUT)
    cmp_.add_argument("old", type=Path, metavar="OLD.json", help="the earlier run (the baseline)")
    cmp_.add_argument("new", type=Path, metavar="NEW.json", help="the run to judge")
    cmp_.add_argument("--changes-only", action="store_true", help="list only tests whose verdict is not pass")
    cmp_.add_argument("--markdown", type=Path, metavar="FILE", default=None,
                      help="also write the comparison as markdown to FILE (e.g. $GITHUB_STEP_SUMMARY is appended to)")
    _add_tolerances(cmp_)
    cmp_.set_defaults(handler=compare)


def _tolerances(args: argparse.Namespace) -> dict:
    return dict(tolerance=args.tolerance, memory_tolerance=args.memory_tolerance,
                accuracy_tolerance=args.accuracy_tolerance, cross_device=args.cross_device)


def _read(path: Path, progress: Progress) -> Run:
    progress(f"reading {path}")
    return load_run(path)


def report(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.gpu is not None and args.history is None:
        print("ampbench: error: report --gpu names the GPU model of --history's runs; give --history", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the history first: a store it cannot use ends the report (``command.main``) before any run is read
    history = None if args.history is None else history_store(args, create=False, read_only=True)
    with Progress.for_files("report", [args.run, args.compare]) as progress:
        run = _read(args.run, progress)
        old = _read(args.compare, progress) if args.compare else None
        progress.cells(max(len(run.cells), len(old.cells) if old else 0))
        comparison = compare_runs(old, run, **_tolerances(args), progress=progress) if old else None
        failures = failed_tests(args.junit) if args.junit else ()
        trends = _trends(history, run, args.gpu, progress)
        files = build_report(run, comparison, failures, progress, trends)
        progress("writing the report")
        written = write_report(args.output, files)
    print(f"ampbench: report of {args.run} ({plural(len(run.cells), 'result')}, {printable(run.gpu)}) written to "
          f"{written}/index.html in {time.perf_counter() - t0:.1f} s")
    if not run.cells:
        print(f"ampbench: {args.run} holds no cell: every test of its run was skipped or deselected (on the CPU, "
              "the memory and GPU-only cells skip), so there is nothing to judge")
    if trends is not None:
        print(printable(f"ampbench: trends of {plural(len(trends.cells), 'cell')} on {trends.gpu} "
                        f"from the history {trends.store}"))
    own = [c for c in run.cells if c.verdict is not None and c.verdict.failing]
    for c in own:
        print(printable(f"{str(c.verdict).upper()}: {c.test_id}: {c.message or ''}"))
    if comparison is not None:
        for note in comparison.notes[:comparison.headlines]:
            print(printable(f"ampbench: {note}"))
        for r in comparison.failures:
            print(printable(f"{str(r.verdict).upper()} against {args.compare.name}: {r.message}"))
        for r in comparison.missing:
            print(printable(f"MISSING against {args.compare.name}: {r.test_id}: {r.message}"))
    failed = bool(own) or (comparison is not None and comparison.failed(args.strict, args.allow_missing))
    if args.strict:
        failed = failed or any(c.verdict == Verdict.INCONCLUSIVE for c in run.cells)
    return EXIT_REGRESSION if failed and args.fail_on_regression else EXIT_OK


def _trends(history, run: Run, gpu: str | None, progress: Progress):
    if history is None:
        return None
    from ampbench.report.trends import read_trends

    progress(f"reading the history {history.name}")
    try:
        if gpu is not None:
            history.check_gpu(gpu)
        return read_trends(history, run, gpu)
    finally:
        history.release()


def compare(args: argparse.Namespace) -> int:
    for run in (args.old, args.new):
        if args.markdown is not None and same_file(args.markdown, run):
            print(f"ampbench: error: --markdown {args.markdown} is {run} itself, which the Markdown would be "
                  "appended to; give another file", file=sys.stderr)
            return EXIT_BAD_INPUT
    with Progress.for_files("compare", [args.old, args.new]) as progress:
        old, new = (_read(path, progress) for path in (args.old, args.new))
        progress.cells(max(len(old.cells), len(new.cells)))
        comparison = compare_runs(old, new, **_tolerances(args), progress=progress)
        progress("writing the table")
        text = format_text(comparison, all_rows=not args.changes_only)
        # the whole table first, appended in one write: a full disk leaves none of it (files.write.append_text)
        markdown = "\n".join(render_comparison_markdown(comparison)) + "\n" if args.markdown is not None else None
    sys.stdout.write("\n".join(printable(line) for line in text.split("\n")))  # a run file's text, never acted on
    if markdown is not None:
        append_text(args.markdown, markdown)
    return EXIT_REGRESSION if comparison.failed(args.strict, args.allow_missing) else EXIT_OK
