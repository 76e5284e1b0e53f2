"""Learning each speed cell's between-run spread from saved runs: which runs count, what is stored for
each of its ratios, and what a re-recording keeps of it (`ampbench spread` itself: test_spread_command.py)."""

from __future__ import annotations

import math

import pytest

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import measurement_mismatch
from ampbench.baselines.spread import learn_spread, software_difference, spread_kinds, with_spread
from ampbench.gate.writers import across_runs_of, describe_across
from ampbench.report import parse_run
from ampbench.results.ratios import DEVICE, VERSUS, WALL
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.speed import sides
from ampbench.speed.clocks import CLOCKS, Clock
from ampbench.speed.ratio import Ratio
from ampbench.speed.timing import PairedTimer, RoundsPolicy
from ampbench.stats import SpeedupEstimate, log_sd
from ampbench.tolerance import UNLEARNED_TOLERANCE, BetweenRuns, tolerance_for
from spread_runs import (
    GPT,
    SOFTWARE,
    WRN,
    WRN_DEVICE,
    baseline_doc,
    device_baseline,
    device_run,
    learn_from,
    run_doc,
    spread_of,
    tolerance_of,
)
from tests.references import against_entry


def test_the_recording_and_each_matching_run_are_one_sample_each():
    learned = learn_from(run_doc({WRN: 8.583, GPT: 6.35}, "2026-11-21T19:00:00"),
                         run_doc({WRN: 8.381}, "2026-11-21T20:00:00"))
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.cells[WRN].sd == pytest.approx(log_sd([8.402, 8.583, 8.381]))
    assert learned.cells[GPT].speedups == (6.422, 6.35)


@pytest.mark.parametrize("run, why", [
    (run_doc({WRN: 8.0}, "t", software=dict(SOFTWARE, torch="2.12.0+cu130")),
     "torch 2.11.0+cu130 in the baseline, 2.12.0+cu130 in the run"),
    (run_doc({WRN: 8.0}, "t", cudnn_benchmark=True), "cudnn_benchmark False in the baseline, True here"),
    (run_doc({WRN: 8.0}, "t", recording=True), "recorded the baseline"),
    (run_doc({WRN: None}, "t"), "no speedup"),
    (run_doc({"test_speed[dpn26-fp16]": 2.3}, "t"), "no speed entry"),
])
def test_a_run_cell_that_measured_something_else_is_left_out_with_the_reason(run, why):
    learned = learn_from(run)
    assert learned.cells == {}
    [(name, _, reason)] = learned.left_out
    assert name == "run0.json" and why in reason


def test_the_same_run_given_twice_counts_once():
    run = run_doc({WRN: 8.583}, "2026-11-21T19:00:00.123456+00:00")
    learned = learn_from(run, run)
    assert learned.cells[WRN].speedups == (8.402, 8.583)
    assert learned.left_out == [("run1.json", "*", "the same run as run0.json (same datetime)")]


def test_each_run_is_one_sample_also_where_several_ran_on_one_card():
    def card(uuid):
        return dict(SOFTWARE, uuid=uuid)

    learned = learn_from(run_doc({WRN: 8.5}, "a", software=card("88b4")),
                         run_doc({WRN: 8.7}, "b", software=card("88b4")),
                     run_doc({WRN: 8.3}, "c", software=card("1f0e")))
    assert learned.cells[WRN].speedups == (8.402, 8.5, 8.7, 8.3)


def test_a_cell_with_an_injected_slowdown_is_no_sample():
    learned = learn_from(run_doc({WRN: 8.0}, "a", injected_slowdown=0.01), run_doc({WRN: 8.5}, "b"))
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
    assert text == ("other software: triton 3.6.0 in the baseline, 3.7.0 in the run; torchao 0.17.0 in the baseline, "
                    "0.18.0 in the run")
    assert "torchao 0.17.0 in the baseline, None in the run" in software_difference(recorded,
                                                                                    dict(SOFTWARE, triton="3.6.0"))


def test_with_spread_adds_the_figures_and_keeps_everything_else():
    document = baseline_doc()
    learned = learn_from(run_doc({WRN: 8.583}, "a"), run_doc({WRN: 8.381}, "b"))
    new = with_spread(document, learned)
    figures = new["entries"][WRN]["figures"]
    assert figures["between_run_sd"] == pytest.approx(learned.cells[WRN].sd) and figures["between_run_count"] == 3
    # centred on the mean of the recording and the runs; the recording's own value kept beside it
    assert (figures["speedup"] == pytest.approx((8.402 * 8.583 * 8.381) ** (1 / 3))
            and figures["recorded_speedup"] == 8.402)
    assert new["entries"][WRN]["recorded"] == document["entries"][WRN]["recorded"]
    assert (new["entries"][GPT] == document["entries"][GPT]
            and "between_run_sd" not in document["entries"][WRN]["figures"])


def test_the_suite_reports_an_interval_across_runs_only_where_the_baseline_has_a_spread():
    est = SpeedupEstimate(8.5, 8.45, 8.55, 20, 0.99)
    assert across_runs_of(est, None) is None
    assert across_runs_of(est, SpeedEntry.from_figures({"speedup": 8.4}).ratio(WALL).between_run_sd) is None
    unlearned = SpeedEntry.from_figures({"speedup": 8.4, "between_run_sd": None}).ratio(WALL).between_run_sd
    assert across_runs_of(est, unlearned) is None
    baseline = SpeedEntry.from_figures({"speedup": 8.4, "between_run_sd": 0.012, "between_run_count": 5}).ratio(WALL)
    across = across_runs_of(est, baseline.between_run_sd)
    assert across.low < est.low and across.high > est.high and across.between_run_sd == 0.012
    assert describe_across(across, baseline.between_run_count).endswith("(between-run sd 1.2% from 5 runs)")


# ---------------------------------------------------------------------------------------------------
# the device-time speedup's spread, learned in the same pass

def test_the_table_names_every_figure_and_where_each_is_stored():
    assert [k.history for k in spread_kinds()] == ["speedup", "device_speedup", "versus_speedup"]
    entry = SpeedEntry.from_figures({"speedup": 2.0, "between_run_sd": 0.01, "between_run_count": 3,
                                     "device_between_run_sd": 0.02, "device_between_run_count": 4,
                                     "device_method": "graph", "versus_between_run_sd": 0.03, "versus": "amp_bf16"})
    assert (entry.ratio(WALL).between_run_sd, entry.ratio(WALL).between_run_count) == (0.01, 3)
    assert (entry.ratio(DEVICE).between_run_sd, entry.ratio(DEVICE).between_run_count) == (0.02, 4)
    assert (DEVICE.entry_key("method"),
            entry.ratio(DEVICE).method, WALL.same_method) == ("device_method", "graph", False)
    assert (entry.ratio(VERSUS).between_run_sd, VERSUS.entry_key("method"), VERSUS.over, VERSUS.prefix) == (
        0.03, "versus_method", True, "versus_")


def test_a_compiled_cells_ratio_over_its_versus_side_learns_its_spread_and_tolerance():
    document = device_baseline()
    document["entries"][WRN]["figures"].update(versus="amp_bf16", versus_speedup=1.15, versus_method="graph",
                                               versus_noise=0.001)
    runs = [device_run({WRN: (8.5, 3.1)}, f"2026-11-2{i}T10:00:00", versus="amp_bf16", versus_speedup=v,
                        versus_method="graph") for i, v in enumerate((1.16, 1.14, 1.17))]
    # a run of the ratio over another side is another ratio
    runs.append(device_run({WRN: (8.5, 3.1)}, "2026-11-25T10:00:00", versus="amp_fp16", versus_speedup=1.3,
                            versus_method="graph"))
    learned = learn_spread(document["entries"], [parse_run(d, f"run{i}.json") for i, d in enumerate(runs)])
    assert learned.versus_cells[WRN].speedups == (1.15, 1.16, 1.14, 1.17)
    assert any("over amp_fp16 in the run and over amp_bf16 in the baseline" in why for _, _, why in learned.left_out)
    figures = with_spread(document, learned)["entries"][WRN]["figures"]
    assert figures["versus_recorded_speedup"] == 1.15 and figures["versus_between_run_count"] == 4
    assert figures["versus_tolerance"] == tolerance_of(DEFAULT_TOLERANCE, figures, "versus_")
    assert figures["versus_tolerance"] == tolerance_for(DEFAULT_TOLERANCE, 0.001, spread_of(figures, "versus_"),
                                                        unlearned=UNLEARNED_TOLERANCE)
    # four values 1-2% apart: the bound is wider than the floor, and held to the unlearned tolerance
    assert figures["versus_tolerance"] == UNLEARNED_TOLERANCE


def test_the_device_speedup_is_learned_in_the_same_pass_as_the_wall_speedup():
    learned = learn_from(device_run({WRN: (8.583, 3.121), GPT: (6.35, 2.2)}, "a"),
                         device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=device_baseline())
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.121, 3.087)
    assert learned.device_cells[WRN].sd == pytest.approx(log_sd([WRN_DEVICE, 3.121, 3.087]))
    # GPT's entry has no device-time speedup: its wall spread is learned, its device spread is not
    assert GPT in learned.cells and GPT not in learned.device_cells


def test_learning_again_starts_from_the_recording_not_from_the_mean():
    document = baseline_doc()
    once = with_spread(document, learn_from(run_doc({WRN: 8.583}, "a"), run_doc({WRN: 8.381}, "b")))
    again = learn_from(run_doc({WRN: 8.583}, "a"), run_doc({WRN: 8.381}, "b"), run_doc({WRN: 8.5}, "c"), baseline=once)
    assert again.cells[WRN].speedups == (8.402, 8.583, 8.381, 8.5)


def test_a_run_cell_without_a_device_speedup_adds_nothing_to_the_device_spread_and_is_not_left_out():
    learned = learn_from(device_run({WRN: (8.583, None)}, "a"), device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=device_baseline())
    assert learned.left_out == []
    assert learned.cells[WRN].speedups == (8.402, 8.583, 8.381)
    assert learned.device_cells[WRN].speedups == (WRN_DEVICE, 3.087)


def test_an_entry_without_a_device_speedup_learns_no_device_spread():
    learned = learn_from(device_run({WRN: (8.583, 3.121)}, "a"))  # the plain baseline: no device figures
    assert learned.left_out == [] and learned.device_cells == {} and learned.cells[WRN].speedups == (8.402, 8.583)


def test_a_run_whose_device_time_was_measured_another_way_is_left_out_of_the_device_spread_only():
    learned = learn_from(device_run({WRN: (8.583, 2.9)}, "a", method="kernels"), baseline=device_baseline("graph"))
    assert learned.cells[WRN].speedups == (8.402, 8.583)  # the wall figure still counts
    assert learned.device_cells == {}
    [(name, test_id, why)] = learned.left_out
    assert (name, test_id) == ("run0.json", WRN)
    assert "device-time speedup measured by kernels in the run and by graph in the baseline" in why


def test_a_run_cell_left_out_as_a_whole_gives_neither_figure_and_one_reason():
    learned = learn_from(device_run({WRN: (7.0, 2.5)}, "a", injected_slowdown=0.01), baseline=device_baseline())
    assert learned.cells == {} and learned.device_cells == {}
    [(_, _, why)] = learned.left_out
    assert "injected" in why


def test_a_failed_cell_of_an_unchanged_run_counts_since_it_was_a_false_alarm():
    learned = learn_from(run_doc({WRN: 8.0}, "a", verdict="regression"))
    assert learned.left_out == [] and learned.cells[WRN].speedups == (8.402, 8.0)


def test_with_spread_stores_the_device_figures_beside_the_wall_ones():
    document = device_baseline()
    learned = learn_from(device_run({WRN: (8.583, 3.121), GPT: (6.2, None)}, "a"),
                         device_run({WRN: (8.381, 3.087)}, "b"),
                     baseline=document)
    new = with_spread(document, learned)
    wrn, gpt = new["entries"][WRN]["figures"], new["entries"][GPT]["figures"]
    assert wrn["device_between_run_sd"] == pytest.approx(learned.device_cells[WRN].sd)
    assert wrn["device_between_run_count"] == 3 and wrn["between_run_count"] == 3
    assert wrn["device_recorded_speedup"] == WRN_DEVICE and wrn["device_method"] == "graph"
    assert wrn["device_speedup"] == pytest.approx((WRN_DEVICE * 3.121 * 3.087) ** (1 / 3))
    assert "device_between_run_sd" not in gpt and gpt["between_run_count"] == 2
    # what the suite reads back: three values are enough to loosen a verdict
    assert spread_of(wrn, "device_") == BetweenRuns(pytest.approx(learned.device_cells[WRN].sd), 3, True)
    assert "device_between_run_sd" not in document["entries"][WRN]["figures"]


def test_with_spread_stores_the_device_tolerance_the_verdict_will_now_use():
    document = device_baseline()
    learned = learn_from(device_run({WRN: (8.583, 3.121)}, "a"),
                         device_run({WRN: (8.381, 3.087)}, "b"), baseline=document)
    wrn = with_spread(document, learned)["entries"][WRN]["figures"]
    expected = tolerance_for(DEFAULT_TOLERANCE, wrn.get("device_noise"),
                             BetweenRuns(learned.device_cells[WRN].sd, 3, True), unlearned=UNLEARNED_TOLERANCE)
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

    monkeypatch.setitem(CLOCKS, "device", lambda over, side: Clock(timer, method))
    monkeypatch.setitem(CLOCKS, "wall", lambda over, side: Clock(timer))
    entry = SpeedEntry.of(previous)
    alike = entry is not None and measurement_mismatch(entry, measured_with) is None
    stored = {}
    for kind in (DEVICE, WALL):
        ratio = against_entry(Ratio.between(kind, object(), object()), "resnet50", "amp_fp16", entry, DEFAULT_TOLERANCE)
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


