"""The `ampbench` command: report and compare, exit statuses, and bad input that leaves nothing behind."""

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
from ampbench.report import load_run
from ampbench.results import SpeedRecord

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
REAL_H100 = DATA / "h100_run.json"
GPU_RUN = REAL_H100 if REAL_H100.exists() else DATA / "synthetic_h100_quick.json"


def _slower(tmp_path: Path, factor: float = 0.5, name: str = "new.json", verdict: str | None = None) -> Path:
    """GPU_RUN with the tightest speed cell's speedup scaled by `factor` (0.5: a clear regression)."""
    doc = json.loads(GPU_RUN.read_text())
    run = load_run(GPU_RUN)
    target = min(run.of_kind(SpeedRecord), key=lambda c: c.estimate().half_width).test_id
    for b in doc["benchmarks"]:
        if b["name"] == target:
            for k in ("speedup", "speedup_low", "speedup_high"):
                b["extra_info"][k] *= factor
            if verdict:
                b["extra_info"]["verdict"] = verdict
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _straddling(tmp_path: Path) -> Path:
    """GPU_RUN with one speed interval widened across the regression line: inconclusive against GPU_RUN."""
    doc = json.loads(GPU_RUN.read_text())
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        if e.get("kind") == "speed":
            e["speedup_low"], e["speedup_high"] = e["speedup"] * 0.5, e["speedup"] * 1.5
            break
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(doc))
    return path


# ---------------------------------------------------------------------------------------------------
# report


def test_report_writes_html_summary_and_charts(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(GPU_RUN), "-o", str(out)]) == EXIT_OK
    names = {p.name for p in out.iterdir()}
    assert {"index.html", "summary.md", "speedup.png", "throughput.png", "memory.png"} <= names
    assert "index.html" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no temp folders left beside it


def test_report_with_compare_adds_the_change_per_test(tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(_slower(tmp_path)), "--compare", str(GPU_RUN), "-o", str(out)]) == EXIT_OK
    assert (out / "compare.png").exists()
    assert "Compared with" in (out / "summary.md").read_text()


def test_report_fails_on_regression_only_when_asked(tmp_path):
    clean = tmp_path / "clean.json"
    doc = json.loads(GPU_RUN.read_text())
    for b in doc["benchmarks"]:
        b["extra_info"]["verdict"] = "pass"
    clean.write_text(json.dumps(doc))
    new = _slower(tmp_path, verdict="pass")
    args = ["report", str(new), "--compare", str(clean), "-o", str(tmp_path / "r")]
    assert main(args) == EXIT_OK
    assert main([*args, "--fail-on-regression"]) == EXIT_REGRESSION
    assert main(["report", str(clean), "--compare", str(clean), "-o", str(tmp_path / "r"), "--fail-on-regression"]) == EXIT_OK


def test_report_lists_failed_tests_from_junit(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="2" failures="1">'
        '<testcase classname="perf.test_speed" name="test_speed[resnet50-amp_bf16]">'
        '<failure message="speed regression: resnet50 amp_bf16: 3.07x against 3.41x">trace</failure></testcase>'
        '<testcase classname="perf.test_speed" name="test_speed[resnet50-bf16]"/></testsuite></testsuites>'
    )
    out = tmp_path / "report"
    assert main(["report", str(GPU_RUN), "--junit", str(junit), "-o", str(out)]) == EXIT_OK
    summary = (out / "summary.md").read_text()
    assert "Failed tests (1)" in summary and "perf.test_speed::test_speed[resnet50-amp_bf16]" in summary
    assert "test_speed[resnet50-bf16]`" not in summary.split("### Failed tests")[1].split("###")[0]


@pytest.mark.parametrize(
    "content, words",
    [
        ('{"machine_info": {}, "benchmarks": [{"name": "test_x", "stats": {}, "extra_info": {}}]}', "not ampbench output"),
        ('{"machine_info": {"ampbench": {}}, "benchmarks": [{"name": "t[a-b]", "extra_info": {"ampbench_schema": 7}}]}',
         "schema 7"),
        (None, "truncated"),
    ],
    ids=["not-ampbench", "other-schema", "truncated"],
)
def test_bad_input_names_the_file_and_leaves_no_report(tmp_path, capsys, content, words):
    bad = tmp_path / "bad.json"
    bad.write_text(content if content is not None else GPU_RUN.read_text()[:5000])
    out = tmp_path / "report"
    assert main(["report", str(bad), "-o", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(bad) in err and words in err
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]


def test_bad_compare_file_keeps_the_earlier_report(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(GPU_RUN), "-o", str(out)]) == EXIT_OK
    before = (out / "index.html").read_bytes()
    bad = tmp_path / "old.json"
    bad.write_text("{")
    assert main(["report", str(GPU_RUN), "--compare", str(bad), "-o", str(out)]) == EXIT_BAD_INPUT
    assert str(bad) in capsys.readouterr().err
    assert (out / "index.html").read_bytes() == before


def test_report_will_not_overwrite_a_folder_that_is_not_a_report(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep")
    assert main(["report", str(GPU_RUN), "-o", str(out)]) == EXIT_BAD_INPUT
    assert "does not look like an ampbench report" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ---------------------------------------------------------------------------------------------------
# compare


def test_compare_a_run_with_itself_exits_zero(capsys):
    assert main(["compare", str(GPU_RUN), str(GPU_RUN)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "summary:" in out and "regression" not in out.split("summary:")[1]


def test_compare_exits_non_zero_on_a_regression_and_names_it(tmp_path, capsys):
    new = _slower(tmp_path)
    assert main(["compare", str(GPU_RUN), str(new)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "REGRESSION:" in out and "against baseline" in out


def test_compare_strict_fails_an_inconclusive_verdict(tmp_path):
    wide = _straddling(tmp_path)
    assert main(["compare", str(GPU_RUN), str(wide)]) == EXIT_OK
    assert main(["compare", str(GPU_RUN), str(wide), "--strict"]) == EXIT_REGRESSION


def test_compare_tolerance_moves_the_line(tmp_path):
    new = _slower(tmp_path, factor=0.8)
    assert main(["compare", str(GPU_RUN), str(new)]) == EXIT_REGRESSION
    assert main(["compare", str(GPU_RUN), str(new), "--tolerance", "0.5"]) == EXIT_OK


def test_compare_appends_markdown(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    main(["compare", str(GPU_RUN), str(_slower(tmp_path)), "--markdown", str(summary), "--changes-only"])
    text = summary.read_text()
    assert text.startswith("# earlier step\n") and "Compared with" in text


def test_compare_bad_file_exits_two_and_names_it(tmp_path, capsys):
    bad = tmp_path / "nope.json"
    bad.write_text("[]")
    assert main(["compare", str(bad), str(GPU_RUN)]) == EXIT_BAD_INPUT
    assert str(bad) in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--tolerance", "--memory-tolerance", "--accuracy-tolerance"])
@pytest.mark.parametrize("value, words", [("3", "must lie in (0, 1)"), ("x", "expects a number, got 'x'")])
def test_bad_tolerance_is_a_usage_error_naming_the_flag_once(capsys, flag, value, words):
    with pytest.raises(SystemExit) as info:
        main(["compare", str(GPU_RUN), str(GPU_RUN), flag, value])
    assert info.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # the lines above it are the usage
    assert f"argument {flag}: {words}" in error and error.count(flag) == 1, error


# ---------------------------------------------------------------------------------------------------
# every file an `ampbench` command reads, given something that is not that file: one line naming it

BASELINE = ROOT / "baselines" / "nvidia-h100-80gb-hbm3.json"
NOT_A_FILE = {
    "directory": (lambda p: p.mkdir(), "is a directory; give "),
    "missing": (lambda p: None, "no such file"),
    "empty": (lambda p: p.write_text(""), "is empty"),
    "not JSON": (lambda p: p.write_text("model,speedup\nmlp,1.2\n"), "is not"),
    "not UTF-8": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n"), "is not UTF-8 text"),
}
READERS = {
    "report RUN": lambda bad, out: ["report", bad, "-o", out],
    "report --compare": lambda bad, out: ["report", str(GPU_RUN), "--compare", bad, "-o", out],
    "report --junit": lambda bad, out: ["report", str(GPU_RUN), "--junit", bad, "-o", out],
    "compare OLD": lambda bad, out: ["compare", bad, str(GPU_RUN)],
    "compare NEW": lambda bad, out: ["compare", str(GPU_RUN), bad],
    "spread BASELINE": lambda bad, out: ["spread", bad, str(GPU_RUN), "--dry-run"],
    "spread RUN": lambda bad, out: ["spread", str(BASELINE), bad, "--dry-run"],
    "baselines show": lambda bad, out: ["baselines", "show", bad],
}


@pytest.mark.parametrize("kind", list(NOT_A_FILE))
@pytest.mark.parametrize("reader", list(READERS))
def test_a_file_that_is_not_one_is_a_one_line_error_naming_it(tmp_path, capsys, reader, kind):
    make, words = NOT_A_FILE[kind]
    bad = tmp_path / "bad.json"
    make(bad)
    out = tmp_path / "report"
    assert main(READERS[reader](str(bad), str(out))) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and words in lines[0], captured.err
    assert "Errno" not in lines[0] and not out.exists(), lines[0]


@pytest.mark.parametrize("argv", [
    lambda folder: ["compare", str(GPU_RUN), str(GPU_RUN), "--markdown", folder],
    lambda folder: ["baselines", "show", str(BASELINE), "-o", folder],
], ids=["compare --markdown", "baselines show -o"])
def test_an_output_file_that_is_a_directory_is_a_one_line_error_naming_it(tmp_path, capsys, argv):
    folder = tmp_path / "taken"
    folder.mkdir()
    assert main(argv(str(folder))) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert err == f"ampbench: error: {folder}: Is a directory\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"] and not any(folder.iterdir())


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
    result = _run_module("compare", str(GPU_RUN), str(_slower(tmp_path)))
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
    for needed in ("services:", "postgres", "--perf-history", "ampbench history changes", "--history"):
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
