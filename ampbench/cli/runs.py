"""``ampbench report`` and ``ampbench compare``: a saved run made into a report (with an older run to
compare with, a JUnit file's failures and a history's trends), and two runs held against each other."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from ampbench.cli.history import history_store
from ampbench.files.write import same_file
from ampbench.printable import printable
from ampbench.progress import Progress
from ampbench.report import Run, build_report, failed_tests, load_run, render_comparison_markdown, write_report
from ampbench.report.compare import compare_runs, format_text
from ampbench.verdict import Verdict


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
        run, old = (_read(path, progress) if path else None for path in (args.run, args.compare))
        progress.cells(max(len(run.cells), len(old.cells) if old else 0))
        comparison = compare_runs(old, run, **_tolerances(args), progress=progress) if old else None
        failures = failed_tests(args.junit) if args.junit else ()
        trends = _trends(history, run, args.gpu, progress)
        files = build_report(run, comparison, failures, progress, trends)
        progress("writing the report")
        written = write_report(args.output, files)
    print(f"ampbench: report of {args.run} ({len(run.cells)} results, {printable(run.gpu)}) written to "
          f"{written}/index.html in {time.perf_counter() - t0:.1f} s")
    if not run.cells:
        print(f"ampbench: {args.run} holds no cell: every test of its run was skipped or deselected (on the CPU, "
              "the memory and GPU-only cells skip), so there is nothing to judge")
    if trends is not None:
        print(printable(f"ampbench: trends of {len(trends.cells)} cells on {trends.gpu} from the history {trends.store}"))
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
    sys.stdout.write("\n".join(printable(line) for line in text.split("\n")))  # a run file's text, never acted on
    if args.markdown is not None:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write("\n".join(render_comparison_markdown(comparison)) + "\n")
    return EXIT_REGRESSION if comparison.failed(args.strict, args.allow_missing) else EXIT_OK
