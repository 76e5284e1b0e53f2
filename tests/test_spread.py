"""Learning each speed cell's between-run spread from saved runs: which runs count, what is stored,
and the `ampbench spread` command around it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from types import SimpleNamespace

from ampbench.baselines.store import load_document, measurement_mismatch
from ampbench.files.write import write_atomic
from ampbench.speed import ratio as ratios
from ampbench.speed import sides
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.report import parse_run
from ampbench.speed.judging import across_runs_of, describe_across
from ampbench.baselines.spread import (
    DEVICE,
    FIGURES,
    VERSUS,
    WALL,
    learn,
    software_difference,
    with_spread,
)
from ampbench.stats import SpeedupEstimate, log_sd
from ampbench.baselines.entries import RatioEntry, SpeedEntry
from ampbench.verdict import UNLEARNED_TOLERANCE, BetweenRuns, tolerance_for
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.baselines.entries import entry_tolerance, learned_spread


def _spread(figures, prefix=""):
    """The learned spread of the ratio `figures` (a baseline entry's) hold under `prefix`."""
    return learned_spread(None if figures is None else RatioEntry.read(figures, prefix))


def _tolerance(floor, figures, prefix, noise=None):
    """The tolerance of the ratio `figures` hold under `prefix`."""
    return entry_tolerance(floor, RatioEntry.read(figures, prefix), noise)


SOFTWARE = {"torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "driver": "580.159.04",
            "device": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
MEASURED = {"cudnn_benchmark": False, "block_seconds": 0.1}
WRN = "test_speed[wide_resnet28_10-amp_fp16]"
GPT = "test_speed[gpt-bf16]"


def _baseline() -> dict:
    entry = lambda speedup: {"figures": {"speedup": speedup, "noise": 0.01, **MEASURED}, "software": dict(SOFTWARE),
                             "recorded": "2026-11-21T18:58:39Z"}
    return {"schema_version": 1, "gpu": SOFTWARE["device"], "entries": {
        WRN: entry(8.402), GPT: entry(6.422),
        "test_memory[gpt-bf16]": {"figures": {"memory_ratio": 0.5, "peak_mem_bytes": 2**30}, "software": dict(SOFTWARE), "recorded": "2026-11-21T18:58:39Z"}}}


def _run(speedups: dict[str, float], when: str, software: dict | None = None, **info) -> dict:
    """A benchmark JSON document holding one speed cell per entry of `speedups`."""
    benchmarks = [{"name": test_id, "extra_info": {"ampbench_schema": 1, "kind": "speed", "speedup": s,
                                                    "verdict": "pass", **MEASURED, **info}}
                  for test_id, s in speedups.items()]
    return {"benchmarks": benchmarks, "datetime": when, "machine_info": {"ampbench": software or dict(SOFTWARE)}}


def _learn(*documents: dict, baseline: dict | None = None):
    entries = (baseline or _baseline())["entries"]
    return learn(entries, [parse_run(d, f"run{i}.json") for i, d in enumerate(documents)])


def test_the_recording_and_each_matching_run_are_one_sample_each():
    learned = _learn(_run({WRN: 8.583, GPT: 6.35}, "2026-11-21T19:00:00"), _run({WRN: 8.381}, "2026-11-21T20:00:00"))
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.cells[WRN].sd == pytest.approx(log_sd([8.402, 8.583, 8.381]))
    assert learned.cells[GPT].speedups == (6.422, 6.35)


@pytest.mark.parametrize("run, why", [
    (_run({WRN: 8.0}, "t", software=dict(SOFTWARE, torch="2.12.0+cu130")), "torch 2.11.0+cu130 in the baseline, 2.12.0+cu130 in the run"),
    (_run({WRN: 8.0}, "t", cudnn_benchmark=True), "cudnn_benchmark False in the baseline, True here"),
    (_run({WRN: 8.0}, "t", recording=True), "recorded the baseline"),
    (_run({WRN: None}, "t"), "no speedup"),
    (_run({"test_speed[dpn26-fp16]": 2.3}, "t"), "no speed entry"),
])
def test_a_run_cell_that_measured_something_else_is_left_out_with_the_reason(run, why):
    learned = _learn(run)
    assert learned.cells == {}
    [(name, _, reason)] = learned.left_out
    assert name == "run0.json" and why in reason


def test_the_same_run_given_twice_counts_once():
    run = _run({WRN: 8.583}, "2026-11-21T19:00:00.123456+00:00")
    learned = _learn(run, run)
    assert learned.cells[WRN].speedups == (8.402, 8.583)
    assert learned.left_out == [("run1.json", "*", "the same run as run0.json (same datetime)")]


def test_each_run_is_one_sample_also_where_several_ran_on_one_card():
    card = lambda uuid: dict(SOFTWARE, uuid=uuid)
    learned = _learn(_run({WRN: 8.5}, "a", software=card("88b4")), _run({WRN: 8.7}, "b", software=card("88b4")),
                     _run({WRN: 8.3}, "c", software=card("1f0e")))
    assert learned.cells[WRN].speedups == (8.402, 8.5, 8.7, 8.3)


def test_a_cell_with_an_injected_slowdown_is_no_sample():
    learned = _learn(_run({WRN: 8.0}, "a", injected_slowdown=0.01), _run({WRN: 8.5}, "b"))
    assert learned.cells[WRN].speedups == (8.402, 8.5)
    [(name, _, why)] = learned.left_out
    assert name == "run0.json" and "slowdown of 0.01 was injected" in why


def test_software_difference_names_each_differing_layer():
    assert software_difference(SOFTWARE, dict(SOFTWARE)) is None
    text = software_difference(SOFTWARE, dict(SOFTWARE, driver="590.1", cudnn=92000))
    assert "driver 580.159.04 in the baseline, 590.1 in the run" in text and "cudnn 91900" in text


def test_software_difference_holds_triton_and_torchao_where_the_entry_names_them():
    run = dict(SOFTWARE, triton="3.6.0", torchao="0.17.0")
    assert software_difference(SOFTWARE, run) is None  # the entry names no compiler or torchao version
    recorded = dict(SOFTWARE, triton="3.6.0", torchao="0.17.0")
    assert software_difference(recorded, run) is None
    text = software_difference(recorded, dict(run, torchao="0.18.0", triton="3.7.0"))
    assert text == "other software: triton 3.6.0 in the baseline, 3.7.0 in the run; torchao 0.17.0 in the baseline, 0.18.0 in the run"
    assert "torchao 0.17.0 in the baseline, None in the run" in software_difference(recorded, dict(SOFTWARE, triton="3.6.0"))


def test_with_spread_adds_the_figures_and_keeps_everything_else():
    document = _baseline()
    learned = _learn(_run({WRN: 8.583}, "a"), _run({WRN: 8.381}, "b"))
    new = with_spread(document, learned)
    figures = new["entries"][WRN]["figures"]
    assert figures["between_run_sd"] == pytest.approx(learned.cells[WRN].sd) and figures["between_run_count"] == 3
    # centred on the mean of the recording and the runs; the recording's own value kept beside it
    assert figures["speedup"] == pytest.approx((8.402 * 8.583 * 8.381) ** (1 / 3)) and figures["recorded_speedup"] == 8.402
    assert new["entries"][WRN]["recorded"] == document["entries"][WRN]["recorded"]
    assert new["entries"][GPT] == document["entries"][GPT] and "between_run_sd" not in document["entries"][WRN]["figures"]




def test_the_suite_reports_an_interval_across_runs_only_where_the_baseline_has_a_spread():
    est = SpeedupEstimate(8.5, 8.45, 8.55, 20, 0.99)
    assert across_runs_of(est, None) is None
    assert across_runs_of(est, SpeedEntry.from_figures({"speedup": 8.4}).wall.between_run_sd) is None
    assert across_runs_of(est, SpeedEntry.from_figures({"speedup": 8.4, "between_run_sd": None}).wall.between_run_sd) is None
    baseline = SpeedEntry.from_figures({"speedup": 8.4, "between_run_sd": 0.012, "between_run_count": 5}).wall
    across = across_runs_of(est, baseline.between_run_sd)
    assert across.low < est.low and across.high > est.high and across.between_run_sd == 0.012
    assert describe_across(across, baseline.between_run_count).endswith("(between-run sd 1.2% from 5 runs)")


# ---------------------------------------------------------------------------------------------------
# the device-time speedup's spread, learned in the same pass

WRN_DEVICE = 3.104  # the recording's device-time speedup of WRN amp_fp16


def _device_baseline(method: str = "graph") -> dict:
    """The baseline with a device-time speedup on WRN's entry (GPT's entry predates device time)."""
    document = _baseline()
    document["entries"][WRN]["figures"].update(device_speedup=WRN_DEVICE, device_method=method, device_noise=0.004)
    return document


def _device_run(speedups: dict[str, tuple[float, float | None]], when: str, method: str = "graph", **info) -> dict:
    """A run whose cells carry (wall, device) speedups; a device speedup of None leaves the key out, as
    a run from before device time did."""
    run = _run({t: wall for t, (wall, _) in speedups.items()}, when, **info)
    for bench in run["benchmarks"]:
        device = speedups[bench["name"]][1]
        if device is not None:
            bench["extra_info"].update(device_speedup=device, device_method=method)
    return run


def test_the_table_names_every_figure_and_where_each_is_stored():
    assert [f.key for f in FIGURES] == ["speedup", "device_speedup", "versus_speedup"]
    entry = SpeedEntry.from_figures({"speedup": 2.0, "between_run_sd": 0.01, "between_run_count": 3,
                                     "device_between_run_sd": 0.02, "device_between_run_count": 4,
                                     "device_method": "graph", "versus_between_run_sd": 0.03, "versus": "amp_bf16"})
    assert (WALL.ratio(entry).between_run_sd, WALL.ratio(entry).between_run_count) == (0.01, 3)
    assert (DEVICE.ratio(entry).between_run_sd, DEVICE.ratio(entry).between_run_count) == (0.02, 4)
    assert (DEVICE.method_key, DEVICE.ratio(entry).method, WALL.method_key) == ("device_method", "graph", None)
    assert (VERSUS.ratio(entry).between_run_sd, VERSUS.method_key, VERSUS.over_key, VERSUS.prefix) == (
        0.03, "versus_method", "versus", "versus_")


def test_a_compiled_cells_ratio_over_its_versus_side_learns_its_spread_and_tolerance():
    document = _device_baseline()
    document["entries"][WRN]["figures"].update(versus="amp_bf16", versus_speedup=1.15, versus_method="graph",
                                               versus_noise=0.001)
    runs = [_device_run({WRN: (8.5, 3.1)}, f"2026-11-2{i}T10:00:00", versus="amp_bf16", versus_speedup=v,
                        versus_method="graph") for i, v in enumerate((1.16, 1.14, 1.17))]
    # a run of the ratio over another side is another ratio
    runs.append(_device_run({WRN: (8.5, 3.1)}, "2026-11-25T10:00:00", versus="amp_fp16", versus_speedup=1.3,
                            versus_method="graph"))
    learned = learn(document["entries"], [parse_run(d, f"run{i}.json") for i, d in enumerate(runs)])
    assert learned.versus_cells[WRN].speedups == (1.15, 1.16, 1.14, 1.17)
    assert any("over amp_fp16 in the run and over amp_bf16 in the baseline" in why for _, _, why in learned.left_out)
    figures = with_spread(document, learned)["entries"][WRN]["figures"]
    assert figures["versus_recorded_speedup"] == 1.15 and figures["versus_between_run_count"] == 4
    assert figures["versus_tolerance"] == _tolerance(DEFAULT_TOLERANCE, figures, "versus_")
    assert figures["versus_tolerance"] == tolerance_for(DEFAULT_TOLERANCE, 0.001, _spread(figures, "versus_"))
    assert figures["versus_tolerance"] > 0.02, "four values 1-2% apart: the bound is wider than the floor"


def test_the_device_speedup_is_learned_in_the_same_pass_as_the_wall_speedup():
    learned = _learn(_device_run({WRN: (8.583, 3.121), GPT: (6.35, 2.2)}, "a"), _device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=_device_baseline())
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.121, 3.087)
    assert learned.device_cells[WRN].sd == pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087]))
    # GPT's entry has no device-time speedup: its wall spread is learned, its device spread is not
    assert GPT in learned.cells and GPT not in learned.device_cells


def test_learning_again_starts_from_the_recording_not_from_the_mean():
    document = _baseline()
    once = with_spread(document, _learn(_run({WRN: 8.583}, "a"), _run({WRN: 8.381}, "b")))
    again = _learn(_run({WRN: 8.583}, "a"), _run({WRN: 8.381}, "b"), _run({WRN: 8.5}, "c"), baseline=once)
    assert again.cells[WRN].speedups == (8.402, 8.583, 8.381, 8.5)


def test_a_run_cell_without_a_device_speedup_adds_nothing_to_the_device_spread_and_is_not_left_out():
    learned = _learn(_device_run({WRN: (8.583, None)}, "a"), _device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=_device_baseline())
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.087)


def test_an_entry_without_a_device_speedup_learns_no_device_spread():
    learned = _learn(_device_run({WRN: (8.583, 3.121)}, "a"))  # the plain baseline: no device figures
    assert learned.left_out == [] and learned.device_cells == {} and learned.cells[WRN].speedups == (8.402, 8.583)


def test_a_run_whose_device_time_was_measured_another_way_is_left_out_of_the_device_spread_only():
    learned = _learn(_device_run({WRN: (8.583, 2.9)}, "a", method="kernels"), baseline=_device_baseline("graph"))
    assert learned.cells[WRN].speedups == (8.402, 8.583)  # the wall figure still counts
    assert learned.device_cells == {}
    [(name, test_id, why)] = learned.left_out
    assert (name, test_id) == ("run0.json", WRN)
    assert "device-time speedup measured by kernels in the run and by graph in the baseline" in why


def test_a_run_cell_left_out_as_a_whole_gives_neither_figure_and_one_reason():
    learned = _learn(_device_run({WRN: (7.0, 2.5)}, "a", injected_slowdown=0.01), baseline=_device_baseline())
    assert learned.cells == {} and learned.device_cells == {}
    [(_, _, why)] = learned.left_out
    assert "injected" in why


def test_a_failed_cell_of_an_unchanged_run_counts_since_it_was_a_false_alarm():
    learned = _learn(_run({WRN: 8.0}, "a", verdict="regression"))
    assert learned.left_out == [] and learned.cells[WRN].speedups == (8.402, 8.0)


def test_with_spread_stores_the_device_figures_beside_the_wall_ones():
    document = _device_baseline()
    learned = _learn(_device_run({WRN: (8.583, 3.121), GPT: (6.2, None)}, "a"), _device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=document)
    new = with_spread(document, learned)
    wrn, gpt = new["entries"][WRN]["figures"], new["entries"][GPT]["figures"]
    assert wrn["device_between_run_sd"] == pytest.approx(learned.device_cells[WRN].sd)
    assert wrn["device_between_run_count"] == 3 and wrn["between_run_count"] == 3
    assert wrn["device_recorded_speedup"] == WRN_DEVICE and wrn["device_method"] == "graph"
    assert wrn["device_speedup"] == pytest.approx((WRN_DEVICE * 3.121 * 3.087) ** (1 / 3))
    assert "device_between_run_sd" not in gpt and gpt["between_run_count"] == 2
    # what the suite reads back: three values are enough to loosen a verdict
    assert _spread(wrn, "device_") == BetweenRuns(pytest.approx(learned.device_cells[WRN].sd), 3, True)
    assert "device_between_run_sd" not in document["entries"][WRN]["figures"]


def test_with_spread_stores_the_device_tolerance_the_verdict_will_now_use():
    document = _device_baseline()
    learned = _learn(_device_run({WRN: (8.583, 3.121)}, "a"), _device_run({WRN: (8.381, 3.087)}, "b"), baseline=document)
    wrn = with_spread(document, learned)["entries"][WRN]["figures"]
    expected = tolerance_for(DEFAULT_TOLERANCE, wrn.get("device_noise"), BetweenRuns(learned.device_cells[WRN].sd, 3, True))
    assert wrn["device_tolerance"] == pytest.approx(expected)
    assert wrn["device_tolerance"] >= DEFAULT_TOLERANCE


# resnet50 amp_fp16's shipped H100 entry, as far as a re-recording reads it: a device-time spread learned
# from 20 runs, which had given it the 0.5% floor
LEARNED_ENTRY = {"speedup": 5.204, "noise": 0.035, "device_speedup": 5.485, "device_noise": 0.0017,
                 "device_tolerance": 0.005, "device_method": "graph", "cudnn_benchmark": False, "block_seconds": 0.1,
                 "between_run_sd": 0.0657, "between_run_count": 20, "recorded_speedup": 5.273,
                 "device_between_run_sd": 0.0011358, "device_between_run_count": 20, "device_recorded_speedup": 5.4826,
                 "between_run_runs": ["r1", "r2"], "device_between_run_runs": ["r1", "r2"]}
ALIKE = {"cudnn_benchmark": False, "block_seconds": 0.1}


POLICY = sides.SpeedPolicy(0, 0.0, 0.01, RoundsPolicy(8, 12, 0.001, 5.0), RoundsPolicy(8, 8, 1.0, 5.0), extend_to=16)


def _rerecorded(monkeypatch, previous: dict | None, method: str = "graph", measured_with: dict = ALIKE) -> dict:
    """What a re-recording stores of the cell's device-time and wall-clock ratios, as the speed cell
    records them (``Ratio.recorded``), over stand-in sides whose rounds hold steady to 0.1%."""
    def timer(*_):
        wobble = iter([1.0, 1.001, 0.999] * 100)
        return PairedTimer(lambda: 0.0055 * next(wobble), lambda: 0.001 * next(wobble), 1, 1)

    monkeypatch.setattr(sides, "device_timing", lambda over, side: SimpleNamespace(method=method, fallback=None, timer=timer))
    monkeypatch.setattr(sides, "fresh_timer", timer)
    entry = SpeedEntry.of(previous)
    alike = entry is not None and measurement_mismatch(entry, measured_with) is None
    stored = {}
    for kind in (ratios.DEVICE, ratios.WALL):
        ratio = ratios.Ratio.between(kind, object(), object()).hold("resnet50", "amp_fp16", entry, DEFAULT_TOLERANCE)
        stored.update(ratio.time(POLICY, gated=True).recorded(entry, False, alike, POLICY, DEFAULT_TOLERANCE))
    return stored


def test_a_re_recording_keeps_the_learned_spread_and_re_centres_only_the_level(monkeypatch):
    # a re-recording knows nothing of the software: a new driver, torch or Triton (or an entry recorded
    # before Triton was named) re-centres the level and keeps the spread
    kept = _rerecorded(monkeypatch, LEARNED_ENTRY)
    assert kept["device_between_run_sd"] == 0.0011358 and kept["device_between_run_count"] == 20
    assert kept["device_between_run_runs"] == ["r1", "r2"]
    assert kept["between_run_sd"] == 0.0657 and kept["between_run_count"] == 20
    # the recorded values of the old level are no part of the new one: the new level is the recording alone
    assert "device_recorded_speedup" not in kept and "recorded_speedup" not in kept
    assert kept["device_speedup"] == pytest.approx(5.5, rel=0.01)
    # so the tolerance is the learned bound around one value (t(99.9%) with 19 df x sqrt(2) x sd), not 3%
    expected = 3.579400 * math.sqrt(2) * 0.0011358
    assert kept["device_tolerance"] == pytest.approx(max(DEFAULT_TOLERANCE, expected), rel=1e-5)
    assert DEFAULT_TOLERANCE < kept["device_tolerance"] < 0.006


def test_a_re_recording_measured_another_way_drops_the_spread_of_what_it_measures_otherwise(monkeypatch):
    other_method = _rerecorded(monkeypatch, LEARNED_ENTRY, method="kernels")
    assert "device_between_run_sd" not in other_method and other_method["between_run_count"] == 20
    assert other_method["device_tolerance"] == UNLEARNED_TOLERANCE
    other_blocks = _rerecorded(monkeypatch, LEARNED_ENTRY, measured_with={**ALIKE, "block_seconds": 0.4})
    assert not {k for k in other_blocks if "between_run" in k}
    assert other_blocks["device_tolerance"] == UNLEARNED_TOLERANCE
    first = _rerecorded(monkeypatch, None)
    assert first["device_tolerance"] == max(2 * first["device_noise"], UNLEARNED_TOLERANCE)


# ---------------------------------------------------------------------------------------------------
# the command


def _files(tmp_path: Path, *runs: dict) -> tuple[Path, list[str]]:
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, _baseline())
    paths = []
    for i, run in enumerate(runs):
        path = tmp_path / f"run{i}.json"
        path.write_text(json.dumps(run))
        paths.append(str(path))
    return baseline, paths


def test_spread_command_writes_the_figures_and_prints_them(tmp_path, capsys):
    baseline, runs = _files(tmp_path, _run({WRN: 8.583}, "a"), _run({WRN: 8.381, GPT: 6.2}, "b"))
    assert main(["spread", str(baseline), *runs]) == EXIT_OK
    out = capsys.readouterr().out
    assert WRN in out and "written to" in out
    entries = load_document(baseline)["entries"]
    assert entries[WRN]["figures"]["between_run_count"] == 3
    assert entries[GPT]["figures"]["between_run_sd"] == pytest.approx(abs(math.log(6.422 / 6.2)) / math.sqrt(2))
    assert "between_run_sd" not in entries["test_memory[gpt-bf16]"]["figures"]


def test_spread_dry_run_writes_nothing(tmp_path, capsys):
    baseline, runs = _files(tmp_path, _run({WRN: 8.583}, "a"))
    before = baseline.read_bytes()
    assert main(["spread", "--dry-run", str(baseline), *runs]) == EXIT_OK
    assert baseline.read_bytes() == before and "left as it was" in capsys.readouterr().out


def test_spread_with_no_run_that_counts_is_an_error_and_says_why(tmp_path, capsys):
    baseline, runs = _files(tmp_path, _run({WRN: 8.0}, "a", software=dict(SOFTWARE, driver="590.1")))
    before = baseline.read_bytes()
    assert main(["spread", str(baseline), *runs]) == EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert "driver 580.159.04 in the baseline, 590.1 in the run" in captured.out
    assert "no run counts" in captured.err and baseline.read_bytes() == before


def test_spread_names_a_malformed_baseline_file(tmp_path, capsys):
    baseline, runs = _files(tmp_path, _run({WRN: 8.583}, "a"))
    baseline.write_text('{"schema_version": 2}')
    assert main(["spread", str(baseline), *runs]) == EXIT_BAD_INPUT
    assert f"baseline file {baseline}: field 'schema_version'" in capsys.readouterr().err


def test_spread_command_prints_and_writes_the_device_spread(tmp_path, capsys):
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, _device_baseline())
    runs = []
    for i, run in enumerate((_device_run({WRN: (8.583, 3.121), GPT: (6.2, None)}, "a"),
                             _device_run({WRN: (8.381, 3.087)}, "b"))):
        runs.append(tmp_path / f"run{i}.json")
        runs[-1].write_text(json.dumps(run))
    assert main(["spread", str(baseline), *map(str, runs)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "device sd" in out and "(1 with device time, 0 with a ratio over a versus side)" in out
    [wrn_line] = [line for line in out.splitlines() if line.startswith(WRN)]
    sd = log_sd([WRN_DEVICE, 3.121, 3.087])
    assert f"{sd:.2%}" in wrn_line and "| 3.104 3.121 3.087" in wrn_line
    [gpt_line] = [line for line in out.splitlines() if line.startswith(GPT)]
    assert "|" not in gpt_line
    figures = load_document(baseline)["entries"][WRN]["figures"]
    assert figures["device_between_run_count"] == 3 and figures["device_between_run_sd"] == pytest.approx(sd)


def _learn_adding(*documents: dict, baseline: dict):
    return learn(baseline["entries"], [parse_run(d, f"more{i}.json") for i, d in enumerate(documents)], add=True)


def test_adding_runs_to_a_learned_spread_pools_exactly_as_learning_them_all_at_once():
    runs = [_device_run({WRN: (w, d)}, when) for w, d, when in
            ((8.583, 3.121, "a"), (8.381, 3.087, "b"), (8.5, 3.11, "c"), (8.45, 3.095, "d"))]
    all_at_once = with_spread(_device_baseline(), _learn(*runs, baseline=_device_baseline()))
    first = with_spread(_device_baseline(), _learn(*runs[:2], baseline=_device_baseline()))
    added = _learn_adding(*runs[2:], baseline=first)
    assert added.device_cells[WRN].speedups == (3.11, 3.095) and added.device_cells[WRN].prior.count == 3
    pooled = with_spread(first, added)
    for key in ("speedup", "between_run_sd", "device_speedup", "device_between_run_sd"):
        assert pooled["entries"][WRN]["figures"][key] == pytest.approx(all_at_once["entries"][WRN]["figures"][key])
    for key in ("between_run_count", "device_between_run_count", "device_recorded_speedup", "recorded_speedup"):
        assert pooled["entries"][WRN]["figures"][key] == all_at_once["entries"][WRN]["figures"][key]
    assert pooled["entries"][WRN]["figures"]["device_between_run_runs"] == ["a", "b", "c", "d"]


def test_adding_a_run_the_entry_counted_already_leaves_it_out():
    runs = [_device_run({WRN: (8.583, 3.121)}, "a"), _device_run({WRN: (8.381, 3.087)}, "b")]
    first = with_spread(_device_baseline(), _learn(*runs, baseline=_device_baseline()))
    again = _learn_adding(runs[1], _device_run({WRN: (8.5, 3.11)}, "c"), baseline=first)
    assert again.device_cells[WRN].speedups == (3.11,) and again.device_cells[WRN].count == 4
    assert any("counted in the entry's spread already" in why for _, _, why in again.left_out)


def test_adding_to_an_entry_without_a_spread_learns_it_from_the_recording_and_the_runs():
    learned = _learn_adding(_device_run({WRN: (8.583, 3.121)}, "a"), baseline=_device_baseline())
    assert learned.device_cells[WRN].prior is None and learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.121)


def test_the_spread_command_adds_with_add(tmp_path: Path, capsys):
    baseline = tmp_path / "gpu.json"
    write_atomic(baseline, _device_baseline())
    paths = []
    for i, (w, d, when) in enumerate(((8.583, 3.121, "a"), (8.381, 3.087, "b"), (8.5, 3.11, "c"))):
        paths.append(tmp_path / f"run{i}.json")
        paths[-1].write_text(json.dumps(_device_run({WRN: (w, d)}, when)))
    assert main(["spread", str(baseline), *map(str, paths[:2])]) == EXIT_OK
    assert main(["spread", "--add", str(baseline), str(paths[2])]) == EXIT_OK
    out = capsys.readouterr().out
    assert "(3 earlier) 3.110" in out
    figures = load_document(baseline)["entries"][WRN]["figures"]
    assert figures["device_between_run_count"] == 4
    assert figures["device_between_run_sd"] == pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087, 3.11]))


def _re_recorded(document: dict, device: float, wall: float) -> dict:
    """`document` with WRN re-recorded at new levels, as the speed cell stores a recording on new software
    (``Ratio.recorded``): the recording's figures, and the spread each ratio measured alike keeps."""
    old = SpeedEntry.from_figures(document["entries"][WRN]["figures"])
    kept = {**old.wall.kept_spread().figures(""), **old.device.kept_spread().figures("device_"),
            "device_tolerance": entry_tolerance(DEFAULT_TOLERANCE, old.device.kept_spread(), 0.004)}
    figures = {"speedup": wall, "noise": 0.01, "device_speedup": device, "device_noise": 0.004, "device_method": "graph",
               **MEASURED, **kept}
    entries = dict(document["entries"], **{WRN: dict(document["entries"][WRN], figures=figures)})
    return dict(document, entries=entries)


def test_runs_added_after_a_re_recording_join_its_level_and_the_earlier_levels_noise_stays_pooled():
    earlier = [_device_run({WRN: (w, d)}, when) for w, d, when in ((8.583, 3.121, "a"), (8.381, 3.087, "b"))]
    learned = with_spread(_device_baseline(), _learn(*earlier, baseline=_device_baseline()))
    re_recorded = _re_recorded(learned, device=3.30, wall=8.9)
    # the re-recorded level is its recording alone: uncentred, 3 values at one earlier level behind the sd
    assert _spread(re_recorded["entries"][WRN]["figures"], "device_") == BetweenRuns(
        pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087])), 3, False)
    later = [_device_run({WRN: (8.95, d)}, when) for d, when in ((3.31, "c"), (3.28, "d"))]
    added = _learn_adding(earlier[1], *later, baseline=re_recorded)  # "b" counted at the earlier level already
    cell = added.device_cells[WRN]
    assert cell.speedups == (3.31, 3.28) and (cell.count, cell.levels, cell.level_count) == (6, 2, 3)
    # by hand: each level's squared deviations of ln(value) from its own mean, over 6 values - 2 levels
    old, new = [math.log(v) for v in (WRN_DEVICE, 3.121, 3.087)], [math.log(v) for v in (3.30, 3.31, 3.28)]
    m2 = sum((x - sum(lv) / 3) ** 2 for lv in (old, new) for x in lv)
    assert cell.sd == pytest.approx(math.sqrt(m2 / 4)) and cell.centre == pytest.approx(math.exp(sum(new) / 3))
    figures = with_spread(re_recorded, added)["entries"][WRN]["figures"]
    assert figures["device_recorded_speedup"] == 3.30 and figures["device_between_run_runs"] == ["a", "b", "c", "d"]
    assert (figures["device_between_run_levels"], figures["device_between_run_level_count"]) == (2, 3)
    between = _spread(figures, "device_")
    assert between == BetweenRuns(pytest.approx(math.sqrt(m2 / 4)), 6, True, 2, 3) and between.dof == 4
    # the bound: t with 4 df (4.604) x sqrt(1 + 1/3) around the mean of the 3 values at this level
    assert between.bound(0.99) == pytest.approx(4.604095 * math.sqrt(4 / 3) * math.sqrt(m2 / 4), rel=1e-6)
    # learned afresh from runs of one level, the entry holds one level again
    pooled = dict(re_recorded, entries={WRN: dict(re_recorded["entries"][WRN], figures=figures)})
    afresh = with_spread(pooled, _learn(*later, baseline=pooled))["entries"][WRN]["figures"]
    assert "device_between_run_levels" not in afresh and afresh["device_between_run_count"] == 3


def test_a_spread_of_too_few_degrees_of_freedom_or_an_impossible_level_count_does_not_loosen_a_verdict():
    figures = {"device_between_run_sd": 0.01, "device_recorded_speedup": 3.0}
    assert _spread({**figures, "device_between_run_count": 3, "device_between_run_levels": 2}, "device_") is None
    assert _spread({**figures, "device_between_run_count": 4, "device_between_run_levels": 2}, "device_").dof == 2
    assert _spread({**figures, "device_between_run_count": 4, "device_between_run_levels": 2,
                           "device_between_run_level_count": 4}, "device_") is None
