"""One `Reference` per judged figure: the baseline file, the run history and `ampbench compare` each give
what a figure is judged against, its tolerance computed once (``tolerance.tolerance_rule``) with what set it,
and the distributed cells read it and the history's group rule as the single-GPU cells do."""

from __future__ import annotations

import pytest

from ampbench.baselines.entries import DistributedEntry, SpeedEntry, entry_reference, entry_tolerance
from ampbench.baselines.file import BaselineFile
from ampbench.distributed import judging
from ampbench.distributed.figures import DistFigures
from ampbench.history.baseline_source import HistoryBaselines
from ampbench.history.store import open_history
from ampbench.results import Verdict
from ampbench.results.ratios import DEVICE, DIST_DEVICE, WALL
from ampbench.stats import SpeedupEstimate
from ampbench.tolerance import (
    BY_FLOOR,
    BY_NOISE,
    BY_SPREAD,
    BY_UNLEARNED,
    UNLEARNED_TOLERANCE,
    BetweenRuns,
    Reference,
    tolerance_for,
    tolerance_rule,
)
from history_runs import H100, speed_record, speed_run

CELL = "test_speed[resnet50-amp_bf16]"
VALUES = (2.400, 2.405, 2.396, 2.402, 2.399, 2.404)


@pytest.mark.parametrize("floor, noise, spread, unlearned, rule", [
    (0.005, None, None, 0.03, BY_UNLEARNED),
    (0.05, None, None, 0.03, BY_FLOOR),
    (0.005, 0.02, None, 0.03, BY_NOISE),
    (0.005, 0.02, BetweenRuns(0.002, 6, True), 0.03, BY_SPREAD),
    (0.5, 0.02, BetweenRuns(0.002, 6, True), 0.03, BY_FLOOR),
])
def test_the_tolerance_says_what_set_it(floor, noise, spread, unlearned, rule):
    tolerance, by = tolerance_rule(floor, noise, spread, unlearned=unlearned)
    assert by == rule and tolerance == tolerance_for(floor, noise, spread, unlearned=unlearned)
    ref = Reference.of(2.0, floor, noise, spread, source="file", unlearned=unlearned)
    assert (ref.tolerance, ref.rule) == (tolerance, rule)
    assert ref.line == pytest.approx(2.0 * (1 - tolerance))
    assert ref.dof == (spread.dof if spread is not None else None)


def test_a_check_is_built_from_its_reference_alone():
    ref = Reference.of(3.0, 0.01, None, None, source="file", unlearned=0.03,
                       group_failure=lambda value, tolerance: "with two runs held back" if value < 2.95 else None)
    check = ref.check("gpt", "amp_fp16")
    assert (check.expected, check.tolerance, check.line) == (3.0, ref.tolerance, ref.line)
    assert check.group_failure(2.9, check.tolerance) == "with two runs held back"


def _entry(speedup=2.4, noise=0.004):
    return {"device_speedup": speedup, "device_ci_low": speedup * (1 - noise),
            "device_ci_high": speedup * (1 + noise), "device_rounds": 12, "device_method": "graph",
            "speedup": 1.5, "ci_low": 1.45, "ci_high": 1.55, "rounds": 12}


def test_the_file_gives_its_entry_as_a_reference(tmp_path):
    store = BaselineFile(path=tmp_path / "nvidia-h100.json", gpu=H100, entries={CELL: {"figures": _entry()}},
                          exists=True)
    entry = store.entry(CELL)
    assert entry == SpeedEntry.of(store.figures(CELL))  # read by its cell's type
    ref = store.reference(CELL, DEVICE, 0.005)
    assert ref == entry_reference(DEVICE, 0.005, entry.ratio(DEVICE), str(store.path))
    assert (ref.level, ref.method, ref.source) == (2.4, "graph", str(store.path))
    assert ref.tolerance == entry_tolerance(DEVICE, 0.005, entry.ratio(DEVICE)) == UNLEARNED_TOLERANCE
    assert store.reference("test_speed[gpt-amp_bf16]", DEVICE, 0.005) is None  # no entry, nothing to judge against


def _history(tmp_path, values):
    history = open_history(f"sqlite:///{tmp_path / 'history.sqlite'}")
    for i, v in enumerate(values):
        history.append(speed_run(f"run{i}", [speed_record("resnet50", "amp_bf16", v, device_method="graph")], at=i))
    store = BaselineFile(path=tmp_path / "nvidia-h100.json", gpu=H100, entries={}, exists=False)
    return HistoryBaselines(store, history)


def test_the_history_computes_a_learned_tolerance_once_and_its_file_agrees(tmp_path):
    learned = _history(tmp_path, VALUES)
    entry = learned.entry(CELL)
    assert entry == SpeedEntry.of(learned.figures(CELL))  # the file's, with what the history learned over it
    ref = learned.reference(CELL, DEVICE, 0.005)
    cell = learned.learned()[CELL][DEVICE.name]
    assert ref.rule == BY_SPREAD and ref.tolerance == cell.tolerance and ref.level == cell.level
    assert ref.source.endswith("over " + str(learned.path)) and ref.method == "graph"
    # the overlay the export writes gives the same tolerance by the file's rule
    assert entry_tolerance(DEVICE, 0.005, entry.ratio(DEVICE)) == pytest.approx(ref.tolerance, rel=1e-12)
    # the history's rule for runs it held back comes with it
    assert ref.group_failure is not None and ref.check("resnet50", "amp_bf16").group_failure is not None


def test_a_cell_the_history_has_not_learned_is_judged_by_its_entry_with_the_group_rule(tmp_path):
    one = _history(tmp_path, VALUES[:1])
    ref = one.reference(CELL, DEVICE, 0.005)
    assert ref.rule == BY_UNLEARNED and ref.tolerance == UNLEARNED_TOLERANCE
    assert one.reference("test_speed[gpt-amp_bf16]", DEVICE, 0.005) is None


def _dist(device: float) -> DistFigures:
    est = SpeedupEstimate(device, device * 0.999, device * 1.001, 8, 0.99)
    wall = SpeedupEstimate(1.5, 1.49, 1.51, 8, 0.99)
    return DistFigures(speedup=wall, efficiency=None, throughput_per_gpu=100.0, throughput_per_gpu_ref=50.0,
                       comm_share=None, comm_overlap=None, world_size=2, idle_share=0.0, device=est,
                       device_method="graph")


def test_a_distributed_cell_reads_its_references_and_the_group_rule():
    refs = {DIST_DEVICE: Reference.of(3.0, 0.005, None, BetweenRuns(0.001, 6, True), source="history",
                                      method="graph", group_failure=lambda v, t: "below the line with run-3 and run-4"),
            WALL: None}
    entry = {"device_speedup": 3.0, "device_method": "graph", "speedup": 1.5}
    checks = judging.cell_checks(DistributedEntry.of(entry), _dist(2.99), "gpt", "amp_bf16 fp32 x2",
                                 lambda kind: refs.get(kind))
    assert checks.device is not None and checks.device.expected == 3.0
    verdicts = judging.verdicts_of(_dist(2.99), checks)
    assert verdicts[judging.DEVICE_SPEEDUP] is Verdict.PASS  # its own launch stays within the tolerance
    together, why = judging.apply_group_rule(verdicts, checks, _dist(2.99))
    assert together[judging.DEVICE_SPEEDUP] is Verdict.REGRESSION and "run-3 and run-4" in why
