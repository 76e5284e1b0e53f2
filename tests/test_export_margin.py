"""The gate margin ``ampbench export`` writes (``Figure.margin``): above 1 exactly where the gate fails,
so that one threshold flags the failing cells and no others, in Bencher (a static upper boundary of 1 on
the measure ``gate-margin``) and in github-action-benchmark (``--format github-margin``, customSmallerIsBetter
at ``alert-threshold: 100%``), on a real run and on a slowed copy of it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.export import MARGIN_MEASURE, bmf, cell_margins, gated_figures, github_margin
from ampbench.results import parse_run
from ampbench.stats import SpeedupEstimate, coverage_percent
from ampbench.verdict import SpeedupCheck, Verdict

DATA = Path(__file__).parent / "data"
H100 = DATA / "h100_speed_device.json"  # a real quick-tier run on an H100, device-time speedups gated
SYNTHETIC = DATA / "synthetic_h100_device.json"  # every kind of cell, device-time speedups

# the cells the slowed copy slows, and the one the real run already fails (its interval lies below its line)
SLOWED = {"test_speed[gpt-amp_bf16]", "test_speed[mlp-amp_fp16]", "test_speed[resnet50-fp16_master]"}
FAILING_BEFORE = {"test_speed[resnet50-amp_fp16]"}


def document(path: Path) -> dict:
    return json.loads(path.read_text())


def figures_of(doc: dict):
    return gated_figures(parse_run(doc, "run.json"))


def slowed_run() -> dict:
    """The real H100 run with three cells slowed by 1% of their step: their device speedup and its interval
    divided by 1.01. Every other cell moves by a quarter of its interval's width, alternately up and down:
    run-to-run noise inside the interval. Each cell's verdict is judged again as the gate judges it
    (``SpeedupCheck.classify`` against its recorded baseline and tolerance), so the copy is a run the suite
    could have written."""
    doc = copy.deepcopy(document(H100))
    for i, bench in enumerate(doc["benchmarks"]):
        info = bench["extra_info"]
        low, high = info["device_speedup_low"], info["device_speedup_high"]
        factor = 1 / 1.01 if bench["name"] in SLOWED else 1 + (-1) ** i * 0.25 * (high - low) / info["device_speedup"]
        for key in ("device_speedup", "device_speedup_low", "device_speedup_high"):
            info[key] *= factor
        check = SpeedupCheck(info["model"], info["mode"], info["device_baseline_speedup"], info["device_tolerance"])
        est = SpeedupEstimate(info["device_speedup"], info["device_speedup_low"], info["device_speedup_high"],
                              0, info["confidence"])
        info["device_verdict"] = info["verdict"] = check.classify(est).value
    return doc


def failing(doc: dict) -> set[str]:
    return {c.test_id for c in parse_run(doc, "run.json").cells if c.verdict is not None and Verdict(c.verdict).failing}


def test_the_slowed_copy_fails_the_slowed_cells_and_the_one_the_real_run_fails():
    assert failing(document(H100)) == FAILING_BEFORE
    assert failing(slowed_run()) == SLOWED | FAILING_BEFORE


@pytest.mark.parametrize("doc", [document(H100), document(SYNTHETIC), slowed_run()],
                         ids=["h100", "synthetic", "slowed"])
def test_a_cells_margin_passes_1_exactly_where_its_verdict_fails(doc):
    margins = cell_margins(figures_of(doc))
    assert margins, "a run held to baselines has margins"
    verdicts = {c.test_id: c.verdict for c in parse_run(doc, "run.json").cells}
    crossed = {test_id for test_id, f in margins.items() if f.margin > 1}
    assert crossed == {t for t in margins if verdicts[t] is not None and Verdict(verdicts[t]).failing}
    assert crossed  # each of these runs fails a cell


def test_a_speedups_margin_is_its_intervals_upper_end_below_the_baseline_in_tolerances():
    figures = figures_of(document(H100))
    f = next(f for f in figures.figures if f.test_id == "test_speed[resnet50-amp_fp16]")
    assert f.margin == pytest.approx((1 - f.high / f.baseline) / f.tolerance)
    line = f.baseline * (1 - f.tolerance)
    assert (f.high < line) == (f.margin > 1)
    # on the line exactly: 1; on the baseline: 0
    on_line = type(f)(f.test_id, f.group, f.measure, f.label, line, line * 0.99, line, tolerance=f.tolerance,
                      baseline=f.baseline)
    assert on_line.margin == pytest.approx(1.0)
    on_baseline = type(f)(f.test_id, f.group, f.measure, f.label, f.baseline, f.baseline * 0.99, f.baseline,
                          tolerance=f.tolerance, baseline=f.baseline)
    assert on_baseline.margin == pytest.approx(0.0)


def test_memory_and_accuracy_margins_are_their_checks_worsening_in_tolerances():
    figures = figures_of(document(SYNTHETIC))
    memory = next(f for f in figures.figures if f.measure == "memory-ratio")
    grown = type(memory)(memory.test_id, memory.group, memory.measure, memory.label, 0.75 * 1.03,
                         bigger_is_better=False, tolerance=0.02, baseline=0.75)
    assert grown.margin == pytest.approx(1.5)  # 3% more memory against a tolerance of 2%: it fails
    gap = type(memory)(memory.test_id, memory.group, "accuracy-gap", "accuracy against fp32", -1.5, unit="pts",
                       tolerance=3.0)
    assert gap.margin == pytest.approx(0.5)  # 1.5 points lost of the 3 the cell may lose


def test_bencher_static_threshold_of_1_flags_exactly_the_failing_cells():
    """``bencher run --threshold-measure gate-margin --threshold-test static --threshold-upper-boundary 1``:
    an alert where the metric lies above the boundary."""
    for doc in (document(H100), slowed_run()):
        exported = bmf(figures_of(doc))
        alerts = {name for name, measures in exported.items()
                  if MARGIN_MEASURE in measures and measures[MARGIN_MEASURE]["value"] > 1}
        assert alerts == failing(doc)


def _action_alerts(previous: list[dict], current: list[dict], threshold: float) -> set[str]:
    """github-action-benchmark's findAlerts for customSmallerIsBetter (src/write.ts): a bench alerts where
    current / previous value exceeds the threshold (1 where both are 0)."""
    before = {b["name"]: b["value"] for b in previous}
    alerts = set()
    for bench in current:
        prev = before.get(bench["name"])
        if prev is None:
            continue
        ratio = 1.0 if prev == 0 and bench["value"] == 0 else bench["value"] / prev
        if ratio > threshold:
            alerts.add(bench["name"].rsplit(" ", 1)[0])
    return alerts


def test_github_action_benchmark_at_100_percent_alerts_exactly_the_cells_that_cross_their_line():
    clean, slowed = github_margin(figures_of(document(H100))), github_margin(figures_of(slowed_run()))
    assert _action_alerts(clean, slowed, 1.0) == SLOWED
    assert _action_alerts(clean, clean, 1.0) == set()  # an unchanged run alerts nothing
    # every passing cell charts at 1, every failing one at its margin
    assert {b["name"].rsplit(" ", 1)[0] for b in slowed if b["value"] > 1} == SLOWED | FAILING_BEFORE


def test_the_margin_formats_from_the_command(tmp_path, capsys):
    out = tmp_path / "margin.json"
    assert main(["export", str(H100), "--format", "github-margin", "-o", str(out)]) == 0
    entries = json.loads(out.read_text())
    assert {e["name"].rsplit(" ", 1)[0] for e in entries if e["value"] > 1} == FAILING_BEFORE
    assert all(e["value"] >= 1 and "gate margin: " in e["extra"] for e in entries)
    # a run held to no baseline has no margin: refused, saying why, nothing written
    none = tmp_path / "none.json"
    assert main(["export", str(DATA / "cpu_smoke.json"), "--format", "github-margin", "-o", str(none)]) == 2
    assert "no cell is held to a regression line" in capsys.readouterr().err and not none.exists()


def test_the_github_export_says_which_coverage_its_interval_has():
    from ampbench.export import github
    extra = github(figures_of(document(H100)))[0]["extra"]
    assert "(99% coverage)" in extra


@pytest.mark.parametrize("confidence, shown", [(0.99, "99%"), (0.996, "99.6%"), (0.998, "99.8%"), (0.975, "97.5%"),
                                               (0.95, "95%"), (0.9995, "99.95%"), (1.0, "100%")])
def test_a_coverage_prints_with_a_decimal_where_whole_percent_would_round_it(confidence, shown):
    assert coverage_percent(confidence) == shown
    est = SpeedupEstimate(2.0, 1.9, 2.1, 12, confidence)
    assert f"({shown}, 12 rounds)" in str(est)
