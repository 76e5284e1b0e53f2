"""The ``ampbench`` command: reports and comparisons of saved benchmark JSON, baseline files, and the
fidelity check, outside pytest."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from ampbench.baselines.show import render_file
from ampbench.baselines.store import BaselineError, latest_entries, load_document
from ampbench.files.write import write_atomic, write_text_atomic
from ampbench.cli_args import build_parser
from ampbench.report.compare import CompareError, compare_runs, format_text
from ampbench.export import cli as export_cli
from ampbench.history import cli as history_cli
from ampbench.history.connect import HistoryError
from ampbench.report import Run, RunError, build_report, failed_tests, load_run, render_comparison_markdown, write_report
from ampbench.progress import Progress
from ampbench.baselines.spread import learn, with_spread
from ampbench.verdict import Verdict

# exit statuses: 0 all good, 1 a failing verdict (a regression, a non-finite or failed reference cell, a
# cell whose test stopped with an error; under --strict also an inconclusive one), 2 bad usage or unusable
# input, like argparse's own usage errors
EXIT_OK, EXIT_REGRESSION, EXIT_BAD_INPUT = 0, 1, 2
# the status a shell gives a tool stopped by SIGPIPE: the reader of the output went away (`| head -1`)
EXIT_PIPE_CLOSED = 128 + 13


def _tolerances(args: argparse.Namespace) -> dict:
    return dict(tolerance=args.tolerance, memory_tolerance=args.memory_tolerance,
                accuracy_tolerance=args.accuracy_tolerance, cross_device=args.cross_device)


def _read(path: Path, progress: Progress) -> Run:
    progress(f"reading {path}")
    return load_run(path)


def _open_history(args: argparse.Namespace):
    """The store --history names, opened before anything is read or written; None without --history."""
    if args.history is None:
        return None
    from ampbench.history.store import open_history  # SQLAlchemy only where a history is asked for

    return open_history(args.history, create=False, read_only=True)


def _report(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if args.gpu is not None and args.history is None:
        print("ampbench: error: report --gpu names the GPU model of --history's runs; give --history", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        history = _open_history(args)
    except HistoryError as error:
        print(f"ampbench: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with Progress.for_files("report", [args.run, args.compare]) as progress:
        run, old = (_read(path, progress) if path else None for path in (args.run, args.compare))
        progress.cells(max(len(run.cells), len(old.cells) if old else 0))
        comparison = compare_runs(old, run, **_tolerances(args), progress=progress) if old else None
        failures = failed_tests(args.junit) if args.junit else ()
        trends = _trends(history, run, args.gpu, progress)
        files = build_report(run, comparison, failures, progress, trends)
        progress("writing the report")
        written = write_report(args.output, files)
    print(f"ampbench: report of {args.run} ({len(run.cells)} results, {run.gpu}) written to "
          f"{written}/index.html in {time.perf_counter() - t0:.1f} s")
    if trends is not None:
        print(f"ampbench: trends of {len(trends.cells)} cells on {trends.gpu} from the history {trends.store}")
    own = [c for c in run.cells if c.verdict is not None and c.verdict.failing]
    for c in own:
        print(f"{str(c.verdict).upper()}: {c.test_id}: {c.message or ''}")
    if comparison is not None:
        for note in comparison.notes[:comparison.headlines]:
            print(f"ampbench: {note}")
        for r in comparison.failures:
            print(f"{str(r.verdict).upper()} against {args.compare.name}: {r.message}")
        for r in comparison.missing:
            print(f"MISSING against {args.compare.name}: {r.test_id}: {r.message}")
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


def _compare(args: argparse.Namespace) -> int:
    with Progress.for_files("compare", [args.old, args.new]) as progress:
        old, new = (_read(path, progress) for path in (args.old, args.new))
        progress.cells(max(len(old.cells), len(new.cells)))
        comparison = compare_runs(old, new, **_tolerances(args), progress=progress)
        progress("writing the table")
        text = format_text(comparison, all_rows=not args.changes_only)
    sys.stdout.write(text)
    if args.markdown is not None:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write("\n".join(render_comparison_markdown(comparison)) + "\n")
    return EXIT_REGRESSION if comparison.failed(args.strict, args.allow_missing) else EXIT_OK


def _spread_values(cell) -> str:
    earlier = f"({cell.prior.count} earlier) " if cell.prior else ""
    return earlier + " ".join(f"{s:.3f}" for s in cell.speedups)


def _spread(args: argparse.Namespace) -> int:
    document = load_document(args.baseline)
    paths = list(dict.fromkeys(p.resolve() for p in args.runs))  # a path given twice counts once
    learned = learn(document["entries"], [load_run(p) for p in paths], add=args.add)
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


def _baselines_show(args: argparse.Namespace) -> int:
    text = render_file(args.baseline, args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(args.output, text)
        print(f"ampbench: {args.baseline} rendered to {args.output}")
    return EXIT_OK


def _baselines_merge(args: argparse.Namespace) -> int:
    paths = ([args.baseline] if args.baseline.exists() else []) + list(args.recorded)
    documents = [load_document(p) for p in paths]
    gpus = {p: d["gpu"] for p, d in zip(paths, documents)}
    if len(set(gpus.values())) > 1:
        shown = ", ".join(f"{p} ({gpu})" for p, gpu in gpus.items())
        print(f"ampbench: error: baseline files of different GPUs: {shown}", file=sys.stderr)
        return EXIT_BAD_INPUT
    entries, given = latest_entries(documents)
    print(f"ampbench: {len(entries)} entries: " + ", ".join(f"{n} from {p}" for p, n in zip(paths, given)))
    if args.dry_run:
        print(f"ampbench: --dry-run: {args.baseline} left as it was")
        return EXIT_OK
    write_atomic(args.baseline, dict(documents[0], entries=entries))
    print(f"ampbench: merged into {args.baseline}")
    return EXIT_OK


def _fidelity(args: argparse.Namespace) -> int:
    # imported here: the other commands run without torch
    from ampbench import fidelity
    from ampbench.device import configure_backends, resolve

    try:
        cells = [fidelity.parse_cell(c) for c in args.cells] or list(fidelity.DEFAULT_CELLS)
        device = resolve(args.device, flag="--device")
    except (fidelity.FidelityError, RuntimeError) as exc:
        print(f"ampbench fidelity: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    smoke = device.type != "cuda"
    configure_backends(device, cudnn_benchmark=args.cudnn_benchmark)
    if smoke:
        print(f"ampbench fidelity: no CUDA device ({device}): smoke shapes, the figures say nothing about a GPU "
              "and no difference fails the check")
    worst = 0.0
    for row in fidelity.check(cells, device, smoke, args.repeats):
        print(fidelity.format_row(row), flush=True)
        worst = max(worst, abs(row.difference))
    held = "not held on a smoke run" if smoke else f"target: within {args.target:.0%}"
    print(f"fidelity worst |difference| {worst:.2%} ({held})", flush=True)
    for model, mode in cells if args.naive else ():
        good, naive = fidelity.practice_gap(model, mode, device, smoke)
        print(f"practice {model:9s} {mode:9s} good practice {good:.3f}x, naive loop {naive:.3f}x: good practice "
              f"is worth {good / naive - 1:+.1%} (both against the same plain fp32 loop)", flush=True)
    # a smoke run only shows the check works: a difference of tiny shapes on a CPU is no finding
    return EXIT_REGRESSION if worst > args.target and not smoke else EXIT_OK


def _fp8_width(args: argparse.Namespace) -> int:
    # imported here: the other commands run without torch
    from ampbench import fp8_width
    from ampbench.device import configure_backends, device_name, resolve
    from ampbench.modes import get_mode
    from ampbench.models import get_model

    def bad_input(exc: Exception) -> int:
        print(f"ampbench fp8-width: error: {exc.args[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        spec, rule, mode = get_model(args.model), fp8_width.rule_for(args.model), get_mode(args.mode)
        device = resolve(args.device, flag="--device")
    except (KeyError, RuntimeError, fp8_width.WidthError) as exc:
        return bad_input(exc)
    configure_backends(device)
    points = []
    try:
        # the sweep's WidthErrors come before anything is timed: a width, then the device's needs
        for point in fp8_width.sweep(spec, args.widths or rule.widths, mode, device, smoke=device.type != "cuda"):
            print(fp8_width.format_point(args.model, mode, point), flush=True)
            points.append(point)
    except fp8_width.WidthError as exc:
        return bad_input(exc)
    found = fp8_width.crossover(points)
    print(f"{args.model} {args.mode}: {found or 'no measured width where it turns from a loss into a gain'}")
    if args.json is not None:
        write_atomic(args.json, {"model": args.model, "mode": args.mode, "device": device_name(device),
                                 "points": [p.as_dict() for p in points],
                                 "crossover_width": found.width if found else None})
    return EXIT_OK


def _list(args: argparse.Namespace) -> int:
    from ampbench import catalog, models  # imports torch, which the other file commands do without

    try:
        models.check_entry_points()
    except models.ModelEntryPointError as exc:
        print(f"ampbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(json.dumps(catalog.as_json(), indent=1) + "\n" if args.json else catalog.render_text())
    return EXIT_OK


COMMANDS = {"list": _list, "report": _report, "compare": _compare, "spread": _spread, "fidelity": _fidelity,
            "fp8-width": _fp8_width, "baselines": lambda args: BASELINE_ACTIONS[args.baselines_command](args),
            "history": history_cli.run, "export": export_cli.command}
BASELINE_ACTIONS = {"show": _baselines_show, "merge": _baselines_merge, "export": history_cli.export}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status = COMMANDS[args.command](args)
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
        # an output path that cannot be written: name the path the user gave (a failed rename's target,
        # not the temp file beside it), without errno's numbering
        path = exc.filename2 or exc.filename
        print(f"ampbench: error: {path}: {exc.strerror}" if path and exc.strerror else f"ampbench: error: {exc}",
              file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
