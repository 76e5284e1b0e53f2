"""`ampbench report RUN.json --history URL`: a trend chart per speed cell of the run that the history holds,
with the change at the run it happened, the software change annotated, runs that do not count drawn
hollow and the tolerance learned in the page and the summary; a store that cannot be used is exit 2
before anything is written; without --history nothing changes."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.history.learn import learn
from ampbench.history.store import open_history
from ampbench.report import build_report, load_run
from ampbench.report import trends as trends_module
from ampbench.report.sparklines import THIS_RUN
from ampbench.report.trends import read_trends, trend_figure
from ampbench.results import SpeedRecord, Verdict
from ampbench.results.ratios import DEVICE
from history_runs import H100, speed_record, speed_run

RUN = Path(__file__).parent / "data" / "h100_speed_device.json"  # an H100 run holding these cells
STEPPED, STEADY, YOUNG = "test_speed[resnet50-amp_fp16]", "test_speed[gpt-amp_bf16]", "test_speed[mlp-amp_fp16]"
RUNS, K = 10, 6  # run K (1-based) is the first of the slowed runs, and the first on torch 2.12


def _fill(history, gpu: str = H100) -> None:
    """RUNS runs a day apart: resnet50 amp_fp16 1.6% slower from run K on, with the torch upgrade; gpt amp_bf16
    steady; mlp amp_fp16 in the last 4 runs only, the first of them failing its verdict; a cell of a model
    the run does not hold."""
    rng = random.Random(11)
    for i in range(RUNS):
        slowed = i >= K - 1
        noise = lambda: 1 + rng.gauss(0.0, 0.002)  # noqa: E731 - 0.2% between runs, as an H100's cells
        cells = [speed_record("resnet50", "amp_fp16", 3.0 * (1 - 0.016 * slowed) * noise()),
                 speed_record("gpt", "amp_bf16", 5.6 * noise()),
                 speed_record("bert", "amp_bf16", 4.0 * noise())]
        if i >= RUNS - 4:
            failing = i == RUNS - 4
            cells.append(speed_record("mlp", "amp_fp16", 2.4 if failing else 2.7 * noise(),
                                      Verdict.REGRESSION if failing else Verdict.PASS))
        # a label new on every run (a CI's commit) is no software change: only torch's is annotated
        history.append(speed_run(f"run{i + 1:02d}", cells, gpu=gpu, at=24 * i, label=f"commit{i}",
                                 torch="2.12.0" if slowed else "2.11.0"))


@pytest.fixture
def store(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    _fill(open_history(url))
    return url


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_the_report_draws_a_trend_per_cell_with_the_change_and_the_sentence(store, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(RUN), "--history", store, "-o", str(out)]) == 0
    assert "trends of 3 cells on NVIDIA H100 80GB HBM3" in capsys.readouterr().out
    charts = sorted(p.name for p in out.glob("trend-*.png"))
    # the run's order (mlp, resnet50, gpt); bert is not in the run
    assert charts == ["trend-01-mlp-amp_fp16.png", "trend-02-resnet50-amp_fp16.png", "trend-03-gpt-amp_bf16.png"]
    assert all(_png_size((out / name).read_bytes()) == (480, 200) for name in charts)
    html = (out / "index.html").read_text(encoding="utf-8")
    trends = html[html.index("<h2>Trends</h2>"):html.index("<h2>Results per model")]
    assert trends.count('<img alt="Trend of ') == 3 and "bert" not in trends
    history = open_history(store, create=False)
    for test_id in (STEPPED, STEADY, YOUNG):
        sentence = learn(history.series(H100, test_id, "device_speedup")).sentence()
        assert f"<code>{test_id}</code></h3>\n<p class=\"sub\">Tolerance: {sentence} · " in trends
    step = read_trends(history, load_run(RUN)).cells[1].changes[0].step
    assert -0.019 < step < -0.013  # the 1.6% step, give or take the noise
    assert f"1 change: {step:+.1%} at run {K} (01-0{K})" in trends  # the step, where it happened
    assert "run 6 torch 2.11.0→2.12.0" in trends  # the software change, in the chart's caption
    summary = (out / "summary.md").read_text(encoding="utf-8")
    table = summary[summary.index("### Tolerance learned"):].split("\n\n")[1].splitlines()
    assert table[0] == "| cell | runs | tolerance | changes |" and len(table) == 2 + 3
    young = learn(history.series(H100, YOUNG, "device_speedup"))
    assert f"| `{YOUNG}` | 4 | {young.sentence()} | no change |" in table
    assert "after 10" in young.sentence()  # three counted runs: what ten would learn is said


def test_the_chart_marks_the_change_the_software_and_the_runs_that_do_not_count(store):
    found = read_trends(open_history(store, create=False), load_run(RUN))
    cells = {c.test_id: c for c in found.cells}
    stepped = cells[STEPPED]
    assert [c.index for c in stepped.changes] == [K - 1] and stepped.software == ((K - 1, "torch 2.11.0→2.12.0"),)
    assert not cells[STEADY].changes and cells[STEADY].software == ((K - 1, "torch 2.11.0→2.12.0"),)
    fig = trend_figure(stepped)
    try:
        ax = fig.axes[0]
        texts = [t.get_text() for t in ax.texts]
        assert f"{stepped.changes[0].step:+.1%}" in texts and "torch 2.11.0→2.12.0" in texts
        dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
        assert [line.get_xdata()[0] for line in dashed] == [K - 1.5]  # between run K-1 and run K
        band = [c for c in ax.collections if c.get_label().endswith("tolerance")]
        assert len(band) == 1 and f"±{stepped.learned.tolerance:.2%}" in band[0].get_label()
    finally:
        fig.clf()
    young = cells[YOUNG]
    assert [p.counts for p in young.series.points] == [False, True, True, True]
    fig = trend_figure(young)
    try:
        faces = {bars.get_label(): bars.lines[0].get_markerfacecolor() for bars in fig.axes[0].containers}
        assert faces["failed"] == "white" and faces["run"] != "white"
    finally:
        fig.clf()


def test_gpu_names_the_model_whose_runs_are_drawn(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'a100.sqlite'}"
    a100 = "NVIDIA A100-SXM4-80GB"
    _fill(open_history(url), gpu=a100)
    assert main(["report", str(RUN), "--history", url, "-o", str(tmp_path / "own")]) == 0
    html = (tmp_path / "own" / "index.html").read_text(encoding="utf-8")
    assert "No cell of this run has a device-time series in the history." in html
    assert not list((tmp_path / "own").glob("trend-*.png"))
    assert main(["report", str(RUN), "--history", url, "--gpu", a100, "-o", str(tmp_path / "a100")]) == 0
    assert len(list((tmp_path / "a100").glob("trend-*.png"))) == 3
    assert f"runs of {a100} in the history" in (tmp_path / "a100" / "index.html").read_text(encoding="utf-8")


def test_cells_past_the_cap_are_left_out_with_a_note(store, tmp_path, monkeypatch):
    monkeypatch.setattr(trends_module, "MAX_CELLS", 2)
    found = read_trends(open_history(store, create=False), load_run(RUN))
    assert len(found.cells) == 2 and found.total == 3
    files = build_report(load_run(RUN), trends=found)
    assert sum(name.startswith("trend-") for name in files) == 2
    assert "The first 2 of the run&#39;s 3 cells with a history are drawn" in files["index.html"].decode()
    assert "The first 2 of the run's 3 cells" in files["summary.md"].decode()


@pytest.mark.parametrize("store", ["missing.sqlite", "folder", "empty.sqlite"])
def test_a_store_that_cannot_be_used_is_exit_2_naming_it_before_anything_is_written(store, tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "empty.sqlite").write_bytes(b"")
    url, out = str(tmp_path / store), tmp_path / "report"
    assert main(["report", str(RUN), "--history", url, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ampbench: error: history ") and url in err
    assert not out.exists()


def test_gpu_without_history_is_a_usage_error(tmp_path, capsys):
    assert main(["report", str(RUN), "--gpu", H100, "-o", str(tmp_path / "report")]) == 2
    assert "--history" in capsys.readouterr().err and not (tmp_path / "report").exists()


def test_without_history_the_report_has_no_trends(tmp_path):
    files = build_report(load_run(RUN))
    assert not any(name.startswith("trend-") for name in files)
    assert b"<h2>Trends</h2>" not in files["index.html"] and b"Tolerance learned" not in files["summary.md"]


def _axis_labels(cell) -> list[str]:
    fig = trend_figure(cell)
    try:
        fig.canvas.draw()
        return [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


@pytest.mark.parametrize("label_of, expected", [
    (lambda i: f"{'0123456789abcdef'[i] * 40}", lambda i: "0123456789abcdef"[i] * 10),  # a commit each: its first 10
    (lambda i: "nightly", lambda i: f"{9 + i:02d}:00"),  # one label for all: the time of day
    (lambda i: None, lambda i: f"{9 + i:02d}:00"),
])
def test_trend_points_of_one_day_are_named_by_run_not_by_the_day(tmp_path, label_of, expected):
    """Five runs an hour apart on one day: each point is named by its --perf-label where every run has
    its own, else by its time of day; never the same date under every point."""
    history = open_history(f"sqlite:///{tmp_path / 'h.sqlite'}")
    for i in range(5):
        history.append(speed_run(f"r{i}", [speed_record("gpt", "amp_bf16", 5.6 + i / 100)], at=9 + i,
                                 label=label_of(i)))
    trends = read_trends(history, load_run(RUN))
    (cell,) = trends.cells
    assert cell.labels == tuple(expected(i) for i in range(5))
    shown = _axis_labels(cell)
    assert shown and set(shown) <= set(cell.labels) and len(set(shown)) == len(shown), shown


def test_trend_points_over_several_days_carry_the_date_and_the_time(tmp_path):
    history = open_history(f"sqlite:///{tmp_path / 'h.sqlite'}")
    for i in range(3):
        history.append(speed_run(f"r{i}", [speed_record("gpt", "amp_bf16", 5.6)], at=30 * i))
    (cell,) = read_trends(history, load_run(RUN)).cells
    assert cell.labels == ("01-01 00:00", "01-02 06:00", "01-03 12:00")


def test_the_summary_draws_the_last_runs_of_each_cell_that_moved_or_fails(store, tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(RUN), "--history", store, "-o", str(out)]) == 0
    summary = (out / "summary.md").read_text(encoding="utf-8")
    section = summary[summary.index("### Movement over the last runs"):summary.index("### Tolerance learned")]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    # resnet50 amp_fp16 stepped down in the history and fails in the run; gpt amp_bf16 held steady, and
    # mlp amp_fp16 passes without a change: neither is listed
    assert len(rows) == 1 and rows[0].startswith(f"| `{STEPPED}` | regression | `")
    # the history's runs, oldest first, then this run's own figure (no run of the history), marked apart
    history, own = rows[0].split("`")[3].split(THIS_RUN)
    assert len(history) == RUNS and len(own) == 1 and set(history + own) <= set(sparkline_bars())
    first, last = rows[0].split(" | ")[3].split(" → ")
    assert float(first.rstrip("x")) > float(last.rstrip("x"))  # the history stepped down
    this = load_run(RUN).cell(SpeedRecord, "resnet50", "amp_fp16").ratio(DEVICE).speedup
    assert rows[0].split(" | ")[4].startswith(f"{this:.3f}x")


def sparkline_bars() -> str:
    from ampbench.report.sparklines import BARS
    return BARS


@pytest.mark.parametrize("values, drawn", [([1.0, 2.0, 3.0], "▁▅█"), ([2.0, 2.0], "▄▄"), ([], ""),
                                           ([3.0, 1.0, 2.0, 3.0], "█▁▅█")])
def test_a_sparkline_spans_its_values_from_the_least_to_the_greatest(values, drawn):
    from ampbench.report.sparklines import sparkline
    assert sparkline(values) == drawn


def test_without_a_moved_cell_the_summary_has_no_movement(tmp_path):
    url = f"sqlite:///{tmp_path / 'steady.sqlite'}"
    history = open_history(url)
    rng = random.Random(3)
    for i in range(4):
        history.append(speed_run(f"run{i}", [speed_record("gpt", "amp_bf16", 5.6 * (1 + rng.gauss(0.0, 0.001)))],
                                 at=24 * i, label=f"commit{i}"))
    out = tmp_path / "report"
    assert main(["report", str(RUN), "--history", url, "-o", str(out)]) == 0
    assert "### Movement" not in (out / "summary.md").read_text(encoding="utf-8")
