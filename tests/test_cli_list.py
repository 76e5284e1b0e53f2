"""`ampbench list`, every command's help, and output into a closed pipe."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.cli import EXIT_OK, main

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
REAL_H100 = DATA / "h100_run.json"
GPU_RUN = REAL_H100 if REAL_H100.exists() else DATA / "synthetic_h100_quick.json"


# ---------------------------------------------------------------------------------------------------
# ampbench list


def test_list_names_every_model_with_its_tier_and_every_mode_with_its_needs(capsys):
    from ampbench import models
    from ampbench.modes import MODES

    assert main(["list"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if line and line.split()[0] in {*models.REGISTRY, *MODES}}
    assert list(rows) == [*models.REGISTRY, *MODES], "one row per model, then per mode, in test order"
    assert rows["resnet50"][1:7] == ["quick", "128", "2", "when", "named", "yes"]  # the CPU pass leaves it out
    assert rows["dpn92"][1:3] == ["full", "128"]
    fp8 = next(line for line in lines if line.startswith("fp8_rowwise "))
    assert "compute capability 8.9" in fp8 and "torchao" in fp8 and "torch.compile" in fp8 and " no " in fp8
    assert " quick, full, compile " in next(line for line in lines if line.startswith("amp_bf16 "))


def test_list_as_json(capsys):
    from ampbench import models
    from ampbench.modes import MODES

    assert main(["list", "--json"]) == EXIT_OK
    listed = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in listed["models"]] == list(models.REGISTRY)
    assert [m["name"] for m in listed["modes"]] == list(MODES)
    tf32 = next(m for m in listed["modes"] if m["name"] == "tf32")
    assert tf32["on_cpu"] is False and tf32["needs"] == ["TF32 needs an NVIDIA GPU of compute capability 8.0 (Ampere) or newer"]
    assert next(m for m in listed["models"] if m["name"] == "gpt")["in_compile_tier"] is True


def _parsers(parser: argparse.ArgumentParser):
    """`parser` and every subcommand's parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_no_help_text_shows_a_doubled_percent_sign():
    """argparse halves '%%' in an option's help but prints a description or epilog as written."""
    from ampbench.cli_args import build_parser
    from ampbench.plugin.options import add_options

    texts = {p.prog: p.format_help() for p in _parsers(build_parser())}
    plugin = argparse.ArgumentParser(prog="pytest")  # pytest's --help formats the options with argparse too
    group = plugin.add_argument_group("perf")
    add_options(type("Group", (), {"addoption": staticmethod(group.add_argument)}))
    texts["pytest"] = plugin.format_help()
    assert len(texts) > 10 and "99% interval" in texts["ampbench compare"]
    assert [prog for prog, text in texts.items() if "%%" in text] == []


@pytest.mark.parametrize("args", [["list"], ["compare", str(GPU_RUN), str(GPU_RUN)]], ids=["list", "compare"])
def test_output_into_a_closed_pipe_ends_quietly(args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-m", "ampbench", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=env)
    child.stdout.close()  # the reader is gone before the first line, as `| head -0` leaves it
    err = child.stderr.read().decode()
    assert child.wait(timeout=300) == 141 and err == "", err
