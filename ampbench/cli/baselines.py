"""``ampbench spread`` and ``ampbench baselines show|merge|export``: the per-GPU baseline files taught
their between-run spread from saved runs, rendered as Markdown, merged from parts, and written from the
run history. The arguments (``add_parser``, which adds ``baselines record``'s from ``record``) and the
actions, each its parser's handler."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ampbench.baselines.file import BaselineError, latest_entries, load_document
from ampbench.baselines.show import render_file
from ampbench.baselines.spread import learn_spread, with_spread
from ampbench.cli import record as record_cli
from ampbench.cli.common_args import (
    add_baseline_dir,
    add_baseline_file,
    add_dry_run,
    add_gpu,
    add_history,
    add_output,
    add_runs,
)
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.cli.history import history_store
from ampbench.files.paths import BASELINE_DIR
from ampbench.files.write import described, same_file, write_atomic, write_text_atomic
from ampbench.history.connect import HistoryError
from ampbench.printable import plural
from ampbench.report import load_run

# what each command's help says of it (argparse fills the text to the terminal's width)
_SPREAD_ABOUT = """For every speed entry of BASELINE.json, gather the recorded speedup and the speedup of each
RUN.json made on the same GPU and software (driver, torch, CUDA, cuDNN) and measured the same way, and store the
standard deviation of their logarithms as the entry's between_run_sd (with between_run_count values behind it); the
entry's speedup becomes the geometric mean of those values, the recording's own kept as recorded_speedup. Each run
is one value. The device-time speedup's spread is learned the same way into the device_ figures, from runs whose
device time was measured by the entry's method (device_method), and device_tolerance is refreshed. A cell's
tolerance then allows for that spread (Student's t with count - 1 degrees of freedom), and the suite reports each
speedup's 99% interval across runs as well as within its own run. Pass every run to count, all of unchanged software
and code: the figures are replaced, not accumulated (unless --add), and a cell that failed in such a run counts (it
was a false alarm). Cells with an injected slowdown and the run that recorded the baseline do not count. The file is
rewritten atomically; other figures and entries are kept."""

_BASELINES_ABOUT = """Show or merge the per-GPU baseline files that pytest --perf-update-baselines writes, export
them from the run history, or record them from N runs."""

_SHOW_ABOUT = """Render BASELINE.json as Markdown: the GPU and the software it was recorded on, then a table per
kind of test (speed, memory, convergence) with one row per model and precision mode. A figure an entry lacks shows
as '-'. The pages under docs/results/ are made with this."""

_MERGE_ABOUT = """Merge RECORDED.json files into BASELINE.json test by test: where several files hold the same test,
the entry recorded last wins; a test only one file holds is kept. For baselines recorded in parts (by model, on
several runners) by runs that each started from the committed file, so that each part's file also holds the other
parts' older entries. Every file must be of the same GPU. BASELINE.json is rewritten atomically; it is created where
it does not exist yet."""

_EXPORT_ABOUT = """Write DIR/<gpu-slug>.json from the history: each speed cell with counted runs gets the level of
its runs since its last accepted change and the between-run spread of all of them, pooled with the file's own spread
from other runs; the file's other entries are kept. The distributed cells go the same way into
DIR/<gpu-slug>-x<N>.json, one per GPU count the history holds. The files stay what CI without a history reads and
what a review sees."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    spr = sub.add_parser(
        "spread", help="learn each speed cell's run-to-run spread from saved runs into a baseline file",
        description=_SPREAD_ABOUT)
    add_baseline_file(spr, "the baseline file to add the spread to")
    add_runs(spr, "benchmark JSON of independent runs of the suite on that GPU, unchanged software")
    spr.add_argument("--add", action="store_true",
                     help="add these runs to the spread each entry already holds (its count, centre and sd, which "
                          "pool exactly with new values) instead of learning it from these runs alone: for runs made "
                          "since, when the earlier runs' JSON is gone. A run the entry lists as counted is not "
                          "counted again (default: off)")
    add_dry_run(spr, "print what would be stored, write nothing")
    spr.set_defaults(handler=spread)

    bas = sub.add_parser("baselines", help="the per-GPU baseline files (baselines/<gpu-slug>.json): show, merge, "
                                           "export from the history, record",
                         description=_BASELINES_ABOUT)
    bas_sub = bas.add_subparsers(dest="baselines_command", required=True, metavar="ACTION")
    shw = bas_sub.add_parser(
        "show", help="render a baseline file as Markdown",
        description=_SHOW_ABOUT)
    add_baseline_file(shw, "the baseline file to render")
    shw.add_argument("--format", choices=("md",), default="md", help="output format (default: md)")
    add_output(shw, "FILE", "write to FILE (atomically) instead of standard output")
    shw.set_defaults(handler=show)
    mrg = bas_sub.add_parser(
        "merge", help="merge baseline files of one GPU, recorded by separate runs, test by test",
        description=_MERGE_ABOUT)
    add_baseline_file(mrg, "the baseline file to merge into")
    mrg.add_argument("recorded", type=Path, nargs="+", metavar="RECORDED.json",
                     help="baseline files written by --perf-update-baselines on other runs")
    add_dry_run(mrg, "print what would be merged, write nothing")
    mrg.set_defaults(handler=merge)
    exp = add_history(bas_sub.add_parser(
        "export", help="write a GPU's baseline files from the run history",
        description=_EXPORT_ABOUT,
        epilog="Exit status: 0 written, 2 the store, an unknown GPU or a file that cannot be written."))
    add_gpu(exp, "the GPU model, e.g. 'NVIDIA H100 80GB HBM3' (default: the history's only one)")
    add_baseline_dir(exp, f"folder of the baseline files (default: {BASELINE_DIR})")
    exp.add_argument("--kernels-only", action="store_true",
                     help="change nothing but the entries' kernel lists: each takes its latest counted run's, where "
                          "that run ran the software the entry names (default: the whole entry from the history)")
    exp.set_defaults(handler=export)
    record_cli.add_parser(bas_sub)


def _spread_values(cell) -> str:
    earlier = f"({cell.prior.count} earlier) " if cell.prior else ""
    return earlier + " ".join(f"{s:.3f}" for s in cell.speedups)


def spread(args: argparse.Namespace) -> int:
    document = load_document(args.baseline)
    paths = list(dict.fromkeys(p.resolve() for p in args.runs))  # a path given twice counts once
    learned = learn_spread(document["entries"], [load_run(p) for p in paths], add=args.add)
    grouped: dict[tuple[str, str], list[str]] = {}
    for run, test_id, why in learned.left_out:
        grouped.setdefault((run, why), []).append(test_id)
    for (run, why), ids in grouped.items():
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        print(f"left out of {run}: {shown}: {why}")
    test_ids = sorted(set().union(*learned.figures.values()))
    if not test_ids:
        print(f"ampbench: error: no run counts towards any speed entry of {args.baseline}", file=sys.stderr)
        return EXIT_BAD_INPUT
    width = max(len(t) for t in test_ids)
    print(f"{'test':{width}s}  values  sd of ln(speedup)  device values  device sd  "
          "speedups (the recording's, then one per run) | device-time speedups")
    for test_id in test_ids:
        cell, device = learned.cells.get(test_id), learned.device_cells.get(test_id)
        wall_columns = f"{cell.count:6d}  {cell.sd:17.2%}" if cell else f"{'-':>6s}  {'-':>17s}"
        dev_columns = f"{device.count:13d}  {device.sd:9.2%}" if device else f"{'-':>13s}  {'-':>9s}"
        values = _spread_values(cell) if cell else "-"
        if device:
            values += " | " + _spread_values(device)
        print(f"{test_id:{width}s}  {wall_columns}  {dev_columns}  {values}")
        versus = learned.versus_cells.get(test_id)
        if versus:
            print(f"{'  over its versus side':{width}s}  {'':6s}  {'':17s}  {versus.count:13d}  {versus.sd:9.2%}  "
                  f"{_spread_values(versus)}")
    if args.dry_run:
        print(f"ampbench: --dry-run: {args.baseline} left as it was")
        return EXIT_OK
    write_atomic(args.baseline, with_spread(document, learned))
    print(f"ampbench: between-run spread of {len(learned.cells)} speed entries ({len(learned.device_cells)} with "
          f"device time, {len(learned.versus_cells)} with a ratio over a versus side) written to {args.baseline}")
    return EXIT_OK


def show(args: argparse.Namespace) -> int:
    if args.output is not None and same_file(args.output, args.baseline):
        print(f"ampbench: error: -o {args.output} is BASELINE.json itself, which the Markdown would replace; "
              "give another output file", file=sys.stderr)
        return EXIT_BAD_INPUT
    text = render_file(args.baseline, args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"ampbench: {args.baseline} rendered to {args.output}")
    return EXIT_OK


def merge(args: argparse.Namespace) -> int:
    paths = ([args.baseline] if args.baseline.exists() else []) + list(args.recorded)
    documents = [load_document(p) for p in paths]
    gpus = {p: d["gpu"] for p, d in zip(paths, documents)}
    if len(set(gpus.values())) > 1:
        shown = ", ".join(f"{p} ({gpu})" for p, gpu in gpus.items())
        print(f"ampbench: error: baseline files of different GPUs: {shown}", file=sys.stderr)
        return EXIT_BAD_INPUT
    entries, given = latest_entries(documents)
    print(f"ampbench: {plural(len(entries), 'entry', 'entries')}: "
          + ", ".join(f"{n} from {p}" for p, n in zip(paths, given)))
    if args.dry_run:
        print(f"ampbench: --dry-run: {args.baseline} left as it was")
        return EXIT_OK
    write_atomic(args.baseline, dict(documents[0], entries=entries))
    print(f"ampbench: merged into {args.baseline}")
    return EXIT_OK


def export(args: argparse.Namespace) -> int:
    """``ampbench baselines export``."""
    from ampbench.history.export import write_baselines  # SQLAlchemy only where a history is asked for

    try:
        history = history_store(args, create=False, read_only=True)
        files = write_baselines(history, args.gpu, args.baseline_dir, args.kernels_only)
    except (HistoryError, BaselineError, OSError) as error:
        shown = described(error) if isinstance(error, OSError) else error
        print(f"ampbench baselines export: {shown}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for path, written in files:
        print(f"ampbench: {plural(written, 'entry', 'entries')} written from the history {args.history} "
              f"to {path}")
    return EXIT_OK
