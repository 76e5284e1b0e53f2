"""The `ampbench` command: report and compare, exit statuses, and bad input that leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK, EXIT_REGRESSION
from report_runs import gpu_run, slower_run, straddling_run

ROOT = Path(__file__).parent.parent
GPU_RUN = gpu_run()


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
    assert main(["report", str(slower_run(tmp_path)), "--compare", str(GPU_RUN), "-o", str(out)]) == EXIT_OK
    assert (out / "compare.png").exists()
    assert "Compared with" in (out / "summary.md").read_text()


def test_report_fails_on_regression_only_when_asked(tmp_path):
    clean = tmp_path / "clean.json"
    doc = json.loads(GPU_RUN.read_text())
    for b in doc["benchmarks"]:
        b["extra_info"]["verdict"] = "pass"
    clean.write_text(json.dumps(doc))
    new = slower_run(tmp_path, verdict="pass")
    args = ["report", str(new), "--compare", str(clean), "-o", str(tmp_path / "r")]
    assert main(args) == EXIT_OK
    assert main([*args, "--fail-on-regression"]) == EXIT_REGRESSION
    assert main(["report", str(clean), "--compare", str(clean), "-o",
                 str(tmp_path / "r"), "--fail-on-regression"]) == EXIT_OK


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
        ('{"machine_info": {}, "benchmarks": [{"name": "test_x", "stats": {}, "extra_info": {}}]}', "not ampbench "
                                                                                                    "output"),
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
    new = slower_run(tmp_path)
    assert main(["compare", str(GPU_RUN), str(new)]) == EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "REGRESSION:" in out and "against baseline" in out


def test_compare_strict_fails_an_inconclusive_verdict(tmp_path):
    wide = straddling_run(tmp_path)
    assert main(["compare", str(GPU_RUN), str(wide)]) == EXIT_OK
    assert main(["compare", str(GPU_RUN), str(wide), "--strict"]) == EXIT_REGRESSION


def test_compare_tolerance_moves_the_line(tmp_path):
    new = slower_run(tmp_path, factor=0.8)
    assert main(["compare", str(GPU_RUN), str(new)]) == EXIT_REGRESSION
    assert main(["compare", str(GPU_RUN), str(new), "--tolerance", "0.5"]) == EXIT_OK


def test_compare_appends_markdown(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    main(["compare", str(GPU_RUN), str(slower_run(tmp_path)), "--markdown", str(summary), "--changes-only"])
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
    assert err == f"ampbench: error: {folder}: is a directory; give a file's path\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"] and not any(folder.iterdir())
