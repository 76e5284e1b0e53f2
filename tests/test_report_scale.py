"""The charts and the progress of large runs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib.axes
import pytest

from ampbench.cli import main
from ampbench.report import charts, parse_run, progress

DATA = Path(__file__).parent / "data"


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


def test_progress_within_a_stage_waits_between_lines(capsys):
    shown = progress.Progress("report", progress.MANY_CELLS, every_s=3600)
    for done in range(1000):
        shown("comparing", done, 1000)
    shown("drawing the charts")
    assert capsys.readouterr().err.splitlines() == ["ampbench report: comparing 0 of 1,000 (0 s)",
                                                    "ampbench report: drawing the charts (0 s)"]
