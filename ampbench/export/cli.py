"""The ``ampbench export`` command: its arguments and what it does with them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ampbench.export.figures import gated_figures
from ampbench.export.formats import ExportError, bmf, conbench, github, github_margin, pytest_benchmark
from ampbench.files.write import same_file, write_text_atomic
from ampbench.results import load_run
from ampbench.results.run import RunError

# format: (what it is, what writes it from the run)
FORMATS = {
    "bmf": "Bencher Metric Format (bencher run --adapter json): per test id, one measure per gated figure, "
           "with its interval as lower_value and upper_value, and the cell's gate-margin (above 1: it fails)",
    "github": "github-action-benchmark's customBiggerIsBetter list, the interval's half-width in range",
    "github-margin": "github-action-benchmark's customSmallerIsBetter list of each cell's gate margin, floored "
                     "at 1 (1: at or inside its regression line); alert-threshold 100% alerts as a cell crosses it",
    "pytest-benchmark": "the run JSON in the current layout (a group on every entry, the untimed cells beside "
                        "the benchmarks), for pytest-benchmark compare and the dashboards' pytest readers",
    "conbench": "refused: Conbench takes only the units B, B/s, s, ns and i/s, none of which a ratio has",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    exp = sub.add_parser(
        "export", help="the run's gated figures for a dashboard: Bencher (bmf), github-action-benchmark (github)",
        description="Write the figures that hold each cell of RUN.json (each gating speedup with its interval, a "
                    "compiled cell's ratio over its versus side, the memory ratio, the accuracy against the "
                    "reference) in a dashboard's format. Cells without such a figure are named on stderr. Runs "
                    "written by older versions are read as they are (entries without stats, untimed cells "
                    "among the benchmarks).",
        epilog="Formats: " + "; ".join(f"{name}: {what}" for name, what in FORMATS.items())
               + ". Exit status: 0 written, 2 bad usage, an unusable file or a refused format.",
    )
    exp.add_argument("run", type=Path, metavar="RUN.json", help="benchmark JSON of the run to export")
    exp.add_argument("--format", required=True, choices=tuple(FORMATS), metavar="FORMAT",
                     help="bmf, github, github-margin, pytest-benchmark or conbench (refused, saying why)")
    exp.add_argument("-o", "--output", type=Path, metavar="FILE", default=None,
                     help="write to FILE (default: standard output)")


def _document(args: argparse.Namespace):
    if args.format == "pytest-benchmark":
        load_run(args.run)  # a file that is no ampbench run is refused, naming the field
        return pytest_benchmark(json.loads(args.run.read_text(encoding="utf-8")))
    figures = gated_figures(load_run(args.run))
    document = {"bmf": bmf, "github": github, "github-margin": github_margin, "conbench": conbench}[args.format](figures)
    for test_id, why in figures.left_out:
        print(f"ampbench export: {test_id} left out: {why}", file=sys.stderr)
    if not figures.figures:
        raise ExportError(f"{args.run}: no cell holds a gated figure (nothing to export)")
    if not document:  # github-action-benchmark refuses a file without entries
        raise ExportError(f"{args.run}: no cell is held to a regression line (a run without baselines), so none "
                          "has a gate margin; --format github charts its figures")
    return document


def command(args: argparse.Namespace) -> int:
    if args.output is not None and same_file(args.output, args.run):
        print(f"ampbench export: error: -o {args.output} is RUN.json itself, which the export would replace; "
              "give another output file", file=sys.stderr)
        return 2
    try:
        document = _document(args)
    except (ExportError, RunError) as exc:
        print(f"ampbench export: error: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"ampbench export: {args.format} of {args.run} written to {args.output}", file=sys.stderr)
    return 0
