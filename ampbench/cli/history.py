"""``ampbench history``: import saved runs into the history, list its runs, explain a cell, list its
changes, accept a moved cell's new level, list the fleet's cards. The arguments (``add_parser``, called by
``ampbench.cli.args``) and the actions, each its parser's handler; a store's HistoryError ends them in
``command.main``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ampbench.cli.common_args import add_baseline_dir, add_gpu, add_history, add_runs
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.cli.values import whole_number
from ampbench.files import paths
from ampbench.history.cards import OUTLIER_Z, SPREAD_FLOOR
from ampbench.history.ingest import FIGURES
from ampbench.printable import one_line, plural, printable
from ampbench.results import MemoryRecord
from ampbench.results.ratios import DEVICE, history_figures
from ampbench.settings import value_error_type

if TYPE_CHECKING:  # SQLAlchemy only where a command opens a history
    from ampbench.history.store import History

DEFAULT_LIMIT = 20
MAX_REASON = 500  # characters of an acceptance's reason: a sentence or two, one line
MAX_LIMIT = 10**9  # more runs than any history holds, and within the databases' integers


# what each command's help says of it (argparse fills the text to the terminal's width)
_HISTORY_ABOUT = """The history every `pytest perf/` run on a GPU appends to (--perf-history; on the CPU only where
it is given): import saved run JSONs into it, list its runs, explain what it decided of a cell, list its changes,
accept a moved cell's new level, list the fleet's cards."""

_IMPORT_ABOUT = """Append each RUN.json to the history, each in one transaction. A run already there (the run the
plugin appended, or a file imported before) is left as it is; a file that is not a usable run is reported and
nothing of it is written, the others are imported."""

_RUNS_ABOUT = """List the runs in the history, newest first: id, time (UTC), GPU, cells, failing cells, cells held
back as suspect (device time: below their level by more than noise says, not learned from until later runs clear
them or the change is accepted), label, suite revision and where each came from."""

_ACCEPT_ABOUT = """Record that a cell's new level, from RUN_ID on, is intended (an upgrade, a deliberate change):
its reference level restarts at that run, its learned noise is kept. Without --cell, every cell of the run is
accepted."""

_EXPLAIN_ABOUT = """List every run of a cell's series as the gate replays it (counted, held back as suspect, failed,
and why), its level segments, the noise within and between cards, each card's level and tolerance (and a new
card's), and the changes found."""

_CHANGES_ABOUT = """Find the change points in each cell's series (ruptures' PELT, its penalty fitted to the cell's
noise) and list each with the runs around it, what differs between them (label, suite revision, torch, CUDA, cuDNN,
driver, Triton, torchao, card) and the kernels whose time moved most between the two segments."""

_CARDS_ABOUT = f"""List the fleet's cards per GPU model from the history: each card (its UUID) in each speed cell, its
runs, its median fp32 device time per step, how far that lies from the median of the model's other cards (on the
software and device-time method of the cell's latest run), in spreads, and whether that names it an outlier card
(beyond {OUTLIER_Z} spreads; the spread is the other cards' robust sd, at least {SPREAD_FLOOR:.1%})."""

_CHANGES_EXITS = "0 listed (with or without changes), 2 a cell the history holds no series of, or the store."


def figures() -> tuple[str, ...]:
    """The series `--figure` names (`history changes` looks at all of them by default): each ratio's a
    history learns (``results.ratios.history_figures``: the gated device-time ones first, then the
    wall-clock speedup), then the memory cells'."""
    return (*history_figures(), *FIGURES[MemoryRecord])


_limit = whole_number(1, MAX_LIMIT)


def _reason(value: str) -> str:
    return one_line(value, MAX_REASON)


def _folder(value: str) -> Path:
    """An existing folder a command reads from: a misspelt one would read as a folder without files."""
    path = Path(value)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value}: no such folder")
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{value}: not a folder")
    return path


def history_store(args: argparse.Namespace, *, create: bool, read_only: bool) -> History:
    """The history --history names, opened (``history.store.open_history``); every command that opens
    one comes here, so that SQLAlchemy is imported only where a history is asked for."""
    from ampbench.history.store import open_history

    return open_history(args.history, create=create, read_only=read_only)


def _command(actions: argparse._SubParsersAction, name: str, help: str, about: str, exits: str | None,
             handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """One `history` action: its help, description and exit statuses (None: the command's usual ones), the
    --history it reads, and the function it runs."""
    parser = add_history(actions.add_parser(name, help=help, description=about,
                                            epilog=f"Exit status: {exits}" if exits else None))
    parser.set_defaults(handler=handler)
    return parser


def add_parser(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """`ampbench history` and its actions; the actions' subparsers, for more actions."""
    his = sub.add_parser("history",
                         help="the run history: import saved runs, list runs, explain a cell, list its changes, "
                              "accept a change, list the cards",
                         description=_HISTORY_ABOUT)
    actions = his.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    imp = _command(actions, "import", "append saved runs (pytest --benchmark-json files) to the history",
                   _IMPORT_ABOUT, "0 every file imported or already there, 2 a file unusable or the store.", _import)
    add_runs(imp, "benchmark JSON of saved runs")
    runs = _command(actions, "runs", "list the history's runs, newest first", _RUNS_ABOUT, None, _runs)
    add_gpu(runs, "only runs on this GPU model, e.g. 'NVIDIA H100 80GB HBM3' (default: every GPU)")
    runs.add_argument("--limit", type=_limit, metavar="N", default=DEFAULT_LIMIT,
                      help=f"at most N runs (default: {DEFAULT_LIMIT})")
    acc = _command(actions, "accept", "accept a moved cell's new level from a run on",
                   _ACCEPT_ABOUT, "0 accepted, 2 an unknown run or cell, or the store.", _accept)
    acc.add_argument("run_id", metavar="RUN_ID", help="the run the new level starts from (`ampbench history runs`)")
    acc.add_argument("--cell", metavar="TEST_ID", default=None,
                     help="the cell, e.g. 'test_speed[resnet50-amp_bf16]' (default: every cell of the run)")
    acc.add_argument("--reason", metavar="TEXT", required=True, type=value_error_type(_reason),
                     help=f"why the new level is intended: one line of at most {MAX_REASON} characters")
    exp = _command(actions, "explain", "what the history decided of one cell, with its numbers",
                   _EXPLAIN_ABOUT, "0 explained, 2 an unknown cell or GPU, or the store.", _explain)
    exp.add_argument("test_id", metavar="TEST_ID", help="the cell, e.g. 'test_speed[gpt-amp_fp16]'")
    add_gpu(exp, "the GPU model (or N of one) of its series (default: the only one it has runs on)")
    exp.add_argument("--figure", metavar="NAME", default=DEVICE.history, choices=figures(),
                     help=f"the figure whose series is explained (default: {DEVICE.history})")
    add_baseline_dir(exp, "where the baseline file whose spread the gate pools in lives (default: "
                          f"{paths.BASELINE_DIR}/, where there is one)", default=None, type=_folder)
    chg = _command(actions, "changes", "list where each cell's figures moved to another level, and across what",
                   _CHANGES_ABOUT, _CHANGES_EXITS, _changes)
    add_gpu(chg, "only this GPU model (default: every one)")
    chg.add_argument("--cell", metavar="TEST_ID", default=None, help="only this cell (default: every cell)")
    chg.add_argument("--figure", metavar="NAME", default=DEVICE.history, choices=("all", *figures()),
                     help=f"the figure whose series are looked at, or all (default: {DEVICE.history})")
    crd = _command(actions, "cards", "list the fleet's cards per GPU model, and the outlier cards",
                   _CARDS_ABOUT, "0 listed (with or without outlier cards), 2 an unknown GPU, or the store.", _cards)
    add_gpu(crd, "only this GPU model, e.g. 'NVIDIA H100 80GB HBM3' (default: every GPU model)")
    return actions


def _import(args: argparse.Namespace) -> int:
    from ampbench.history.ingest import Imported, append_runs, read_runs

    read = read_runs(args.runs)
    if all(isinstance(row, str) for _, row in read):  # no store is made, or opened, for nothing to import
        for _, error in read:
            print(printable(f"ampbench: error: {error}"), file=sys.stderr)
        print(f"ampbench: nothing imported into {args.history}: no file given is a usable run")
        return EXIT_BAD_INPUT
    history = history_store(args, create=True, read_only=False)
    outcomes: list[Imported] = append_runs(history, read)
    for o in outcomes:
        if o.error:
            print(printable(f"ampbench: error: {o.error}"), file=sys.stderr)
        else:
            done = "imported" if o.appended else "already in the history"
            print(printable(f"{o.path}: run {o.run_id} ({plural(o.cells, 'cell')}) {done}"))
    added = sum(o.appended for o in outcomes)
    bad = sum(o.error is not None for o in outcomes)
    there = len(outcomes) - added - bad
    print(f"ampbench: {plural(added, 'run')} imported into {history.name}, {there} already there"
          + (f", {bad} unusable" if bad else ""))
    return EXIT_BAD_INPUT if bad else EXIT_OK


def _runs(args: argparse.Namespace) -> int:
    history = history_store(args, create=False, read_only=True)
    if args.gpu is not None:
        history.check_gpu(args.gpu)
    runs = history.runs(gpu=args.gpu, limit=args.limit)
    if not runs:
        print(f"ampbench: no runs in {history.name}" + (f" on {args.gpu}" if args.gpu else ""))
        return EXIT_OK
    from ampbench.history.explain import suspect_runs

    gpus = sorted({g for g in history.series_gpus() for r in runs if not r.smoke and g.startswith(r.gpu)})
    held = suspect_runs(history, gpus)
    header = ("run", "time (UTC)", "gpu", "cells", "failing", "suspect", "label", "revision", "source")
    # a label, a revision, even a GPU name comes from a run's file: printed, never acted on by the terminal
    rows = [tuple(printable(t) for t in (
                r.id, r.when[:16].replace("T", " "), f"{r.gpu} (smoke)" if r.smoke else r.gpu, str(r.cells),
                str(r.failing), str(held.get(r.id, 0)), r.label or "-", r.suite_revision or "-", r.source))
            for r in runs]
    widths = [max(len(t) for t in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(t.ljust(w) for t, w in zip(row, widths)).rstrip())
    return EXIT_OK


def _accept(args: argparse.Namespace) -> int:
    history = history_store(args, create=False, read_only=False)
    done = history.accept(args.run_id, args.cell, args.reason)
    what = done.test_id or "every cell"
    print(printable(f"ampbench: accepted {what} of run {done.run_id} on {done.gpu}: the level restarts there "
                    f"({done.reason})"))
    return EXIT_OK


def _explain(args: argparse.Namespace) -> int:
    from ampbench.history.explain import explain

    history = history_store(args, create=False, read_only=True)
    baseline_dir = paths.BASELINE_DIR if args.baseline_dir is None else args.baseline_dir
    print("\n".join(printable(line) for line in explain(history, args.test_id, args.gpu,
                                                        args.figure, baseline_dir)))
    return EXIT_OK


def _changes(args: argparse.Namespace) -> int:
    from ampbench.history.list_changes import changes_in, describe

    history = history_store(args, create=False, read_only=True)
    looked_at = figures() if args.figure == "all" else (args.figure,)
    known = history.series_gpus()
    if args.gpu is not None and args.gpu not in known:  # a typo would read as "no change"
        print(f"ampbench: warning: --gpu {args.gpu!r}: {history.name} holds no series of it; it holds "
              f"{', '.join(repr(g) for g in known) or 'none'}", file=sys.stderr)
    if args.cell is not None:
        _check_cell(history, args.cell, [args.gpu] if args.gpu is not None else known)
    found = 0
    for gpu in [args.gpu] if args.gpu is not None else known:
        for change in changes_in(history, gpu, looked_at, {args.cell} if args.cell else None):
            found += 1
            print("\n".join(printable(line) for line in describe(history, change)))
    where = f"{args.gpu}" if args.gpu else "every GPU model"
    print(f"ampbench: {found} change{'s' * (found != 1)} in {', '.join(looked_at)} of {where} in {history.name}")
    return EXIT_OK


def _cards(args: argparse.Namespace) -> int:
    from ampbench.history.cards import fleet  # reads a store: SQLAlchemy

    history = history_store(args, create=False, read_only=True)
    if args.gpu is not None:
        history.check_gpu(args.gpu)
    gpus = [args.gpu] if args.gpu is not None else [g for g in history.run_gpus() if g != "cpu"]
    header = ("cell", "card", "runs", "fp32 ms/step", "vs level", "spreads", "outlier")
    outliers: set[str] = set()
    for gpu in gpus:
        rows = fleet(history, gpu)
        if not rows:
            print(printable(f"ampbench: {gpu}: no speed cell of a run that names its card (UUID) holds an fp32 "
                            "device time"))
            continue
        table = [tuple(printable(t) for t in (
            r.test_id, r.card, str(r.runs), f"{r.step_ms:.3f}",
            f"{r.standing.off:+.2%}" if r.standing else "-", f"{r.standing.z:+.1f}" if r.standing else "-",
            ("yes" if r.standing.outlier else "no") if r.standing else "- (the only card)")) for r in rows]
        outliers |= {r.card for r in rows if r.standing is not None and r.standing.outlier}
        widths = [max(len(t) for t in column) for column in zip(header, *table)]
        print(printable(f"{gpu}: {plural(len({r.card for r in rows}), 'card')}"))
        for row in (header, *table):
            print("  " + "  ".join(t.ljust(w) for t, w in zip(row, widths)).rstrip())
    named = ", ".join(sorted(outliers)) if outliers else "none"
    print(printable(f"ampbench: outlier cards in {history.name}: {named}"))
    return EXIT_OK


def _check_cell(history: History, test_id: str, gpus: list[str]) -> None:
    """HistoryError where no series of `gpus` is of `test_id`: a misspelt cell would read as "no change"."""
    from difflib import get_close_matches

    cells = sorted({c for gpu in gpus for c in history.cells(gpu)})
    if test_id in cells:
        return
    near = get_close_matches(test_id, cells, n=1)
    shown = ", ".join(cells[:3]) + (f" and {len(cells) - 3} more" if len(cells) > 3 else "")
    hint = f"did you mean {near[0]}?" if near else f"it holds {shown}" if cells else "it holds none"
    raise history.fail(f"--cell {test_id!r}: no series of that cell" + (f" on {gpus[0]}" if len(gpus) == 1 else "")
                       + f" ({hint})")
