"""``ampbench spread`` and ``ampbench baselines show|merge|export``: the per-GPU baseline files taught
their between-run spread from saved runs, rendered as Markdown, merged from parts, and written from the
run history."""

from __future__ import annotations

import argparse
import sys

from ampbench.baselines.show import render_file
from ampbench.baselines.spread import learn_spread, with_spread
from ampbench.baselines.store import BaselineError, latest_entries, load_document
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.cli import record as record_cli
from ampbench.cli.history import history_store
from ampbench.files.write import described, same_file, write_atomic, write_text_atomic
from ampbench.history.connect import HistoryError
from ampbench.report import load_run


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
    print(f"ampbench: {len(entries)} entries: " + ", ".join(f"{n} from {p}" for p, n in zip(paths, given)))
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
        print(f"ampbench: {written} {'entry' if written == 1 else 'entries'} written from the history {args.history} to {path}")
    return EXIT_OK


BASELINE_ACTIONS = {"show": show, "merge": merge, "export": export, "record": record_cli.command}


def command(args: argparse.Namespace) -> int:
    return BASELINE_ACTIONS[args.baselines_command](args)
