"""summary.md, the job summary and the pull request's comment: the pull request's own figure ends each
sparkline, marked apart from main's runs before it; a paired base/head table leads it where there is one;
no text of the run (a run or device name, a message) is HTML or breaks a table; each per-model table puts
the figure the speed verdict judges beside it; and no runner's folder is named."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from ampbench.history.store import open_history
from ampbench.report import ROW_HEADERS, build_report, load_run, model_rows
from ampbench.report.compare import compare_runs
from ampbench.report.markdown import render_markdown
from ampbench.report.md_text import md_code, md_text
from ampbench.report.sparklines import THIS_RUN, movement_lines
from ampbench.report.trends import markdown_lines, read_trends, store_label
from ampbench.results import SpeedRecord, Verdict
from ampbench.results.ratios import DEVICE, WALL
from history_runs import speed_record, speed_run
from report_runs import write_run

DATA = Path(__file__).parent / "data"
RUN = DATA / "h100_speed_device.json"  # a real H100 run, its speedups gated in device time
CELL = "test_speed[gpt-amp_bf16]"
MAIN_RUNS = 6


def _pr_run(tmp_path: Path, run_id: str = "pr-head") -> Path:
    """The H100 run as a pull request that made gpt amp_bf16 3% slower in device time: its regression."""
    doc = json.loads(RUN.read_text())
    doc["machine_info"]["ampbench"].update(run_id=run_id, label="0123456789abcdef")
    for bench in doc["benchmarks"]:
        if bench["name"] == CELL:
            info = bench["extra_info"]
            for key in ("device_speedup", "device_speedup_low", "device_speedup_high"):
                info[key] /= 1.03
            info["device_verdict"] = info["verdict"] = Verdict.REGRESSION.value
    return write_run(tmp_path, "pr.json", doc)


def _main_history(tmp_path: Path, value: float):
    """MAIN_RUNS runs of main holding the cell at `value`, within 0.1% of it."""
    history = open_history(f"sqlite:///{tmp_path / 'history.sqlite'}")
    for i in range(MAIN_RUNS):
        history.append(speed_run(f"main{i}", [speed_record("gpt", "amp_bf16", value * (1 + 0.001 * (-1) ** i))],
                                 at=24 * i, label=f"main{i}"))
    return history


def _movement_row(lines: list[str]) -> list[str]:
    [row] = [line for line in lines if line.startswith(f"| `{CELL}`")]
    return row.split(" | ")


def test_the_pull_requests_own_figure_ends_each_sparkline_marked_apart_from_mains_runs(tmp_path):
    before = load_run(RUN).cell(SpeedRecord, "gpt", "amp_bf16").ratio(DEVICE).speedup
    history = _main_history(tmp_path, before)
    run = load_run(_pr_run(tmp_path))
    lines = movement_lines(run, read_trends(history, run))
    row = _movement_row(lines)
    history_bars, own_bar = row[2].split("`")[1].split(THIS_RUN)
    assert len(history_bars) == MAIN_RUNS and own_bar == "▁"  # main's runs, then the PR's drop, lowest
    assert min(history_bars) > own_bar
    # "first → last" are main's; the PR's figure stands in its own column, with its change on main's last
    first, last = (float(v.rstrip("x")) for v in row[3].split(" → "))
    assert first == pytest.approx(before * 1.001, abs=5e-4) and last == pytest.approx(before * 0.999, abs=5e-4)
    this = run.cell(SpeedRecord, "gpt", "amp_bf16").ratio(DEVICE).speedup
    assert row[4] == f"{this:.3f}x ({this / last - 1:+.1%}) |"
    header = next(line for line in lines if line.startswith("| cell |"))
    assert f"history {THIS_RUN} this run" in header and "`0123456789`" in header  # the head's label


def test_a_run_the_history_holds_is_drawn_once_as_this_run(tmp_path):
    """On a push the run is the history's last point already: it is this run's bar, not a history bar too."""
    before = load_run(RUN).cell(SpeedRecord, "gpt", "amp_bf16").ratio(DEVICE).speedup
    history = _main_history(tmp_path, before)
    history.append(speed_run("push-head", [speed_record("gpt", "amp_bf16", before / 1.03, Verdict.REGRESSION)],
                             at=24 * MAIN_RUNS))
    run = load_run(_pr_run(tmp_path, run_id="push-head"))
    history_bars, own_bar = _movement_row(movement_lines(run, read_trends(history, run)))[2].split("`")[1].split(
        THIS_RUN)
    assert len(history_bars) == MAIN_RUNS and own_bar == "▁"


def test_a_paired_base_and_head_table_leads_the_summary():
    paired = ["### Base and head, measured together", "", "| cell | base | head |", "| --- | --- | --- |"]
    text = render_markdown(load_run(RUN), paired_table=paired)
    lines = text.splitlines()
    assert lines[0].startswith("## ampbench: ") and lines[2:2 + len(paired)] == paired
    assert text.index(paired[0]) < text.index("- **speed**")
    assert paired[0] not in render_markdown(load_run(RUN))


# ---------------------------------------------------------------------------------------------------
# text of the run, never markup

IMG = "<img src=x onerror=alert(1)>"
DEVICE_NAME = "NVIDIA | H100 <b>bold</b>"
LINK = "see [here](https://example.invalid) `x`\nsecond line"


def _hostile(tmp_path: Path) -> Path:
    doc = json.loads(RUN.read_text())
    doc["machine_info"]["ampbench"]["device"] = DEVICE_NAME
    doc["machine_info"]["ampbench"]["torch"] = IMG
    renamed = copy.deepcopy([b for b in doc["benchmarks"] if b["extra_info"].get("model") == "mlp"])
    for bench in renamed:
        info = bench["extra_info"]
        info["model"] = f"{IMG}|x"
        bench["name"] = f"test_speed[{IMG}|x-{info['mode']}]"
        info["verdict"] = info["device_verdict"] = Verdict.REGRESSION.value
        info["message"] = LINK
        info["kernel_changes"] = f"new: {IMG}"
    doc["benchmarks"] += renamed + [{"name": IMG, "extra_info": {}}]
    return write_run(tmp_path, f"{IMG}.json", doc)


def _outside_code(text: str) -> str:
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)


def _cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line)) - 1


def test_summary_md_shows_a_runs_html_and_pipes_as_text(tmp_path):
    run = load_run(_hostile(tmp_path))
    text = build_report(run, compare_runs(run, run, cross_device=True), failures=[(IMG, LINK)])["summary.md"].decode()
    bare = _outside_code(text)
    assert "<img" not in bare and "<b>" not in bare and "](" not in bare
    assert set(re.findall(r"</?\w+", bare)) <= {"<details", "</details", "<summary", "</summary"}
    assert md_text(IMG) in text and f"## ampbench: {md_text(DEVICE_NAME)}" in text
    # every row of every table has its header's cells: no pipe of the run's text ends a cell
    table: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table:
            assert {_cells(row) for row in table} == {_cells(table[0])}, table
        table = []
    # a message's line break is a space: the list item holds it all
    assert "second line" in next(line for line in text.splitlines() if line.startswith(f"- {md_code(IMG)}"))


@pytest.mark.parametrize("value, shown", [
    (IMG, "&lt;img src=x onerror=alert(1)&gt;"),
    ("a|b", "a\\|b"),
    ("a\\|b", "a\\\\\\|b"),  # a backslash of its own cannot undo the pipe's escape
    ("[x](javascript:alert(1))", "[x]\\(javascript:alert(1))"),
    ("one\ntwo", "one two"),
    ("tick ` tock", "tick \\` tock"),
    ("\u202eevil", "\\\\u202eevil"),  # a bidirectional override, rendered as its escape \u202e
])
def test_md_text_makes_text_inert(value, shown):
    assert md_text(value) == shown


@pytest.mark.parametrize("value, table, shown", [
    ("test_speed[a-b]", False, "`test_speed[a-b]`"),
    ("a`b", False, "``a`b``"),
    ("`a", False, "`` `a ``"),
    ("a|b", True, "`a\\|b`"),
    (IMG, False, f"`{IMG}`"),  # a code span shows HTML as text
])
def test_md_code_fences_past_the_texts_own_backticks(value, table, shown):
    assert md_code(value, in_table=table) == shown


# ---------------------------------------------------------------------------------------------------
# the verdict beside the figure it judges


@pytest.mark.parametrize("name, clock, kind", [("h100_speed_device.json", "device time", DEVICE),
                                                ("cpu_smoke.json", "wall clock", WALL)])
def test_each_per_model_row_puts_the_gated_speedup_beside_the_speed_verdict(name, clock, kind):
    run = load_run(DATA / name)
    verdict = ROW_HEADERS.index("speed verdict")
    assert ROW_HEADERS[verdict - 1] == "gated speedup [interval]"
    assert ROW_HEADERS[verdict - 2] == "gated baseline" and "wall-clock" in ROW_HEADERS[verdict - 3]
    checked = 0
    for model, rows in model_rows(run).items():
        for row in rows:
            cell = run.cell(SpeedRecord, model, row.mode)
            if cell is None or row.fp32_only:
                continue
            est = cell.estimate(kind)
            cells = row.cells()
            assert cells[verdict - 1].endswith(f"{est.speedup:.2f}x [{est.low:.2f}, {est.high:.2f}] ({clock})")
            baseline = cell.ratio(kind).baseline_speedup
            assert cells[verdict - 2] == (f"{baseline:.2f}x" if baseline is not None else "-")
            checked += 1
    assert checked
    # summary.md's tables carry the same columns
    md = render_markdown(run)
    assert "| wall-clock speedup [interval] | gated baseline | gated speedup [interval] | speed verdict |" in md


def test_a_device_gated_row_no_longer_shows_the_wall_clock_figure_beside_the_verdict():
    run = load_run(RUN)
    cell = run.cell(SpeedRecord, "gpt", "amp_bf16")
    row = next(r for r in model_rows(run)["gpt"] if r.mode == "amp_bf16")
    verdict = ROW_HEADERS.index("speed verdict")
    wall = cell.estimate(WALL)
    assert f"{wall.speedup:.2f}x [{wall.low:.2f}" not in row.cells()[verdict - 1]
    assert row.cells()[verdict - 3].startswith(f"{wall.speedup:.2f}x")


# ---------------------------------------------------------------------------------------------------
# no runner's folder in the comment


@pytest.mark.parametrize("store, shown", [
    ("/var/lib/runner/ampbench/history.sqlite", "history.sqlite"),
    ("sqlite:////home/runner/.ampbench/h.db", "sqlite database h.db"),
    ("postgresql+psycopg://ci:***@db.internal:5432/bench", "postgresql database bench"),
])
def test_store_label_names_no_folder_host_or_user(store, shown):
    assert store_label(store) == shown


def test_the_summary_names_the_store_by_its_file_alone(tmp_path):
    folder = tmp_path / "runner-home" / "secret-folder"
    folder.mkdir(parents=True)
    history = open_history(f"sqlite:///{folder / 'history.sqlite'}")
    history.append(speed_run("r0", [speed_record("gpt", "amp_bf16", 5.6)]))
    run = load_run(RUN)
    trends = read_trends(history, run)
    assert str(folder) in trends.store  # the store as messages on the runner name it
    text = "\n".join(markdown_lines(trends))
    assert "secret-folder" not in text and str(tmp_path) not in text and "`history.sqlite`" in text
    summary = render_markdown(run, trends=trends)
    assert str(tmp_path) not in summary and "history.sqlite" in summary
