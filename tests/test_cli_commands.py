"""Every command module declares its own subcommands (``add_parser``) and the handler that runs each, and
``cli.args`` only lists the modules; ``ampbench export``'s formats are one table, which its choices,
help, epilog and dispatch read."""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.cli import ab, baselines, bisect, catalog, history, measuring, record, runs
from ampbench.cli import args as cli_args
from ampbench.cli.args import COMMAND_MODULES, build_parser
from ampbench.cli.command import main
from ampbench.export import cli as export_cli
from ampbench.export.figures import Figures

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "tests" / "data" / "h100_speed_device.json"  # a real quick-tier run on an H100


def _choices(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _leaves(parser: argparse.ArgumentParser):
    """The parsers that run something: those without subcommands of their own."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for sub in action.choices.values():
            yield from _leaves(sub)


def _declared(module) -> list[str]:
    sub = argparse.ArgumentParser(prog="ampbench").add_subparsers()
    module.add_parser(sub)
    return list(sub.choices)


def test_the_table_of_command_modules_declares_every_subcommand_in_order():
    declared = [name for module in COMMAND_MODULES for name in _declared(module)]
    assert declared == list(_choices(build_parser()))
    assert declared == ["list", "report", "compare", "spread", "baselines", "fidelity", "fp8-width", "history",
                        "export", "bisect", "ab"]
    # the table only lists: every option is declared by the module that runs it
    assert ".add_argument(" not in inspect.getsource(cli_args)


def test_every_subcommand_runs_a_handler_of_the_module_that_declares_it():
    leaves = list(_leaves(build_parser()))
    handlers = {p.prog: p.get_default("handler") for p in leaves}
    assert len(leaves) == 19 and all(callable(h) for h in handlers.values()), handlers
    assert len(set(handlers.values())) == len(handlers), "two subcommands share a handler: a dispatch by name"
    for prog, handler in handlers.items():
        module = sys.modules[handler.__module__]
        assert hasattr(module, "add_parser"), f"{prog}: run by {handler.__module__}, which declares no parser"


@pytest.mark.parametrize("module, name, argv", [
    (catalog, "command", ["list"]),
    (runs, "report", ["report", "r.json"]),
    (runs, "compare", ["compare", "a.json", "b.json"]),
    (baselines, "spread", ["spread", "b.json", "r.json"]),
    (baselines, "merge", ["baselines", "merge", "b.json", "r.json"]),
    (record, "command", ["baselines", "record", "--runs", "3"]),
    (measuring, "_fidelity", ["fidelity"]),
    (measuring, "_fp8_width", ["fp8-width", "llama"]),
    (history, "_changes", ["history", "changes"]),
    (export_cli, "command", ["export", "r.json", "--format", "bmf"]),
    (bisect, "command", ["bisect"]),
    (ab, "command", ["ab", "--base", "main"]),
], ids=lambda v: v if isinstance(v, str) else None)
def test_main_runs_the_handler_the_parser_set(monkeypatch, module, name, argv):
    seen = []
    monkeypatch.setattr(module, name, lambda args: seen.append(args.command) or 7)
    assert main(argv) == 7 and seen == [argv[0]]


def test_the_parser_and_its_help_import_no_torch():
    """fidelity and fp8-width are declared apart from their work (cli.measuring): --help starts without torch."""
    code = ("import sys; from ampbench.cli.args import build_parser; build_parser().format_help(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         check=False)
    assert run.returncode == 0, run.stderr


# -- export's formats ------------------------------------------------------------------------------


def _export_parser() -> argparse.ArgumentParser:
    return _choices(build_parser())["export"]


def _format_option(parser: argparse.ArgumentParser) -> argparse.Action:
    return next(a for a in parser._actions if "--format" in a.option_strings)


def test_the_format_option_reads_the_table():
    parser = _export_parser()
    option = _format_option(parser)
    assert list(option.choices) == list(export_cli.FORMATS)
    assert option.help == "bmf, github, github-margin, pytest-benchmark or conbench (refused, saying why)"
    for name, fmt in export_cli.FORMATS.items():
        assert f"{name}: {'refused: ' * fmt.refused}{fmt.what}" in parser.epilog


def test_a_format_added_to_the_table_is_a_choice_named_in_the_help_and_written(monkeypatch, tmp_path, capsys):
    written = []

    def lines(figures: Figures) -> list[str]:
        written.append(figures)
        return [f.test_id for f in figures.figures]

    monkeypatch.setitem(export_cli.FORMATS, "lines", export_cli.Format("one test id per gated figure", lines))
    parser = _export_parser()
    assert "lines" in _format_option(parser).choices
    assert _format_option(parser).help.endswith("conbench (refused, saying why) or lines")
    assert "lines: one test id per gated figure" in parser.epilog
    out = tmp_path / "lines.json"
    assert main(["export", str(RUN), "--format", "lines", "-o", str(out)]) == 0
    assert len(written) == 1 and json.loads(out.read_text()) == [f.test_id for f in written[0].figures]
    assert "lines of" in capsys.readouterr().err


def test_a_whole_run_format_gets_the_runs_json_and_a_refused_one_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(export_cli.FORMATS, "names", export_cli.Format(
        "the names of the run's benchmarks", lambda run: [b["name"] for b in run["benchmarks"]], whole_run=True))
    assert main(["export", str(RUN), "--format", "names"]) == 0
    names = json.loads(capsys.readouterr().out)
    assert names == [b["name"] for b in json.loads(RUN.read_text())["benchmarks"]]

    def refuse(figures: Figures) -> None:
        raise export_cli.ExportError("--format nothing: no dashboard reads it")

    monkeypatch.setitem(export_cli.FORMATS, "nothing", export_cli.Format("no format", refuse, refused=True))
    assert _format_option(_export_parser()).help.endswith("or nothing (refused, saying why)")
    assert main(["export", str(RUN), "--format", "nothing"]) == 2
    assert "no dashboard reads it" in capsys.readouterr().err
