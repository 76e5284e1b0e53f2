"""The comparison chart's bars, the charts and progress of large runs, and what a report killed halfway
leaves behind."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import matplotlib.axes
import pytest

from ampbench import progress
from ampbench.cli import main
from ampbench.report import build_report, charts, load_run, parse_run, write_report
from ampbench.report.compare import compare_runs
from tests import records

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """What the charts draw: bar counts of each bar()/barh() call and the y tick labels, by matplotlib's own calls."""
    seen: dict = {"bar": [], "barh": [], "labels": []}
    real_bar, real_barh, real_labels = (matplotlib.axes.Axes.bar, matplotlib.axes.Axes.barh,
                                        matplotlib.axes.Axes.set_yticklabels)

    def bar(self, x, height, *args, **kwargs):
        if x is not None:  # barh draws through bar, with its bars' positions in `bottom`
            seen["bar"].append(len(x))
        return real_bar(self, x, height, *args, **kwargs)

    def barh(self, y, width, *args, **kwargs):
        seen["barh"].append(len(y))
        return real_barh(self, y, width, *args, **kwargs)

    def labels(self, texts, *args, **kwargs):
        seen["labels"] = list(texts)
        return real_labels(self, texts, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "bar", bar)
    monkeypatch.setattr(matplotlib.axes.Axes, "barh", barh)
    monkeypatch.setattr(matplotlib.axes.Axes, "set_yticklabels", labels)
    return seen


def test_the_comparison_chart_draws_the_gated_figure_of_every_compared_cell(drawn):
    old, new = load_run(DATA / "synthetic_h100_device.json"), load_run(DATA / "h100_speed_device.json")
    comparison = compare_runs(old, new)
    gated = [r for r in comparison.rows if r.figure in ("device speedup", "speedup") and r.change is not None]
    assert len(gated) == 35 and sum(r.figure == "device speedup" for r in gated) == 28
    chart = charts.comparison_chart(comparison)
    assert chart is not None and drawn["barh"] == [len(gated)]
    labels = drawn["labels"]
    assert len(set(labels)) == len(labels) == len(gated)
    # a cell gated on its wall clock says so, where the chart also holds device-time bars
    wall = [label for label, r in zip(labels, gated) if r.figure == "speedup"]
    assert len(wall) == 7 and all(label.endswith("(wall)") for label in wall)
    assert "resnet50 amp_fp16" in labels and "device-time speedup" in chart.caption


def _distributed_run(path: Path, scale: float) -> Path:
    """A CPU run of one model and mode under three comm variants, as test_ddp_speed writes it."""
    benchmarks = []
    for comm, speedup in (("fp32", 0.8), ("bf16_hook", 0.65), ("fp16_hook", 0.78)):
        s = speedup * scale
        cell = records.distributed(model="mlp", mode="amp_bf16", device="cpu", comm=comm, world_size=2, speedup=s,
                                 speedup_low=0.9 * s, speedup_high=1.1 * s, rounds=8, confidence=0.99)
        benchmarks.append({"name": f"test_ddp_speed[mlp-amp_bf16-{comm}]", "extra_info": cell.to_info()})
    path.write_text(json.dumps({"machine_info": {"ampbench": {"device": "cpu"}}, "benchmarks": benchmarks}))
    return path


def test_distributed_bars_are_told_apart_by_their_comm_variant(tmp_path, drawn):
    old = load_run(_distributed_run(tmp_path / "old.json", 1.0))
    new = load_run(_distributed_run(tmp_path / "new.json", 0.9))
    assert charts.comparison_chart(compare_runs(old, new)) is not None
    assert drawn["labels"] == ["mlp amp_bf16 fp32", "mlp amp_bf16 bf16_hook", "mlp amp_bf16 fp16_hook"]


def _many_models(models: int) -> dict:
    """A run of `models` models: the device-time capture's cells again under new model names."""
    document = json.loads((DATA / "h100_speed_device.json").read_text())
    benches = []
    for k in range(models // 5):
        for bench in document["benchmarks"]:
            bench = copy.deepcopy(bench)
            info = bench["extra_info"]
            model = f"{info['model']}_c{k}"
            bench["name"] = bench["name"].replace(f"[{info['model']}-", f"[{model}-")
            info["model"] = model
            benches.append(bench)
    return dict(document, benchmarks=benches)


def test_a_run_of_many_models_charts_the_first_ones_and_says_so(tmp_path, monkeypatch, drawn):
    monkeypatch.setattr(charts, "CHART_MODELS", 5)
    run = parse_run(_many_models(10), tmp_path / "run.json")
    speedup = next(c for c in charts.run_charts(run) if c.filename == "speedup.png")
    assert "The first 5 of the run's 10 models with this figure are drawn" in speedup.caption
    # one bar() per mode, one bar per model with the mode: 5 models in 7 modes, none of the other 5 models
    assert len(drawn["bar"]) >= 7 and sum(drawn["bar"][:7]) == 5 * 7
    small = parse_run(_many_models(5), tmp_path / "small.json")
    assert all("are drawn;" not in c.caption for c in charts.run_charts(small))


def test_a_large_comparison_draws_its_notable_rows_and_says_so(tmp_path, monkeypatch, drawn):
    monkeypatch.setattr(charts, "COMPARE_BARS", 12)
    old = load_run(DATA / "synthetic_h100_device.json")
    new = load_run(DATA / "h100_speed_device.json")
    comparison = compare_runs(old, new)
    chart = charts.comparison_chart(comparison)
    assert drawn["barh"] == [12] and "The 12 most notable of 35 compared figures are drawn" in chart.caption
    # every regression (11) makes it in, before any pass or improvement
    regressions = {r.test_id for r in comparison.rows if r.charted and r.verdict == "regression"}
    assert len(regressions) == 11
    drawn_ids = {r.test_id for r in comparison.rows if r.charted and charts._cell_label(r.test_id) in
                 {label.removesuffix(" (wall)") for label in drawn["labels"]}}
    assert regressions <= drawn_ids


def test_large_runs_report_progress_on_stderr_and_small_ones_stay_quiet(tmp_path, monkeypatch, capsys):
    run = DATA / "h100_speed_device.json"
    assert main(["report", str(run), "--compare", str(DATA / "synthetic_h100_device.json"),
                 "-o", str(tmp_path / "small")]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "MANY_CELLS", 20)
    assert main(["report", str(run), "--compare", str(DATA / "synthetic_h100_device.json"),
                 "-o", str(tmp_path / "large")]) == 0
    err = capsys.readouterr().err.splitlines()
    stages = [line.split(": ", 1)[1].rsplit(" (", 1)[0] for line in err]
    assert stages[:2] == [f"reading {run}", f"reading {DATA / 'synthetic_h100_device.json'}"]
    assert "rendering index.html" in stages and stages[-1] == "writing the report"
    assert all(line.startswith("ampbench report: ") for line in err)
    assert main(["compare", str(DATA / "synthetic_h100_device.json"), str(run)]) == 1
    assert "ampbench compare: comparing 0 of 35" in capsys.readouterr().err


def test_a_long_stage_is_said_again_every_few_seconds_until_the_command_ends(capsys):
    with progress.Progress("report", progress.MANY_CELLS, every_s=0.05) as shown:
        shown("rendering index.html")
        deadline = time.monotonic() + 10
        while shown.last < shown.start + 0.1 and time.monotonic() < deadline:
            time.sleep(0.02)  # one long call, as rendering a page is
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) >= 2 and all(line.startswith("ampbench report: rendering index.html (") for line in lines)
    time.sleep(0.2)
    assert capsys.readouterr().err == ""


def test_progress_within_a_stage_waits_between_lines(capsys):
    shown = progress.Progress("report", progress.MANY_CELLS, every_s=3600)
    for done in range(1000):
        shown("comparing", done, 1000)
    shown("drawing the charts")
    assert capsys.readouterr().err.splitlines() == ["ampbench report: comparing 0 of 1,000 (0 s)",
                                                    "ampbench report: drawing the charts (0 s)"]


KILLED_WRITE = textwrap.dedent("""
    import os, signal, sys
    from ampbench.report import write_report

    class Files(dict):
        def items(self):
            yield "a.txt", b"a"
            os.kill(os.getpid(), signal.SIGKILL)  # killed with the report half written

    write_report(sys.argv[1], Files(x=b""))
""")


def _killed_write(out: Path) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(out)], cwd=ROOT, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == -signal.SIGKILL, done.stderr


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".report."))


def test_a_report_killed_halfway_leaves_temp_folders_the_next_one_removes(tmp_path):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"first"})
    _killed_write(out)
    left = _leftovers(tmp_path)
    assert len(left) == 1 and left[0].endswith(".tmp")
    # another report's temp folder, whose writer is still running (this test's parent), is not touched
    running = tmp_path / f".report.{os.getppid()}.abcdefgh.tmp"
    running.mkdir()
    unrelated = [tmp_path / ".report.tmp", tmp_path / ".other.1.x.tmp"]
    for p in unrelated:
        p.mkdir()
    write_report(out, build_report(load_run(DATA / "cpu_smoke.json")))
    assert _leftovers(tmp_path) == sorted([running.name, ".report.tmp"])
    assert (tmp_path / ".other.1.x.tmp").is_dir() and (out / "index.html").read_bytes() != b"first"


def test_a_report_killed_between_the_swaps_gets_its_previous_report_back(tmp_path, monkeypatch):
    out = tmp_path / "report"
    write_report(out, {"index.html": b"first"})
    # as a kill leaves it after the previous report went aside and before the new one came in
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    old = tmp_path / f".report.{int(done.stdout)}.abcdefgh.old"
    old.mkdir()
    os.replace(out, old / "report")
    write_report(tmp_path / "elsewhere", {"index.html": b"other"})
    assert not out.exists() and old.is_dir()  # a report into another folder leaves these leftovers alone

    def disk_full(self, data):
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", disk_full)
    with pytest.raises(OSError, match="disk full"):
        write_report(out, {"summary.md": b"second"})
    # the next report's write failed, and the previous report stands where it was
    assert _leftovers(tmp_path) == [] and (out / "index.html").read_text() == "first"
