"""The gate margin ``ampbench export`` writes (``Figure.margin``): above 1 exactly where the gate fails,
so that one threshold flags the failing cells and no others, in Bencher (a static upper boundary of 1 on
the measure ``gate-margin``) and in github-action-benchmark (``--format github-margin``, customSmallerIsBetter
at ``alert-threshold: 100%``), on a real run and on a slowed copy of it."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
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


# github-action-benchmark's own comparison (src/write.ts and what it calls), run by node from a faithful
# JavaScript transcription of its source, with its licence and the upstream commit in the file's header
ACTION = DATA / "github_action_benchmark" / "alerts.js"
NODE = shutil.which("node")
# the series a dashboard sees: two clean runs, three with SLOWED slowed, a clean one
SERIES = (False, False, True, True, True, False)


def judged_copy(slowed: bool, phase: int) -> dict:
    """A run of the series: the real H100 run with each cell moved by a quarter of its interval's width,
    alternately up and down (`phase` flips which), the one cell the real run fails put back on its
    baseline, and with `slowed` the SLOWED cells 1% slower; every verdict judged again as the gate
    judges it. So a clean copy fails no cell, a slowed one exactly SLOWED."""
    doc = copy.deepcopy(document(H100))
    for i, bench in enumerate(doc["benchmarks"]):
        info = bench["extra_info"]
        low, high = info["device_speedup_low"], info["device_speedup_high"]
        factor = 1 + (-1) ** (i + phase) * 0.25 * (high - low) / info["device_speedup"]
        if bench["name"] in FAILING_BEFORE:
            factor *= info["device_baseline_speedup"] / info["device_speedup"]
        if slowed and bench["name"] in SLOWED:
            factor /= 1.01
        for key in ("device_speedup", "device_speedup_low", "device_speedup_high"):
            info[key] *= factor
        check = SpeedupCheck(info["model"], info["mode"], info["device_baseline_speedup"], info["device_tolerance"])
        est = SpeedupEstimate(info["device_speedup"], info["device_speedup_low"], info["device_speedup_high"],
                              0, info["confidence"])
        info["device_verdict"] = info["verdict"] = check.classify(est).value
    return doc


def series() -> list[dict]:
    return [judged_copy(slowed, i % 2) for i, slowed in enumerate(SERIES)]


def action_alerts(runs: list[list[dict]], threshold: str = "100%") -> list[list[str] | None]:
    """The cells github-action-benchmark (customSmallerIsBetter at `threshold`) alerts in each run of
    `runs`, each run one job's output file, in order; None where it skips the check (no previous run)."""
    if NODE is None:
        pytest.skip("node is not on PATH: github-action-benchmark's comparison is JavaScript")
    request = {"tool": "customSmallerIsBetter", "name": "ampbench gate margins", "alert_threshold": threshold,
               "runs": runs}
    done = subprocess.run([NODE, str(ACTION)], input=json.dumps(request), capture_output=True, text=True,
                          timeout=60, check=True)
    return [None if run is None else sorted(a["name"].rsplit(" ", 1)[0] for a in run["alerts"])
            for run in json.loads(done.stdout)]


def test_the_series_fails_exactly_the_slowed_cells_in_its_slowed_runs():
    assert [failing(doc) for doc in series()] == [SLOWED if slowed else set() for slowed in SERIES]
    controls = {c.test_id for c in parse_run(document(H100), "run.json").cells if c.mode == "fp32"}
    assert controls and not controls & SLOWED  # fp32 against itself: controls, held to lines of their own


def test_github_action_benchmark_alerts_each_failing_cell_once_in_every_run_it_fails():
    """clean, clean, slowed, slowed, slowed, clean: no alert on the clean runs or on any control, and in each
    slowed run one alert per slowed cell, the persisting ones included."""
    alerts = action_alerts([github_margin(figures_of(doc)) for doc in series()])
    assert alerts == [None, [], sorted(SLOWED), sorted(SLOWED), sorted(SLOWED), []]


def test_a_margin_compared_with_its_previous_point_alerts_on_noise_and_not_on_a_persisting_failure():
    """Why each cell carries its line: the margin alone, against the previous run's, alerts the cells that
    cross their line only in the run they cross it, and then what noise moves."""
    margins_only = [[e for e in github_margin(figures_of(doc)) if "gate margin: " in e["extra"]]
                    for doc in series()]
    alerts = action_alerts(margins_only)
    assert alerts[2] == sorted(SLOWED) and alerts[3:5] != [sorted(SLOWED)] * 2


def test_a_cell_failing_on_its_first_report_is_the_export_checks_to_fail():
    """The action compares nothing on its first run, nor a name the previous run did not have: a cell that
    fails from its first report never alerts there. ``--fail-on-margin`` fails the job instead."""
    slowed = github_margin(figures_of(judged_copy(True, 0)))
    assert action_alerts([slowed]) == [None]
    new = "test_speed[gpt-amp_bf16]"
    before = [e for e in github_margin(figures_of(judged_copy(False, 1))) if not e["name"].startswith(new + " ")]
    assert action_alerts([before, slowed]) == [None, sorted(SLOWED - {new})]


def test_fail_on_margin_exits_1_naming_each_cell_past_its_line(tmp_path, capsys):
    run = tmp_path / "slowed.json"
    run.write_text(json.dumps(judged_copy(True, 0)))
    out = tmp_path / "margins.json"
    assert main(["export", str(run), "--format", "github-margin", "-o", str(out), "--fail-on-margin"]) == 1
    err = capsys.readouterr().err
    named = {line.split("FAILS: ", 1)[1].split(":", 1)[0] for line in err.splitlines() if "FAILS: " in line}
    assert named == SLOWED and "--fail-on-margin: 3 cells past their line" in err
    assert json.loads(out.read_text())  # written all the same: the dashboard still gets the run
    clean = tmp_path / "clean.json"
    clean.write_text(json.dumps(judged_copy(False, 0)))
    assert main(["export", str(clean), "--format", "github", "-o", str(tmp_path / "f.json"), "--fail-on-margin"]) == 0
    assert "FAILS" not in capsys.readouterr().err
    # a run held to no line has nothing to check: refused rather than passed
    smoke = tmp_path / "smoke.json"
    assert main(["export", str(DATA / "cpu_smoke.json"), "--format", "github", "-o", str(smoke),
                 "--fail-on-margin"]) == 2
    assert "no cell of" in capsys.readouterr().err


def test_the_margin_formats_from_the_command(tmp_path, capsys):
    out = tmp_path / "margin.json"
    assert main(["export", str(H100), "--format", "github-margin", "-o", str(out)]) == 0
    entries = json.loads(out.read_text())
    assert {e["name"].rsplit(" ", 1)[0] for e in entries if e["value"] > 1} == FAILING_BEFORE
    assert all(e["value"] >= 1 for e in entries)
    # per cell its line, then its margin, under one name
    assert [e["value"] for e in entries[::2]] == [1.0] * (len(entries) // 2)
    assert all(a["name"] == b["name"] and "gate margin: " in b["extra"] for a, b in zip(entries[::2], entries[1::2]))
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


# ---------------------------------------------------------------------------------------------------
# the Bencher thresholds docs/design.md recommends, measure by measure

DESIGN = Path(__file__).parent.parent / "docs" / "design.md"


def documented_thresholds() -> dict[str, tuple[str, str, float]]:
    """measure -> (test, "upper" or "lower", boundary) of each row of design.md's table of bmf measures
    whose Bencher column gives a threshold."""
    text = DESIGN.read_text(encoding="utf-8")
    table = text[text.index("Each measure of `bmf`"):]
    out = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `"):
            if out:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        measure, bencher = cells[0].strip("`"), cells[3]
        test = re.search(r"--threshold-test (\w+)", bencher)
        bound = re.search(r"--threshold-(upper|lower)-boundary (-?[\d.]+)", bencher)
        if test or bound:
            assert test and bound, f"design.md: {measure}'s threshold names a test and one boundary: {bencher}"
            out[measure] = (test.group(1), bound.group(1), float(bound.group(2)))
    return out


def bencher_alerts(runs: list[dict], thresholds: dict[str, tuple[str, str, float]]) -> list[list[tuple[str, str]]]:
    """Per run of `runs` (bmf documents, in order), the (test id, measure) pairs Bencher alerts under
    `thresholds`: a static boundary is the limit itself; a percentage one lies that fraction beyond the
    mean of the measure's earlier values (none before the first)."""
    history: dict[tuple[str, str], list[float]] = {}
    out = []
    for run in runs:
        alerts = []
        for test_id, measures in run.items():
            for measure, metric in measures.items():
                earlier = history.setdefault((test_id, measure), [])
                if measure in thresholds:
                    test, side, boundary = thresholds[measure]
                    assert test in ("static", "percentage"), f"design.md: no model of Bencher's {test} test here"
                    if test == "static":
                        limit = boundary
                    elif earlier:
                        mean = sum(earlier) / len(earlier)
                        limit = mean * (1 + boundary) if side == "upper" else mean * (1 - boundary)
                    else:
                        limit = None
                    if limit is not None and (metric["value"] > limit if side == "upper" else metric["value"] < limit):
                        alerts.append((test_id, measure))
                earlier.append(metric["value"])
        out.append(sorted(alerts))
    return out


def test_design_mds_bencher_thresholds_alert_each_failing_cell_once_and_nothing_on_a_clean_run():
    thresholds = documented_thresholds()
    assert thresholds.get(MARGIN_MEASURE) == ("static", "upper", 1.0)
    alerts = bencher_alerts([bmf(figures_of(doc)) for doc in series()], thresholds)
    slowed = sorted((test_id, MARGIN_MEASURE) for test_id in SLOWED)
    assert alerts == [[], [], slowed, slowed, slowed, []]


def test_a_percentage_threshold_on_a_speedup_alerts_on_a_clean_run():
    """What the table must not recommend: one relative tolerance for every cell of a measure, against the
    mean of earlier runs, flags quiet cells and controls on noise alone."""
    thresholds = {"device-speedup": ("percentage", "lower", 0.005)}
    alerts = bencher_alerts([bmf(figures_of(doc)) for doc in series()], thresholds)
    assert alerts[1] and not {test_id for test_id, _ in alerts[1]} & SLOWED
