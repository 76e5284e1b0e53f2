"""A distributed cell's device time: the least busy rank's per round, the speedup estimated from it as
the single-GPU cells' are, which figure gates the cell, and the baseline entry and record that carry it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampbench.baselines.entries import DistributedEntry
from ampbench.baselines.schema import BaselineError, validate_entry
from ampbench.distributed import judging
from ampbench.distributed.figures import GRAPH_FALLBACK, NO_DEVICE, merge_ranks, per_round_max, per_round_min
from ampbench.report.compare import _speed_change
from ampbench.results import FP32_SIDE, MODE_SIDE, DistributedRecord
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, DIST_WALL, DISTRIBUTED_RATIOS, SCALING
from ampbench.stats import estimate_speedup
from ampbench.verdict import Verdict, combined
from tests import records
from tests.references import file_reference


def device_recorded(figs, floor=0.005, previous=None, measured_with=None) -> dict:
    """What a recording stores of the figures in device time (``judging.recorded_ratios``' rows of them)."""
    rows = judging.recorded_ratios(figs, floor, previous, measured_with)
    return {key: value for name, row in rows.items() if DISTRIBUTED_RATIOS[name].same_method
            for key, value in row.items()}


def checks_of(entry, figs, floor=0.005):
    """The cell's checks against `entry`, the baseline file its source (``BaselineSource.reference``)."""
    return judging.cell_checks(entry, figs, "gpt", "amp_bf16 fp32 x2", lambda kind: file_reference(kind, floor, entry))


N = 8


def _doc(rank: int, ref, mode, dev_ref=None, dev_mode=None, idle=None) -> dict:
    doc = {"rank": rank, "world_size": 2, "batch_size": 8, "ref_times": ref, "mode_times": mode, "single_times": None,
           "idle_share": idle}
    if dev_ref is not None:
        doc.update(device_method="kernels", device_fallback=GRAPH_FALLBACK, device_ref_times=dev_ref,
                   device_mode_times=dev_mode)
    return doc


def _docs(dev_mode_1=None, idle=None) -> list[dict]:
    """Two ranks: rank 0's GPU spins in its collectives (busier), rank 1's does not; wall 2.0 / 1.0."""
    dev_mode_1 = dev_mode_1 or [0.50] * N
    return [_doc(0, [2.0] * N, [1.0] * N, [1.8] * N, [0.7] * N, idle),
            _doc(1, [2.0] * N, [1.0] * N, [1.5 + 0.01 * i for i in range(N)], dev_mode_1, idle)]


def test_a_round_s_device_time_is_the_least_busy_rank_s():
    docs = [{"t": [3.0, 1.0, 2.0]}, {"t": [2.0, 4.0, 2.5]}]
    assert per_round_min(docs, "t") == [2.0, 1.0, 2.0]
    assert per_round_max(docs, "t") == [3.0, 4.0, 2.5]  # the wall clock's: the slowest rank's
    with pytest.raises(ValueError, match="different numbers of rounds"):
        per_round_min([{"t": [1.0]}, {"t": [1.0, 2.0]}], "t")


def test_merge_estimates_the_device_speedup_from_the_rounds_minima():
    docs = _docs(dev_mode_1=[0.5] * (N - 1) + [0.9])
    figs = merge_ranks(docs, 0.99)
    ref = [1.5 + 0.01 * i for i in range(N)]
    mode = [0.5] * (N - 1) + [0.7]  # the last round: rank 0 was the less busy one
    assert figs.device == estimate_speedup(ref, mode, 0.99)
    assert figs.device_method == "kernels" and figs.device_fallback == GRAPH_FALLBACK
    assert figs.device_step_s == pytest.approx(0.5) and figs.device_step_s_ref == pytest.approx(1.535)
    assert figs.speedup == estimate_speedup([2.0] * N, [1.0] * N, 0.99)  # the wall clock's, unchanged


def test_merge_without_device_time_leaves_the_device_figures_out():
    gloo = [_doc(0, [2.0] * N, [1.0] * N), _doc(1, [2.0] * N, [1.0] * N)]
    figs = merge_ranks(gloo, 0.99)
    assert figs.device is None and figs.device_method == "wall" and figs.device_fallback == NO_DEVICE
    assert figs.device_step_s is None
    mixed = _docs()
    mixed[1]["device_method"] = "wall"
    with pytest.raises(ValueError, match="measured device time differently"):
        merge_ranks(mixed, 0.99)


def _entry(device: float | None, wall: float = 2.0) -> DistributedEntry:
    figures = {"speedup": wall, "ci_low": wall * 0.99, "ci_high": wall * 1.01, "rounds": 12, "noise": 0.005,
               "scaling_efficiency": 0.9, "scaling_noise": 0.01, "world_size": 2}
    if device is not None:
        figures.update(device_speedup=device, device_ci_low=device * 0.99, device_ci_high=device * 1.01,
                       device_rounds=12, device_noise=0.002, device_tolerance=0.02, device_method="kernels",
                       device_fallback=GRAPH_FALLBACK)
    return DistributedEntry.from_figures(figures)


def _verdict(entry, figs, gate: str = "device") -> tuple[Verdict, tuple[str, ...], dict]:
    checks = checks_of(entry, figs)
    gates = judging.gates_of(gate, checks, figs)
    verdicts = judging.verdicts_of(figs, checks)
    return combined(judging.gated_verdicts(verdicts, gates)), gates, verdicts


def test_device_time_gates_the_cell_and_the_wall_clock_is_reported_beside_it():
    figs = merge_ranks(_docs(), 0.99)  # device ~3.0x, wall 2.0x
    verdict, gates, verdicts = _verdict(_entry(device=4.0, wall=2.0), figs)
    assert gates == ("device",) and verdicts[judging.DEVICE_SPEEDUP] is Verdict.REGRESSION
    assert verdicts[judging.SPEEDUP] is Verdict.PASS and verdict is Verdict.REGRESSION
    # a wall-clock drop does not fail a cell that device time holds
    verdict, _, verdicts = _verdict(_entry(device=3.0, wall=3.0), figs)
    assert verdicts[judging.SPEEDUP] is Verdict.REGRESSION and verdict is not Verdict.REGRESSION
    assert _verdict(_entry(device=3.0, wall=3.0), figs, gate="wall")[0] is Verdict.REGRESSION
    assert _verdict(_entry(device=4.0, wall=2.0), figs, gate="both")[1] == ("device", "wall")


def _graphed(docs: list[dict]) -> list[dict]:
    return [{**d, "device_method": "graph", "device_fallback": None} for d in docs]


def _graph_entry(device: float, wall: float) -> DistributedEntry:
    return DistributedEntry.from_figures({**_entry(device, wall).to_figures(), "device_method": "graph",
                                          "device_fallback": None})


def test_host_bound_softens_the_wall_clock_but_not_graph_replays():
    figs = merge_ranks(_graphed(_docs(idle=0.3)), 0.99)
    assert figs.host_bound and figs.device_method == "graph"
    _, _, verdicts = _verdict(_graph_entry(device=4.0, wall=3.0), figs, gate="both")
    assert verdicts[judging.DEVICE_SPEEDUP] is Verdict.REGRESSION and verdicts[judging.SPEEDUP] is Verdict.INCONCLUSIVE


def test_host_bound_softens_device_time_from_the_profiler_too():
    """The profiler's busy time carries a rank's NCCL spinning while a peer's host lags: in a host-bound
    step a drop there is the hosts' as much as a wall-clock one, and the message says which figures."""
    figs = merge_ranks(_docs(idle=0.3), 0.99)
    assert figs.host_bound and figs.device_method == "kernels"
    verdict, gates, verdicts = _verdict(_entry(device=4.0, wall=3.0), figs, gate="both")
    assert verdicts[judging.DEVICE_SPEEDUP] is Verdict.INCONCLUSIVE and verdict is Verdict.INCONCLUSIVE
    checks = checks_of(_entry(device=4.0, wall=3.0), figs)
    message = judging.cell_message("gpt amp_bf16 fp32 (x2)", figs, checks, verdicts, None, gpu=True)
    assert "wall-clock or profiled device-time drop is the host's and is not failed" in message
    # not host-bound: the profiler's drop fails as before
    quiet = merge_ranks(_docs(), 0.99)
    assert _verdict(_entry(device=4.0, wall=2.0), quiet)[1] == ("device",)
    assert _verdict(_entry(device=4.0, wall=2.0), quiet)[0] is Verdict.REGRESSION


def test_a_figure_whose_tolerance_leaves_no_line_is_inconclusive_and_says_why():
    """resnet50 amp_fp16 under FSDP2 on four H200s learned an 18% sd from the profiler's busy time: a
    bound of 192%, a line of -3.4x, which every run would pass. A learned tolerance is never looser than
    the unlearned one, so that spread alone is held to 3%; a recording whose own interval was +-60% wide
    is unlearned at 120%, and that leaves no line."""
    figs = merge_ranks(_docs(), 0.99)
    spread = {"device_between_run_sd": 0.2, "device_between_run_count": 5}  # 18% sd as learned there
    spread_only = DistributedEntry.from_figures({**_entry(device=3.0).to_figures(), **spread})
    assert checks_of(spread_only, figs).device.tolerance == pytest.approx(0.03)
    wide = DistributedEntry.from_figures({**_entry(device=3.0).to_figures(), **spread, "device_noise": 0.6})
    verdict, _, verdicts = _verdict(wide, figs)
    assert verdicts[judging.DEVICE_SPEEDUP] is Verdict.INCONCLUSIVE and verdict is Verdict.INCONCLUSIVE
    checks = checks_of(wide, figs)
    message = judging.cell_message("gpt amp_bf16 fp32 (x2)", figs, checks, verdicts, None, gpu=True)
    assert checks.device.tolerance > 1.0
    assert (f"no line: its runs vary by more than the figure (tolerance {checks.device.tolerance:.0%}) (inconclusive)"
            in message)
    # its record stores no line, so that no report quotes one below zero
    ratios = judging.ratio_figures(figs, checks, verdicts, _docs())
    assert ratios["device"].line is None and ratios["device"].tolerance == checks.device.tolerance


def test_an_entry_without_device_time_is_held_by_the_wall_clock():
    figs = merge_ranks(_docs(), 0.99)
    verdict, gates, verdicts = _verdict(_entry(device=None, wall=3.0), figs)
    assert (gates == ("wall",) and verdict is Verdict.REGRESSION
            and verdicts[judging.DEVICE_SPEEDUP] is Verdict.NO_BASELINE)
    checks = checks_of(_entry(device=None), figs)
    assert "no device-time baseline" in checks.device_why
    # gloo ranks measure no device time: the wall clock holds the cell whatever the entry
    gloo = merge_ranks([_doc(0, [2.0] * N, [1.0] * N), _doc(1, [2.0] * N, [1.0] * N)], 0.99)
    verdict, gates, verdicts = _verdict(_entry(device=4.0, wall=3.0), gloo)
    assert gates == ("wall",) and judging.DEVICE_SPEEDUP not in verdicts and verdict is Verdict.REGRESSION
    assert _verdict(None, gloo)[1] == ("wall",)


def test_a_baseline_measured_by_another_method_does_not_check_device_time():
    figs = merge_ranks(_docs(), 0.99)
    entry = DistributedEntry.from_figures({**_entry(device=3.0).to_figures(), "device_method": "graph"})
    checks = checks_of(entry, figs)
    assert checks.device is None and "measured by graph in the baseline and by kernels here" in checks.device_why
    assert judging.gates_of("device", checks, figs) == ("wall",)


def test_a_regression_the_confirming_launch_does_not_repeat_is_inconclusive():
    figs = merge_ranks(_docs(), 0.99)
    checks = checks_of(_entry(device=4.0), figs)
    verdicts = judging.verdicts_of(figs, checks)
    faster = merge_ranks(_docs(dev_mode_1=[0.37] * N), 0.99)  # ~4.1x
    assert judging.confirmed_by_launch(verdicts, checks, faster)[judging.DEVICE_SPEEDUP] is Verdict.INCONCLUSIVE
    assert judging.confirmed_by_launch(verdicts, checks, figs)[judging.DEVICE_SPEEDUP] is Verdict.REGRESSION


def test_the_recorded_device_figures_round_trip_through_the_entry_and_its_schema(tmp_path: Path):
    figs = merge_ranks(_docs(), 0.99)
    stored = {"speedup": 2.0, "ci_low": 1.9, "ci_high": 2.1, "rounds": 8, "noise": 0.01,
              **device_recorded(figs, 0.005)}
    assert stored["device_method"] == "kernels" and stored["device_fallback"] == GRAPH_FALLBACK
    assert stored["device_speedup"] == figs.device.speedup and stored["device_tolerance"] >= 0.005
    entry = DistributedEntry.from_figures(json.loads(json.dumps(stored)))
    assert entry.to_figures() == stored and list(entry.to_figures()) == list(stored)
    assert entry.ratio(DIST_DEVICE).speedup == figs.device.speedup and entry.ratio(DIST_DEVICE).method == "kernels"
    assert entry.ratio(DIST_WALL).speedup == 2.0 and "device_speedup" not in entry.detail
    validate_entry("test_ddp_speed[gpt-amp_bf16-fp32]", {"figures": stored}, tmp_path / "b.json")
    with pytest.raises(BaselineError, match="device_speedup"):
        validate_entry("test_fsdp2_speed[gpt-amp_bf16-fsdp2_fp32]", {"figures": {**stored, "device_speedup": -1.0}},
                       tmp_path / "b.json")
    gloo = merge_ranks([_doc(0, [2.0] * N, [1.0] * N), _doc(1, [2.0] * N, [1.0] * N)], 0.99)
    assert device_recorded(gloo, 0.005) == {}


def test_the_record_carries_device_time_and_compare_reads_it():
    docs = _docs()
    docs[0]["single_times"] = [0.9] * N  # rank 0's 1-GPU side: the scaling efficiency
    figs = merge_ranks(docs, 0.99)
    checks = checks_of(_entry(device=3.0), figs)
    verdicts = judging.verdicts_of(figs, checks)
    ratios = judging.ratio_figures(figs, checks, verdicts, docs)
    assert list(ratios) == ["device", "wall", "scaling"]  # no device scaling efficiency without graphs
    assert ratios["device"].side(MODE_SIDE).round_ms == pytest.approx([500.0] * N)  # rank 1's, the less busy
    assert ratios["device"].side(FP32_SIDE).round_ms == pytest.approx([1500.0 + 10 * i for i in range(N)])
    assert ratios["wall"].side(MODE_SIDE).round_ms == pytest.approx([1000.0] * N)
    assert ratios["wall"].line == checks.speedup.line
    assert ratios["scaling"].verdict is None  # the cell's is its verdict
    record = DistributedRecord(model="gpt", mode="amp_bf16", comm="fp32", verdict=Verdict.PASS, ratios=ratios)
    assert record.estimate(DIST_DEVICE).speedup == pytest.approx(figs.device.speedup)
    assert (record.verdict_of(DIST_DEVICE) is verdicts[judging.DEVICE_SPEEDUP]
            and record.ratio(DIST_DEVICE).tolerance > 0)
    assert record.verdict_of(SCALING) is Verdict.PASS and record.estimate(DEVICE_SCALING) is None
    old = records.distributed(model="gpt", mode="amp_bf16", comm="fp32", speedup=2.0, speedup_low=1.9,
                              speedup_high=2.1, rounds=N, confidence=0.99)
    assert old.estimate(DIST_DEVICE) is None and old.verdict_of(DIST_DEVICE) is None
    assert _speed_change(record, record, 0.005).figure == "device speedup"
    assert _speed_change(old, record, 0.005).figure == "speedup"  # an old run has no device time


def test_the_message_leads_with_device_time_where_measured():
    figs = merge_ranks(_docs(), 0.99)
    checks = checks_of(_entry(device=4.0), figs)
    verdicts = judging.verdicts_of(figs, checks)
    text = judging.cell_message("gpt amp_bf16 fp32 (x2)", figs, checks, verdicts, None, gpu=True)
    assert text.startswith("gpt amp_bf16 fp32 (x2): device-time speedup over fp32 under the same parallelism (kernels)")
    assert "against baseline 4.000x" in text and "(regression)" in text and "wall clock 2.000x" in text


def test_a_re_recording_measured_alike_keeps_the_learned_spread_and_opens_a_level():
    from ampbench.baselines.entries import entry_tolerance
    from ampbench.tolerance import UNLEARNED_TOLERANCE

    figs = merge_ranks(_docs(), 0.99)
    learned = {"speedup": 2.0, "world_size": 2, "block_seconds": 0.1, "device_speedup": 4.2, "device_method": "kernels",
               "device_recorded_speedup": 4.25, "device_between_run_sd": 0.003, "device_between_run_count": 8}
    previous = DistributedEntry.from_figures(learned)
    alike = {"block_seconds": 0.1}
    kept = device_recorded(figs, 0.005, previous, alike)
    assert kept["device_between_run_sd"] == 0.003 and kept["device_between_run_count"] == 8
    assert kept["device_speedup"] == figs.device.speedup
    assert kept["device_tolerance"] < UNLEARNED_TOLERANCE
    assert kept["device_tolerance"] == entry_tolerance(DIST_DEVICE, 0.005,
                                                       DistributedEntry.from_figures(kept).ratio(DIST_DEVICE))
    # another method, another GPU count or other settings: nothing of the old spread is the new figure's
    for other, settings in ((dict(learned, device_method="held"), alike), (dict(learned, world_size=4), alike),
                            (learned, {"block_seconds": 0.2})):
        fresh = device_recorded(figs, 0.005, DistributedEntry.from_figures(other), settings)
        assert "device_between_run_sd" not in fresh and fresh["device_tolerance"] >= UNLEARNED_TOLERANCE


def _graph_docs(single_device) -> list[dict]:
    """Two ranks replaying graphs (device mode step 0.5 on the less busy rank), rank 0's 1-GPU side as given."""
    docs = _docs()
    for d in docs:
        d.update(device_method="graph", device_fallback=None)
    docs[0]["single_device_times"] = single_device
    return docs


def test_the_scaling_efficiency_in_device_time_is_the_1_gpu_replays_over_the_n_gpu_ones():
    figs = merge_ranks(_graph_docs([0.45] * N), 0.99)
    assert figs.device_efficiency == estimate_speedup([0.45] * N,
                                                      per_round_min(_graph_docs(None), "device_mode_times"), 0.99)
    assert figs.device_efficiency.speedup == pytest.approx(0.9)
    # none without rank 0's replays, or where the N-GPU side fell back to the profiler (two clocks)
    assert merge_ranks(_graph_docs(None), 0.99).device_efficiency is None
    assert merge_ranks(_docs(), 0.99).device_efficiency is None


def test_the_device_scaling_efficiency_gates_beside_the_device_speedup_and_round_trips(tmp_path):
    figs = merge_ranks(_graph_docs([0.45] * N), 0.99)  # device speedup ~3.0x, device efficiency 90%
    entry_figures = {"speedup": 2.0, "rounds": 12, "noise": 0.005, "world_size": 2, "device_speedup": 3.0,
                     "device_noise": 0.002, "device_tolerance": 0.02, "device_method": "graph"}
    learned_scaling = {"device_scaling_speedup": 0.95, "device_scaling_noise": 0.002, "device_scaling_method": "graph"}
    verdict, gates, verdicts = _verdict(DistributedEntry.from_figures({**entry_figures, **learned_scaling}), figs)
    assert gates == ("device",) and verdicts[judging.DEVICE_SPEEDUP] is Verdict.PASS
    assert verdicts[judging.DEVICE_EFFICIENCY] is Verdict.REGRESSION and verdict is Verdict.REGRESSION
    learned_scaling["device_scaling_speedup"] = 0.9
    assert _verdict(DistributedEntry.from_figures({**entry_figures, **learned_scaling}), figs)[0] is Verdict.PASS
    # recorded as it is held: its figures under device_scaling_, valid in a baseline file
    recorded = device_recorded(figs, 0.005)
    assert recorded["device_scaling_speedup"] == pytest.approx(0.9) and recorded["device_scaling_method"] == "graph"
    entry = DistributedEntry.from_figures({**entry_figures, **recorded})
    assert entry.ratio(DEVICE_SCALING).speedup == pytest.approx(0.9)
    assert entry.ratio(DIST_DEVICE).speedup == recorded["device_speedup"]
    validate_entry("test_ddp_speed[gpt-amp_bf16-fp32]", {"figures": {**entry_figures, **recorded}}, tmp_path / "b.json")
    with pytest.raises(BaselineError, match="device_scaling_speedup"):
        validate_entry("test_ddp_speed[gpt-amp_bf16-fp32]",
                       {"figures": {**entry_figures, "device_scaling_speedup": -1.0}},
                       tmp_path / "b.json")
