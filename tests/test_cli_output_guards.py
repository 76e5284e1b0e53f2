"""What the ``ampbench`` command writes where writing fails or the reader is a narrow terminal: a
comparison appended to a step summary whole or not at all, a full disk named with its file in plain
words, text the output's encoding lacks printed as escapes; and what it says of what a user typed: a
GPU the history does not hold, a baseline folder that is none, the subcommands its help lists."""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.args import build_parser
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.history.store import open_history
from history_runs import H100, speed_record, speed_run

DATA = Path(__file__).parent / "data"
OLD, NEW = DATA / "synthetic_h100_device.json", DATA / "h100_speed_device.json"
ROOT = Path(__file__).resolve().parents[1]
FULL = Path("/dev/full")


def _ampbench(*argv: str, stdout=subprocess.PIPE, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ampbench", *argv], cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE,
                          text=True, env={**os.environ, **env}, timeout=120)


# -- a full disk ------------------------------------------------------------------------------------------

def test_a_full_disk_leaves_the_step_summary_as_it_was(tmp_path, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("## earlier step\n")
    inode = summary.stat().st_ino
    real_write = os.write

    def half_then_full(fd, data):
        if os.fstat(fd).st_ino != inode:
            return real_write(fd, data)
        if len(data) > 100:  # the first part lands, then the disk fills
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    assert main(["compare", str(OLD), str(NEW), "--markdown", str(summary)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == f"ampbench: error: {summary}: cannot be written: the disk is full\n"
    assert summary.read_text() == "## earlier step\n"


def test_the_comparison_is_appended_whole(tmp_path, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("## earlier step\n")
    assert main(["compare", str(OLD), str(NEW), "--markdown", str(summary)]) != EXIT_BAD_INPUT
    text = summary.read_text()
    assert text.startswith("## earlier step\n") and text.endswith("\n") and text.count("|") > 100


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [["compare", str(OLD), str(NEW)], ["export", str(NEW), "--format", "bmf"]])
def test_standard_output_on_a_full_disk_is_named_in_plain_words(argv):
    with FULL.open("w") as full:
        done = _ampbench(*argv, stdout=full)
    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr == "ampbench: error: standard output (/dev/full): cannot be written: the disk is full\n"


@pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")
def test_a_markdown_file_on_a_full_disk_is_named_in_plain_words():
    done = _ampbench("compare", str(OLD), str(NEW), "--markdown", str(FULL))
    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr == "ampbench: error: /dev/full: cannot be written: the disk is full\n"


# -- what a user typed ----------------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "h.sqlite"
    history = open_history(str(path))
    for i in range(2):
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6)], at=i, label="café ☕ stack"))
    history.release()
    return path


def test_history_runs_prints_what_an_ascii_output_cannot_hold_as_escapes(store):
    done = _ampbench("history", "runs", "--history", str(store), PYTHONIOENCODING="ascii")
    assert done.returncode == EXIT_OK, done.stderr
    assert "caf\\xe9 \\u2615 stack" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["runs", "report"])
def test_a_gpu_the_history_does_not_hold_is_an_error_naming_those_it_holds(store, tmp_path, capsys, command):
    argv = (["history", "runs"] if command == "runs" else
            ["report", str(NEW), "-o", str(tmp_path / "report")])
    assert main([*argv, "--history", str(store), "--gpu", "NVIDIA H100 80GB HMB3"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert (f"--gpu 'NVIDIA H100 80GB HMB3': no run on that GPU; did you mean {H100!r}? it holds runs on {H100!r}"
            in err)
    assert main([*argv, "--history", str(store), "--gpu", H100]) == EXIT_OK


@pytest.mark.parametrize("folder", ["missing", "a-file"])
def test_explain_refuses_a_baseline_folder_that_is_none(store, tmp_path, capsys, folder):
    (tmp_path / "a-file").write_text("{}")
    with pytest.raises(SystemExit) as exit_:
        main(["history", "explain", "test_speed[gpt-amp_bf16]", "--history", str(store),
              "--baseline-dir", str(tmp_path / folder)])
    assert exit_.value.code == EXIT_BAD_INPUT
    expected = "no such folder" if folder == "missing" else "not a folder"
    assert f"argument --baseline-dir: {tmp_path / folder}: {expected}" in capsys.readouterr().err


def test_explain_reads_a_baseline_folder_that_is_one(store, tmp_path, capsys):
    assert main(["history", "explain", "test_speed[gpt-amp_bf16]", "--history", str(store),
                 "--baseline-dir", str(tmp_path)]) == EXIT_OK
    assert "test_speed[gpt-amp_bf16] device_speedup on NVIDIA H100 80GB HBM3: 2 runs" in capsys.readouterr().out


def test_counts_of_one_are_singular(tmp_path, capsys):
    assert main(["history", "import", str(NEW), "--history", str(tmp_path / "h.sqlite")]) == EXIT_OK
    assert f"ampbench: 1 run imported into {tmp_path / 'h.sqlite'}" in capsys.readouterr().out


# -- the help ---------------------------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_the_help_names_every_subcommand_and_each_groups_actions():
    parser = build_parser()
    top = parser.format_help()
    for name, command in _subcommands(parser).items():
        assert f"\n    {name}" in top, name
        if not any(isinstance(a, argparse._SubParsersAction) for a in command._actions):
            continue
        # a group's line in the top-level list names each of its actions
        (line,) = [a.help for a in parser._subparsers._group_actions[0]._choices_actions if a.dest == name]
        for action in _subcommands(command):
            assert action in line, f"`ampbench --help` does not name `{name} {action}`: {line!r}"
