"""An A/B run (``ampbench ab``) is a run JSON every reader reads: its cells load as paired records, write
back as they came, and a malformed figure is refused naming the cell and the key; the report shows a table
of head over base and lists a regressing or inconclusive cell as needing a look, compare carries each
figure's own verdict, export charts head's figures, and ``report --fail-on-regression`` fails on a paired
regression. The fixture (tests/data/paired_h100.json) holds four cells: a regression, a pass, an
inconclusive speed cell and an improved memory cell."""

from __future__ import annotations

import json
import math
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_OK, EXIT_REGRESSION
from ampbench.export import bmf, gated_figures, github, github_margin, over_the_line
from ampbench.report import build_report, load_run, parse_run
from ampbench.report.compare import compare_runs, format_text
from ampbench.results import PairedFigure, PairedRecord, RunError
from ampbench.results.paired_run import paired_document, paired_entry, write_paired_run
from ampbench.verdict import Verdict

DATA = Path(__file__).parent / "data"
PAIRED = DATA / "paired_h100.json"
REGRESSION, INCONCLUSIVE = "test_speed[gpt-amp_fp16]", "test_speed[vit_b16-amp_bf16]"
PASSING, MEMORY = "test_speed[resnet50-amp_bf16]", "test_memory[gpt-amp_fp16]"


def _document() -> dict:
    return json.loads(PAIRED.read_text(encoding="utf-8"))


def _write(tmp_path: Path, document: dict, name: str = "paired.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    return path


def _cell(document: dict, test_id: str) -> dict:
    return next(b for b in document["benchmarks"] if b["name"] == test_id)


# ---------------------------------------------------------------------------------------------------
# the record


def test_a_paired_run_loads_into_paired_records_with_typed_figures():
    run = load_run(PAIRED)
    assert [type(c) for c in run.cells] == [PairedRecord] * 4
    verdicts = {c.test_id: c.verdict for c in run.cells}
    assert verdicts == {REGRESSION: Verdict.REGRESSION, PASSING: Verdict.PASS, INCONCLUSIVE: Verdict.INCONCLUSIVE,
                        MEMORY: Verdict.IMPROVED}
    speed = run.cells[0]
    assert (speed.model, speed.mode, speed.kind, speed.cell) == ("gpt", "amp_fp16", "paired", REGRESSION)
    assert (speed.base, speed.head, speed.pairs, speed.order) == ("1a2b3c4d5e6f (main)", "working tree", 3, "ABBAAB")
    assert [name for name, _ in speed.named_figures()] == ["speedup", "step_time"]
    speedup = speed.figures["speedup"]
    assert isinstance(speedup, PairedFigure) and speedup.verdict is Verdict.REGRESSION
    assert speedup.lower_is_better is False and speedup.unit == "x"
    assert speedup.change == pytest.approx(speedup.head / speedup.base - 1, abs=1e-5)
    assert speedup.change_low <= speedup.change <= speedup.change_high
    assert speedup.base_runs == [1.62, 1.621, 1.619] and speedup.worsening > speedup.tolerance
    assert speed.figures["step_time"].lower_is_better is True and speed.figures["step_time"].worsening > 0
    assert [name for name, _ in run.cells[3].named_figures()] == ["peak_memory"]
    assert speed.deciding() == ("speedup", speedup)
    # the inconclusive cell is decided by its inconclusive figure, not its passing one
    assert run.cells[2].deciding()[0] == "speedup"
    assert run.gpu == "NVIDIA H100 80GB HBM3" and not run.foreign


def test_a_paired_cell_writes_back_byte_for_byte():
    for bench in _document()["benchmarks"]:
        info = bench["extra_info"]
        record = PairedRecord.from_info(info, bench["name"])
        assert json.dumps(record.to_info()) == json.dumps(info)


def test_the_run_writer_makes_the_fixture_from_its_records(tmp_path):
    """paired_document and paired_entry write what the readers read: the fixture again from its records."""
    document = _document()
    run = load_run(PAIRED)
    again = paired_document(run.cells, document["machine_info"], document["commit_info"],
                            when=datetime.fromisoformat(document["datetime"]), version=document["version"])
    assert json.dumps(again) == json.dumps(document)
    entry = paired_entry(run.cells[3])
    assert entry["fullname"] == "perf/test_memory.py::test_memory[gpt-amp_fp16]"
    assert entry["params"] == {"model_name": "gpt", "mode_name": "amp_fp16"} and entry["group"] == "paired: gpt"
    path = write_paired_run(tmp_path / "ab.json", run.cells, document["machine_info"], document["commit_info"],
                            when=datetime(2026, 11, 24, tzinfo=timezone.utc))
    assert [c.test_id for c in load_run(path).cells] == [c.test_id for c in run.cells]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_run_writer_refuses_a_record_the_readers_would_refuse(tmp_path):
    record = load_run(PAIRED).cells[0]
    bad = record.with_values(figures={"speedup": PairedFigure(change=-0.01, change_low=0.01, change_high=0.02)})
    with pytest.raises(RunError, match="out of order"):
        write_paired_run(tmp_path / "ab.json", [bad], {"ampbench": {"device": "NVIDIA H100 80GB HBM3"}}, {})
    assert not (tmp_path / "ab.json").exists()


@pytest.mark.parametrize("key, value, says", [
    ("change_high", "-0.4%", "change_high is '-0.4%' (a string)"),
    ("change_low", float("nan"), "change_low is nan"),
    ("change", -1.5, "change is -1.5"),
    ("verdict", "slower", "verdict is 'slower' (a string)"),
    ("confidence", 1.2, "confidence is 1.2"),
    ("tolerance", -0.01, "tolerance is -0.01"),
    ("lower_is_better", "yes", "lower_is_better is 'yes' (a string)"),
])
def test_a_malformed_checked_figure_is_refused_naming_the_cell_and_key(key, value, says):
    document = _document()
    _cell(document, REGRESSION)["extra_info"]["figures"]["speedup"][key] = value
    with pytest.raises(RunError) as caught:
        parse_run(document, "ab.json")
    message = str(caught.value)
    assert f"benchmarks[0].extra_info.figures.speedup.{says}" in message
    assert f"({REGRESSION})" in message


def test_an_interval_that_does_not_hold_its_change_is_refused():
    document = _document()
    _cell(document, PASSING)["extra_info"]["figures"]["step_time"]["change_low"] = 0.5
    with pytest.raises(RunError, match=r"figures\.step_time\.change_low 0\.5.*out of order.*resnet50"):
        parse_run(document, "ab.json")


def test_figures_that_are_only_shown_are_read_leniently():
    document = _document()
    figure = _cell(document, MEMORY)["extra_info"]["figures"]["peak_memory"]
    figure.update(head="5.8 GiB", base_runs="three")
    record = parse_run(document, "ab.json").cells[3]
    assert record.figures["peak_memory"].head is None and record.figures["peak_memory"].base_runs is None
    assert record.verdict is Verdict.IMPROVED


# ---------------------------------------------------------------------------------------------------
# the readers


def test_summary_md_leads_with_the_table_of_head_over_base():
    summary = build_report(load_run(PAIRED))["summary.md"].decode()
    table = summary[summary.index("### Head over base"):summary.index("### Needs a look")]
    assert "head (working tree) over base (1a2b3c4d5e6f (main))" in table
    assert "| cell | figure | base | head | change [interval] | verdict |" in table
    assert ("| test_speed[gpt-amp_fp16] | device-time speedup over fp32 | 1.620x | 1.610x | "
            "-0.62% [-0.76%, -0.48%] | ❌ regression |") in table
    assert "| test_speed[gpt-amp_fp16] | device time per step | 41.21 ms | 41.47 ms | +0.64% [+0.51%, +0.77%]" in table
    assert "| test_memory[gpt-amp_fp16] | peak memory | 6.00 GiB | 5.81 GiB | -3.12%" in table
    assert table.count("\n| test_") == 7  # one row per figure of each cell
    assert summary.index("### Head over base") < summary.index("- **paired** (4 cells)")


def test_a_regressing_or_inconclusive_paired_cell_needs_a_look():
    summary = build_report(load_run(PAIRED))["summary.md"].decode()
    look = summary[summary.index("### Needs a look"):].split("\n\n")[1]  # its list, after its title
    assert (f"- ❌ regression `{REGRESSION}`: device-time speedup over fp32 head 1.610x "
            "(-0.62% [-0.76%, -0.48%] vs base 1.620x), tolerance 0.25%") in look
    assert f"⚠️ inconclusive `{INCONCLUSIVE}`" in look
    assert PASSING not in look and MEMORY not in look


def test_index_html_holds_the_paired_table_and_no_other_tests_table():
    html = build_report(load_run(PAIRED))["index.html"].decode()
    table = html[html.index("<h2>Head over base</h2>"):html.index("<h2>Needs a look</h2>")]
    assert "<th>change [interval]</th>" in table
    assert ("<td>test_speed[gpt-amp_fp16]</td><td>device-time speedup over fp32</td><td>1.620x</td><td>1.610x</td>"
            "<td>-0.62% [-0.76%, -0.48%]</td><td><span class=\"v v-regression\">✗ regression</span>") in table
    assert "v-inconclusive" in table and "v-improved" in table and table.count("<tr><td>test_") == 7
    assert "<h3>Other tests</h3>" not in html  # the paired cells are in their own table


def test_the_paired_text_is_inert_in_both_pages():
    document = _document()
    info = _cell(document, REGRESSION)["extra_info"]
    info["head"] = "<script>x</script> | `head`"
    info["figures"]["speedup"]["label"] = "<b>speedup</b>"
    files = build_report(parse_run(document, "ab.json"))
    html, summary = files["index.html"].decode(), files["summary.md"].decode()
    assert "<script>x" not in html and "<b>speedup" not in html and "&lt;b&gt;speedup&lt;/b&gt;" in html
    assert "<script>" not in summary and "&lt;b&gt;speedup&lt;/b&gt;" in summary and "\\| \\`head\\`" in summary


def test_report_fails_on_a_paired_regression(tmp_path, capsys):
    assert main(["report", str(PAIRED), "-o", str(tmp_path / "r"), "--fail-on-regression"]) == EXIT_REGRESSION
    assert f"REGRESSION: {REGRESSION}: gpt amp_fp16: device-time speedup" in capsys.readouterr().out
    document = _document()
    for bench in document["benchmarks"]:
        bench["extra_info"]["verdict"] = "pass"
        for figure in bench["extra_info"]["figures"].values():
            figure["verdict"] = "pass"
    passing = _write(tmp_path, document)
    assert main(["report", str(passing), "-o", str(tmp_path / "r2"), "--fail-on-regression"]) == EXIT_OK
    # an inconclusive cell fails only under --strict, as everywhere
    _cell(document, INCONCLUSIVE)["extra_info"]["verdict"] = "inconclusive"
    inconclusive = _write(tmp_path, document, "inconclusive.json")
    args = ["report", str(inconclusive), "-o", str(tmp_path / "r3"), "--fail-on-regression"]
    assert main(args) == EXIT_OK and main([*args, "--strict"]) == EXIT_REGRESSION


def test_compare_of_two_paired_runs_carries_each_figures_own_verdict():
    old_document = _document()
    _cell(old_document, REGRESSION)["extra_info"]["figures"]["speedup"].update(
        change=0.001, change_low=-0.001, change_high=0.003, verdict="pass")
    old, new = parse_run(old_document, "old.json"), load_run(PAIRED)
    comparison = compare_runs(old, new)
    rows = {(r.test_id, r.figure): r for r in comparison.rows}
    assert len(rows) == 7
    speedup = rows[(REGRESSION, "device-time speedup over fp32, head over base")]
    assert (speedup.old, speedup.new) == ("+0.10% [-0.10%, +0.30%]", "-0.62% [-0.76%, -0.48%]")
    assert speedup.verdict is Verdict.REGRESSION and speedup.change is None and not speedup.charted
    assert rows[(MEMORY, "peak memory, head over base")].verdict is Verdict.IMPROVED
    assert comparison.failed() and [r.test_id for r in comparison.inconclusive] == [INCONCLUSIVE]
    text = format_text(comparison)
    assert "summary: 2 regression, 1 inconclusive, 1 improved, 3 pass" in text


def test_compare_reads_a_paired_run_against_a_suite_run_without_judging_across(tmp_path, capsys):
    """A suite run's speed cell shares its test id with the paired cell that measured it: the paired cell's
    rows still show its own verdicts, with nothing of the old run's to set beside them."""
    suite = DATA / "h100_run.json"
    comparison = compare_runs(load_run(suite), load_run(PAIRED))
    paired = [r for r in comparison.rows if r.kind == "paired"]
    assert len(paired) == 7 and all(r.old == "-" for r in paired)
    assert main(["compare", str(suite), str(PAIRED), "--allow-missing"]) == EXIT_REGRESSION
    assert "REGRESSION: gpt amp_fp16: device-time speedup over fp32, head over base" in capsys.readouterr().out


def test_export_gives_one_figure_per_paired_figure_with_heads_value():
    figures = gated_figures(load_run(PAIRED))
    assert figures.left_out == [] and len(figures.figures) == 7
    entries = {e["name"]: e for e in github(figures)}
    speedup = entries[f"{REGRESSION} device-time speedup over fp32, head"]
    assert speedup["value"] == 1.61 and speedup["unit"] == "x" and "verdict: regression" in speedup["extra"]
    # smaller is better: base over head, bigger is better as the action assumes
    step = entries[f"{REGRESSION} device time per step, base over head"]
    assert step["value"] == pytest.approx(41.2099 / 41.4733, rel=1e-4) and "head 41.4733 ms" in step["extra"]
    measures = bmf(figures)[REGRESSION]
    assert set(measures) == {"paired-speedup", "paired-step-time", "gate-margin"}
    assert measures["paired-speedup"]["lower_value"] < 1.61 < measures["paired-speedup"]["upper_value"]
    # the gate margin is past 1 exactly on the regressing cell's figures
    assert [line.split(":")[0] for line in over_the_line(figures)] == [REGRESSION]
    assert len(github_margin(figures)) == 8


def test_export_cli_writes_the_paired_figures(tmp_path):
    out = tmp_path / "github.json"
    assert main(["export", str(PAIRED), "--format", "github", "-o", str(out)]) == EXIT_OK
    assert len(json.loads(out.read_text())) == 7
    out = tmp_path / "pb.json"
    assert main(["export", str(PAIRED), "--format", "pytest-benchmark", "-o", str(out)]) == EXIT_OK
    exported = json.loads(out.read_text())
    untimed, written = exported["ampbench_untimed"], _document()["benchmarks"]  # they time no step: beside them
    assert exported["benchmarks"] == [] and [b["name"] for b in untimed] == [b["name"] for b in written]
    assert [b["extra_info"] for b in untimed] == [b["extra_info"] for b in written]


# ---------------------------------------------------------------------------------------------------
# what an A/A run teaches: dev/calibrate_paired.py


def _calibrator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("calibrate_paired", DATA.parents[1] / "dev" / "calibrate_paired.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("calibrate_paired", module)  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def _aa_record(i: int, base: list[float], head: list[float], sd: float) -> PairedRecord:
    figure = PairedFigure(label="device-time speedup over fp32", unit="x", lower_is_better=False, base=1.0, head=1.0,
                          change=0.0, change_low=-0.001, change_high=0.001, confidence=0.99, tolerance=0.0025,
                          pairs=len(base), verdict=Verdict.PASS, message="", base_runs=base, head_runs=head,
                          base_sds=[sd] * len(base), head_sds=[sd] * len(head))
    return PairedRecord.build(test_id=f"test_speed[m{i}-amp_bf16]", model=f"m{i}", mode="amp_bf16", device="GPU",
                              verdict=Verdict.PASS, message="", cell=f"test_speed[m{i}-amp_bf16]", base="a",
                              head="b", pairs=len(base), order="AB" * len(base), figures={"speedup": figure})


def test_an_aa_run_teaches_the_between_process_sd_less_the_runs_own_error():
    """Simulated A/A cells, each at a level of its own: every run of a fresh process lands tau = 0.1% off in
    ln, plus its own error of 0.05% that the run states; the calibration finds tau, not the runs' whole spread."""
    import numpy as np

    rng, tau, own = np.random.default_rng(7), 0.001, 0.0005
    records = []
    for i in range(40):
        level = float(rng.uniform(1.5, 6.0))
        draw = lambda: [level * float(np.exp(rng.normal(0, tau) + rng.normal(0, own))) for _ in range(6)]  # noqa: E731
        records.append(_aa_record(i, draw(), draw(), own))
    found = _calibrator().calibrate(records, "speedup")
    assert found is not None and (found.cells, found.pairs, found.dof) == (40, 240, 200)
    assert found.run_sd == pytest.approx(own)
    assert found.tau == pytest.approx(tau, rel=0.15), found
    assert found.sd_d == pytest.approx(math.sqrt(2 * (tau ** 2 + own ** 2)), rel=0.15)


def test_an_ab_run_keeps_each_runs_own_sd_beside_its_value(tmp_path):
    """What the calibration reads of a run, through the writer and the reader."""
    path = write_paired_run(tmp_path / "ab.json", [_aa_record(0, [1.62, 1.621], [1.61, 1.611], 0.0004)],
                            machine_info={}, commit_info={})
    figure = load_run(path).cells[0].figures["speedup"]
    assert figure.base_sds == [0.0004, 0.0004] and figure.head_sds == [0.0004, 0.0004]
    assert figure.base_runs == [1.62, 1.621] and figure.head_runs == [1.61, 1.611]
