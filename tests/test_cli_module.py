"""The `ampbench` command as a module and a program: ``python -m ampbench``, its help, a report folder
written twice, refused runs, ``ampbench list``, and output into a closed pipe."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from report_runs import DATA, gpu_run, slower_run

ROOT = Path(__file__).parent.parent
GPU_RUN = gpu_run()


# ---------------------------------------------------------------------------------------------------
# the entry points


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "ampbench", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


def test_python_dash_m_ampbench_has_help_for_each_command():
    top = _run_module("--help")
    assert top.returncode == 0 and all(c in top.stdout for c in ("report", "compare", "spread"))
    for command in ("report", "compare"):
        sub = _run_module(command, "--help")
        assert sub.returncode == 0 and "--tolerance" in sub.stdout
    spread = _run_module("spread", "--help")
    assert spread.returncode == 0 and "--dry-run" in spread.stdout and "between_run_sd" in spread.stdout


def test_python_dash_m_ampbench_compare_exit_status(tmp_path):
    assert _run_module("compare", str(GPU_RUN), str(GPU_RUN)).returncode == EXIT_OK
    result = _run_module("compare", str(GPU_RUN), str(slower_run(tmp_path)))
    assert result.returncode == EXIT_REGRESSION, result.stderr


def test_no_command_is_a_usage_error():
    result = _run_module()
    assert result.returncode == 2 and "usage" in result.stderr


def test_example_ci_workflow_runs_the_suite_and_keeps_what_matters():
    workflow = (ROOT / "examples" / "github-actions-gpu.yml").read_text()
    for needed in ("self-hosted", "pytest perf/", "--benchmark-json", "--junitxml", "ampbench report",
                   "GITHUB_STEP_SUMMARY", "upload-artifact"):
        assert needed in workflow, needed
    assert "--perf-history" in workflow and "history.sqlite" in workflow  # a history kept on the runner
    fleet = (ROOT / "examples" / "github-actions-gpu-fleet.yml").read_text()
    for needed in ("secrets.AMPBENCH_HISTORY_URL", "postgres", "--perf-history", "ampbench history changes",
                   "--history"):
        assert needed in fleet, needed


def test_report_refuses_a_folder_with_an_index_and_a_summary_among_other_files(tmp_path, capsys):
    """index.html and summary.md do not make a folder a report: only the report's own marker does."""
    out = tmp_path / "mine"
    (out / "sub").mkdir(parents=True)
    for name in ("index.html", "summary.md", "notes.txt"):
        (out / name).write_text("keep " + name)
    (out / "sub" / "data.csv").write_text("1,2\n")
    assert main(["report", str(GPU_RUN), "-o", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(out) in err and "notes.txt" in err and "sub/" in err
    assert (out / "notes.txt").read_text() == "keep notes.txt" and (out / "index.html").read_text() == "keep index.html"
    assert (out / "sub" / "data.csv").read_text() == "1,2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_report_written_twice_to_one_folder_replaces_the_first(tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(GPU_RUN), "-o", str(out)]) == EXIT_OK
    (out / "speedup.png").unlink()  # a reader deleted one of the report's files: still only ours
    assert main(["report", str(DATA / "cpu_smoke.json"), "-o", str(out)]) == EXIT_OK
    assert "cpu" in (out / "summary.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report"]


def test_report_of_a_run_with_a_nan_speedup_exits_two_and_names_the_field(tmp_path, capsys):
    doc = json.loads(GPU_RUN.read_text())
    i = next(i for i, b in enumerate(doc["benchmarks"]) if b["extra_info"].get("kind") == "speed")
    doc["benchmarks"][i]["extra_info"]["speedup"] = float("nan")
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(doc))
    assert main(["report", str(bad), "-o", str(tmp_path / "report")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(bad) in err and f"benchmarks[{i}].extra_info.speedup is nan" in err and "Traceback" not in err
    assert main(["compare", str(GPU_RUN), str(bad)]) == EXIT_BAD_INPUT
    assert not (tmp_path / "report").exists()


def test_report_of_a_directory_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path), "-o", str(tmp_path / "report")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{tmp_path}: is a directory" in err and "Errno" not in err


def _without_speed(tmp_path: Path) -> Path:
    """The synthetic run after losing every speed cell (say the speed tests crashed or were deselected)."""
    doc = json.loads((DATA / "synthetic_h100_quick.json").read_text())
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["extra_info"].get("kind") != "speed"]
    path = tmp_path / "lost.json"
    path.write_text(json.dumps(doc))
    return path


def test_compare_fails_when_the_new_run_lost_tests(tmp_path, capsys):
    old, new = DATA / "synthetic_h100_quick.json", _without_speed(tmp_path)
    assert main(["compare", str(old), str(new)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "35 missing" in out and "MISSING: test_speed[" in out
    assert main(["compare", str(old), str(new), "--allow-missing"]) == EXIT_OK
    args = ["report", str(new), "--compare", str(old), "-o", str(tmp_path / "r"), "--fail-on-regression"]
    # the new run's own convergence regression fails it as well: judge the comparison alone
    doc = json.loads(new.read_text())
    for b in doc["benchmarks"]:
        b["extra_info"]["verdict"] = "pass"
    new.write_text(json.dumps(doc))
    assert main(args) == EXIT_REGRESSION
    assert "MISSING against" in capsys.readouterr().out
    assert main([*args, "--allow-missing"]) == EXIT_OK


def test_compare_refuses_runs_from_different_devices(tmp_path, capsys):
    cpu, gpu = DATA / "cpu_smoke.json", DATA / "h100_run.json"
    assert main(["compare", str(cpu), str(gpu)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(cpu) in err and str(gpu) in err and "--cross-device" in err
    assert main(["report", str(gpu), "--compare", str(cpu), "-o", str(tmp_path / "r")]) == EXIT_BAD_INPUT
    assert "--cross-device" in capsys.readouterr().err and not (tmp_path / "r").exists()
    main(["compare", str(cpu), str(gpu), "--cross-device", "--allow-missing"])
    out = capsys.readouterr().out
    assert out.startswith("CROSS-DEVICE (cpu against NVIDIA H100 80GB HBM3") and "ratios over fp32 only" in out
    assert main(["report", str(gpu), "--compare", str(cpu), "-o", str(tmp_path / "r"), "--cross-device"]) == EXIT_OK
    assert "CROSS-DEVICE" in capsys.readouterr().out and "CROSS-DEVICE" in (tmp_path / "r" / "summary.md").read_text()


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
    assert tf32["on_cpu"] is False and tf32["needs"] == ["TF32 needs an NVIDIA GPU of compute capability 8.0 (Ampere) "
                                                         "or newer"]
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
    from ampbench.cli.args import build_parser
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
