"""The ``ampbench export`` command: its arguments and what it does with them. The formats are one table
(``FORMATS``): the option's choices, its help, the epilog and the dispatch all read it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ampbench.export.figures import cell_margins, gated_figures
from ampbench.export.formats import (
    ExportError,
    bmf,
    conbench,
    github,
    github_margin,
    over_the_line,
    pytest_benchmark,
)
from ampbench.files.write import same_file, write_text_atomic
from ampbench.results import load_run
from ampbench.results.run import RunError

# ampbench.cli.exits' statuses, as literals: importing that package would import this module back
_OK, _FAILS, _BAD_INPUT = 0, 1, 2


# what each command's help says of it (argparse fills the text to the terminal's width)
_EXPORT_ABOUT = """Write the figures that hold each cell of RUN.json (each gating speedup with its interval, a
compiled cell's ratio over its versus side, the memory ratio, the accuracy against the reference) in a dashboard's
format. Cells without such a figure are named on stderr. Runs written by older versions are read as they are
(entries without stats, untimed cells among the benchmarks)."""


@dataclass(frozen=True)
class Format:
    """A format ``--format`` names: what it is (the epilog says it) and what writes it."""

    what: str
    # from the run's gated figures (``figures.gated_figures``), or with whole_run from the run's JSON itself
    write: Callable[[Any], Any]
    whole_run: bool = False
    # named so that asking for it says why it is not written, rather than argparse's bare "invalid choice"
    refused: bool = False


FORMATS: dict[str, Format] = {
    "bmf": Format("Bencher Metric Format (bencher run --adapter json): per test id, one measure per gated figure, "
                  "with its interval as lower_value and upper_value, and the cell's gate-margin (above 1: it fails)",
                  bmf),
    "github": Format("github-action-benchmark's customBiggerIsBetter list, the interval's half-width in range", github),
    "github-margin": Format("github-action-benchmark's customSmallerIsBetter list: per cell its line (1), then its "
                            "gate margin floored at 1, under one name, so that at alert-threshold 100% the action "
                            "alerts each failing cell in every run it fails (never on a cell's first report: "
                            "--fail-on-margin does)", github_margin),
    "pytest-benchmark": Format("the run JSON in the current layout (a group on every entry, the untimed cells beside "
                               "the benchmarks), for pytest-benchmark compare and the dashboards' pytest readers",
                               pytest_benchmark, whole_run=True),
    "conbench": Format("Conbench takes only the units B, B/s, s, ns and i/s, none of which a ratio has", conbench,
                       refused=True),
}


def _named(name: str, fmt: Format) -> str:
    return f"{name} (refused, saying why)" if fmt.refused else name


def add_parser(sub: argparse._SubParsersAction) -> None:
    names = [_named(name, fmt) for name, fmt in FORMATS.items()]
    exp = sub.add_parser(
        "export", help="the run's gated figures for a dashboard: Bencher (bmf), github-action-benchmark (github)",
        description=_EXPORT_ABOUT,
        epilog="Formats: " + "; ".join(f"{name}: {'refused: ' * fmt.refused}{fmt.what}"
                                       for name, fmt in FORMATS.items())
               + ". Exit status: 0 written, 1 with --fail-on-margin where a cell's gate margin is above 1 "
                 "(written all the same), 2 bad usage, an unusable file or a refused format.",
    )
    exp.add_argument("run", type=Path, metavar="RUN.json", help="benchmark JSON of the run to export")
    exp.add_argument("--format", required=True, choices=tuple(FORMATS), metavar="FORMAT",
                     help=", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0])
    exp.add_argument("-o", "--output", type=Path, metavar="FILE", default=None,
                     help="write to FILE (default: standard output)")
    exp.add_argument("--fail-on-margin", action="store_true",
                     help="after writing, exit 1 where a cell's gate margin is above 1 (its gate fails it), naming "
                          "each on stderr: the check a dashboard cannot make on a cell's first report. A run "
                          "without baselines (no cell held to a line) is refused")
    exp.set_defaults(handler=command)


def _document(args: argparse.Namespace) -> Any:
    fmt = FORMATS[args.format]
    if fmt.whole_run:
        load_run(args.run)  # a file that is no ampbench run is refused, naming the field
        return fmt.write(json.loads(args.run.read_text(encoding="utf-8")))
    figures = gated_figures(load_run(args.run))
    document = fmt.write(figures)
    for test_id, why in figures.left_out:
        print(f"ampbench export: {test_id} left out: {why}", file=sys.stderr)
    if not figures.figures:
        raise ExportError(f"{args.run}: no cell holds a gated figure (nothing to export)")
    if not document:  # github-action-benchmark refuses a file without entries
        raise ExportError(f"{args.run}: no cell is held to a regression line (a run without baselines), so none "
                          "has a gate margin; --format github charts its figures")
    return document


def _over_the_line(args: argparse.Namespace) -> list[str]:
    """--fail-on-margin: the cells of the run past their line; ExportError where none is held to one."""
    figures = gated_figures(load_run(args.run))
    if not cell_margins(figures):
        raise ExportError(f"--fail-on-margin: no cell of {args.run} is held to a regression line (a run without "
                          "baselines), so there is no gate margin to check")
    return over_the_line(figures)


def command(args: argparse.Namespace) -> int:
    if args.output is not None and same_file(args.output, args.run):
        print(f"ampbench export: error: -o {args.output} is RUN.json itself, which the export would replace; "
              "give another output file", file=sys.stderr)
        return _BAD_INPUT
    try:
        document = _document(args)
        failing = _over_the_line(args) if args.fail_on_margin else []
    except (ExportError, RunError) as exc:
        print(f"ampbench export: error: {exc}", file=sys.stderr)
        return _BAD_INPUT
    text = json.dumps(document, indent=1, allow_nan=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"ampbench export: {args.format} of {args.run} written to {args.output}", file=sys.stderr)
    for line in failing:
        print(f"ampbench export: FAILS: {line}", file=sys.stderr)
    if failing:
        n = len(failing)
        print(f"ampbench export: --fail-on-margin: {n} cell{'s' * (n != 1)} past {'their' if n != 1 else 'its'} "
              "line", file=sys.stderr)
        return _FAILS
    return _OK
