"""A speed cell judged against its history (ampbench.history.baseline_source): the level of its counted runs
since the last accepted change, the noise pooled over all of them (and a baseline file's spread from other
runs), learning on a GPU model with no file, and the file still the judge of a cell the history lacks."""

from __future__ import annotations

import math

import pytest

from ampbench.baselines.entries import SpeedEntry
from ampbench.baselines.file import BaselineFile
from ampbench.history.baseline_source import HistoryBaselines, overlay
from ampbench.history.store import open_history
from ampbench.results import Verdict
from ampbench.results.ratios import DEVICE
from ampbench.speed.ratio import Ratio
from ampbench.tolerance import UNLEARNED_TOLERANCE
from history_runs import H100, speed_record, speed_run
from tests import records
from tests.references import entry_check

CELL = "test_speed[resnet50-amp_bf16]"
# a device-time speedup that moves 0.2% between runs
VALUES = (2.400, 2.405, 2.396, 2.402, 2.399, 2.404)


@pytest.fixture
def history(tmp_path):
    return open_history(f"sqlite:///{tmp_path / 'history.sqlite'}")


def _append(history, values, start=0, verdict=Verdict.PASS):
    for i, v in enumerate(values, start):
        rec = speed_record("resnet50", "amp_bf16", v, verdict, device_method="graph",
                           kernels=[{"name": "sm90_gemm", "ms": 1.0}])
        history.append(speed_run(f"run{i}", [rec], at=i))


def _baselines(history, tmp_path, entries=None) -> HistoryBaselines:
    store = BaselineFile(path=tmp_path / "nvidia-h100.json", gpu=H100, entries=entries or {}, exists=bool(entries))
    return HistoryBaselines(store, history)


def _check(figures):
    check, why = entry_check(Ratio(DEVICE, method="graph"), "resnet50", "amp_bf16",
                             SpeedEntry.from_figures(figures), 0.005)
    assert check is not None, why
    return check


def test_a_gpu_model_without_a_file_learns_run_by_run(history, tmp_path):
    assert _baselines(history, tmp_path).figures(CELL) is None  # the first run records: learning
    _append(history, VALUES[:1])
    one = _baselines(history, tmp_path)
    figures = one.figures(CELL)
    assert figures["device_method"] == "graph" and figures["kernels"][0]["name"] == "sm90_gemm"
    assert _check(figures).expected == pytest.approx(2.400)
    assert _check(figures).tolerance == pytest.approx(UNLEARNED_TOLERANCE)  # one run: the unlearned floor
    assert one.states()[CELL].startswith("3% (unlearned)")
    _append(history, VALUES[1:], start=1)
    six = _baselines(history, tmp_path)
    check = _check(six.figures(CELL))
    geo = math.exp(sum(map(math.log, VALUES)) / len(VALUES))
    assert check.expected == pytest.approx(geo)
    assert 0.005 <= check.tolerance < 0.01  # learned from six runs 0.2% apart
    assert six.learned_share() == (1, 1)
    assert six.states()[CELL].startswith(f"{100 * check.tolerance:.2g}% from 6 runs")


def test_a_failed_run_does_not_move_the_level_and_an_accepted_change_keeps_the_noise(history, tmp_path):
    _append(history, VALUES)
    before = _check(_baselines(history, tmp_path).figures(CELL))
    _append(history, (2.30,), start=10, verdict=Verdict.REGRESSION)
    failed = _check(_baselines(history, tmp_path).figures(CELL))
    assert failed.expected == pytest.approx(before.expected) and failed.tolerance == pytest.approx(before.tolerance)
    history.accept("run10", CELL, "a new cuDNN: the slower convolution is intended")
    accepted = _baselines(history, tmp_path).figures(CELL)
    check = _check(accepted)
    assert check.expected == pytest.approx(2.30)  # the level restarts at the accepted run
    assert accepted["device_between_run_count"] == len(VALUES) + 1 and accepted["device_between_run_levels"] == 2
    assert check.tolerance > before.tolerance  # the same noise, but a level known from one run only
    assert check.tolerance < UNLEARNED_TOLERANCE  # the noise was kept: not back to the unlearned floor


def test_the_file_judges_a_cell_the_history_has_not_seen_and_its_spread_joins_the_history(history, tmp_path):
    entry = {"speedup": 2.4, "device_speedup": 2.41, "device_method": "graph", "device_recorded_speedup": 2.41,
             "device_between_run_sd": 0.002, "device_between_run_count": 20, "device_between_run_runs": []}
    store_entries = {CELL: {"figures": entry, "software": {}, "recorded": "2026-01-01T00:00:00Z"}}
    assert _baselines(history, tmp_path, store_entries).figures(CELL) == entry
    _append(history, VALUES[:1])
    figures = _baselines(history, tmp_path, store_entries).figures(CELL)
    assert figures["device_speedup"] == pytest.approx(2.400)  # this runner's level
    assert figures["device_between_run_count"] == 21  # the file's 20 runs and this one
    assert _check(figures).tolerance < 0.015  # the file's noise, not the unlearned floor (3%)
    # a file written from this history lists its runs: they are not counted twice
    entry_from_history = dict(figures)
    again = _baselines(history, tmp_path, {CELL: {"figures": entry_from_history, "software": {}, "recorded": "x"}})
    assert again.figures(CELL)["device_between_run_count"] == 21


def test_an_overlay_without_any_level_is_the_file_entry():
    assert overlay(None, {}, None, {}) is None
    assert overlay({"speedup": 2.0}, {}, None, {}) == {"speedup": 2.0}


def test_baselines_export_writes_the_file_from_the_history_spread_included(history, tmp_path, capsys):
    from ampbench.baselines.file import load_document
    from ampbench.cli import main

    url, out = f"sqlite:///{tmp_path / 'history.sqlite'}", tmp_path / "baselines"
    assert main(["baselines", "export", "--history", url, "--baseline-dir", str(out)]) == 2
    assert "no GPU" in capsys.readouterr().err
    _append(history, VALUES)
    assert main(["baselines", "export", "--history", url, "--baseline-dir", str(out)]) == 0
    path = next(out.glob("*.json"))
    entry = load_document(path)["entries"][CELL]
    geo = math.exp(sum(map(math.log, VALUES)) / len(VALUES))
    assert entry["figures"]["device_speedup"] == pytest.approx(geo)
    assert entry["figures"]["device_between_run_count"] == len(VALUES)
    assert entry["software"]["torch"] == "2.11.0"
    # exported again, the file's runs are the history's: the spread is not counted twice
    assert main(["baselines", "export", "--history", url, "--baseline-dir", str(out)]) == 0
    assert load_document(path)["entries"][CELL]["figures"]["device_between_run_count"] == len(VALUES)


def _ddp_record(speedup: float, world_size: int, verdict=Verdict.PASS):

    return records.distributed(
        test_id="test_ddp_speed[gpt-amp_bf16-fp32]", model="gpt", mode="amp_bf16", device="cuda:0", comm="fp32",
        world_size=world_size, verdict=verdict, device_verdict=verdict, device_method="profiler",
        device_speedup=speedup, device_speedup_low=speedup * 0.99, device_speedup_high=speedup * 1.01,
        speedup=speedup * 0.9, speedup_low=speedup * 0.85, speedup_high=speedup * 0.95)


def test_a_distributed_cell_learns_from_its_runs_on_as_many_gpus_and_no_others(history, tmp_path):
    from ampbench.baselines.entries import DistributedEntry
    from ampbench.history.baseline_source import DISTRIBUTED_CELLS
    from ampbench.results.ratios import DIST_DEVICE

    cell = "test_ddp_speed[gpt-amp_bf16-fp32]"
    for i, v in enumerate((5.50, 5.52, 5.49, 5.51, 5.50)):
        history.append(speed_run(f"x2-{i}", [_ddp_record(v, 2)], at=i))
    # four GPUs make another series: their speedup (and their noise) is no sample of two GPUs'
    for i, v in enumerate((4.0, 4.6, 4.2)):
        history.append(speed_run(f"x4-{i}", [_ddp_record(v, 4)], at=10 + i))
    two = BaselineFile(path=tmp_path / "nvidia-h100-x2.json", gpu=f"{H100} x2", entries={}, exists=False)
    learned = HistoryBaselines(two, history, cells=DISTRIBUTED_CELLS)
    entry = DistributedEntry.of(learned.figures(cell))
    assert entry.ratio(DIST_DEVICE).speedup == pytest.approx(math.exp(sum(map(math.log,
                                                                              (5.50, 5.52, 5.49, 5.51, 5.50))) / 5))
    assert (entry.ratio(DIST_DEVICE).between_run_count == 5 and entry.world_size == 2
            and entry.ratio(DIST_DEVICE).method == "profiler")
    check, why = entry_check(Ratio(DIST_DEVICE, method="profiler"), "gpt", "amp_bf16 fp32 x2", entry, 0.005)
    assert check is not None, why
    assert check.tolerance < 0.02  # five runs within 0.5%: learned well under the unlearned 3%
    # the speed cells' overlay leaves distributed cells to the file
    assert HistoryBaselines(two, history).figures(cell) is None


def test_a_distributed_cell_learns_its_device_scaling_efficiency_and_its_method(history, tmp_path):
    """The scaling efficiency in device time gates beside the device speedup, so the history learns it
    as it learns the speedup; a record that named its method on the device speedup alone still gives it."""
    from ampbench.baselines.entries import DistributedEntry
    from ampbench.history.baseline_source import DISTRIBUTED_CELLS
    from ampbench.results.ratios import DEVICE_SCALING

    cell, effs = "test_ddp_speed[gpt-amp_bf16-fp32]", (0.891, 0.893, 0.890, 0.892, 0.891)
    for i, (v, e) in enumerate(zip((5.50, 5.52, 5.49, 5.51, 5.50), effs)):
        rec = records.distributed(
            test_id=cell, model="gpt", mode="amp_bf16", device="cuda:0", comm="fp32", world_size=4,
            verdict=Verdict.PASS, device_verdict=Verdict.PASS, device_method="graph", device_speedup=v,
            device_speedup_low=v * 0.999, device_speedup_high=v * 1.001, speedup=v * 0.8,
            speedup_low=v * 0.7, speedup_high=v * 0.9, device_scaling_efficiency=e,
            device_scaling_efficiency_low=e - 0.001, device_scaling_efficiency_high=e + 0.001)
        history.append(speed_run(f"x4-{i}", [rec], at=i))
    four = BaselineFile(path=tmp_path / "nvidia-h100-x4.json", gpu=f"{H100} x4", entries={}, exists=False)
    entry = DistributedEntry.of(HistoryBaselines(four, history, cells=DISTRIBUTED_CELLS).figures(cell))
    learned = entry.ratio(DEVICE_SCALING)
    assert learned.speedup == pytest.approx(math.exp(sum(map(math.log, effs)) / len(effs)))
    assert learned.between_run_count == 5 and learned.method == "graph"
    check, why = entry_check(Ratio(DEVICE_SCALING, "scaling efficiency", method="graph"), "gpt", "amp_bf16 fp32 x4",
                             entry, 0.005)
    assert check is not None, why
    assert check.tolerance < 0.02  # five runs within 0.3%: learned well under the unlearned 3%


def test_baselines_export_writes_the_file_of_each_gpu_count_the_history_holds(history, tmp_path, capsys):
    """A runner of two GPUs runs the speed cells and the distributed ones in one session: both files."""
    from ampbench.baselines.file import load_document
    from ampbench.cli import main

    url, out = f"sqlite:///{tmp_path / 'history.sqlite'}", tmp_path / "baselines"
    cell = "test_ddp_speed[gpt-amp_bf16-fp32]"
    for i, v in enumerate((5.50, 5.52, 5.49)):
        rec = speed_record("resnet50", "amp_bf16", VALUES[i], device_method="graph")
        history.append(speed_run(f"run{i}", [rec, _ddp_record(v, 2)], at=i))
    assert main(["baselines", "export", "--history", url, "--baseline-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 entry written" in printed and "x2.json" in printed
    one = load_document(out / "nvidia-h100-80gb-hbm3.json")
    two = load_document(out / "nvidia-h100-80gb-hbm3-x2.json")
    assert list(one["entries"]) == [CELL] and list(two["entries"]) == [cell]
    assert two["gpu"] == f"{H100} x2" and two["entries"][cell]["figures"]["device_between_run_count"] == 3


def test_the_end_of_a_run_says_how_far_its_distributed_cells_have_learned(history, tmp_path):
    from types import SimpleNamespace

    from ampbench.history.baseline_source import DISTRIBUTED_CELLS
    from ampbench.plugin import summary
    from ampbench.plugin.history import write_learned

    cell = "test_ddp_speed[gpt-amp_bf16-fp32]"
    for i, v in enumerate((5.50, 5.52, 5.49, 5.51)):
        history.append(speed_run(f"x2-{i}", [_ddp_record(v, 2)], at=i))
    store = BaselineFile(path=tmp_path / "nvidia-h100-x2.json", gpu=f"{H100} x2", entries={}, exists=False)
    ran = [(f"perf/test_distributed.py::{cell}", _ddp_record(5.5, 2)),
           ("perf/test_speed.py::test_speed[gpt-amp_bf16]", speed_record("gpt", "amp_bf16", 5.6))]
    lines = []
    reporter = SimpleNamespace(write_line=lambda text, **kw: lines.append(text))
    config = SimpleNamespace(stash={summary.RECORDS_KEY: ran})
    write_learned(reporter, HistoryBaselines(store, history, cells=DISTRIBUTED_CELLS), config, "distributed cells")
    assert lines[0].startswith("ampbench history: device tolerance learned and at most 1% in ")
    assert f"distributed cells of {H100} x2" in lines[0]
    assert lines[1:] == [f"  {cell}: {lines[1].split(': ', 1)[1]}"] and "from 4 runs" in lines[1]


def test_the_end_of_a_run_names_the_cells_it_holds_back_as_suspect(history, tmp_path):
    from types import SimpleNamespace

    from ampbench.plugin import summary
    from ampbench.plugin.history import write_learned

    _append(history, VALUES)
    ran = [(f"perf/test_speed.py::{CELL}", speed_record("resnet50", "amp_bf16", 2.380, device_method="graph")),
           ("perf/test_speed.py::test_speed[gpt-amp_bf16]", speed_record("gpt", "amp_bf16", 5.6))]
    lines = []
    reporter = SimpleNamespace(write_line=lambda text, **kw: lines.append(text))
    config = SimpleNamespace(stash={summary.RECORDS_KEY: ran})
    write_learned(reporter, _baselines(history, tmp_path), config, "speed cells")
    suspects = [line for line in lines if "held back as suspect" in line]
    assert suspects and suspects[0].startswith("ampbench history: 1 of this run's cells held back as suspect")
    assert lines[-1].startswith(f"  {CELL}: -0.") and "below its level" in lines[-1]


def test_history_explain_and_runs_say_what_the_replay_held_back(history, tmp_path, capsys):
    from ampbench.cli import main

    _append(history, VALUES)
    _append(history, (2.380,), start=len(VALUES))
    store = ["--history", str(history.url.database)]
    assert main(["history", "explain", CELL, *store, "--baseline-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"{CELL} device_speedup on {H100}: 7 runs: 6 counted, 1 suspect" in out
    assert "suspect: -0." in out and "below its level" in out and "held back now: #7 run6" in out
    assert "tolerance" in out and "a new card" in out
    assert main(["history", "runs", *store]) == 0
    listing = capsys.readouterr().out.splitlines()
    at = listing[0].index("suspect")  # a column of the table: the GPU's name holds spaces
    assert listing[1][at:].split()[0] == "1"
    assert main(["history", "explain", "test_speed[nothing-fp32]", *store]) == 2
    assert "no run in the history" in capsys.readouterr().err


def test_history_explain_of_a_distributed_cell_pools_in_the_file_of_its_n_gpus(history, tmp_path, capsys):
    """The series of a distributed cell is filed under its N GPUs (``results.cluster_name``); the file
    whose spread the gate pools in is theirs, <gpu-slug>-x<N>.json, as the plugin opens it."""
    from ampbench.cli import main

    cell = "test_ddp_speed[gpt-amp_bf16-fp32]"
    for i, v in enumerate((5.50, 5.52, 5.49)):
        history.append(speed_run(f"x2-{i}", [_ddp_record(v, 2)], at=i))
    two = BaselineFile.open(tmp_path, f"{H100} x2", "nvidia-h100-80gb-hbm3-x2")
    two.record(cell, {"speedup": 5.0, "world_size": 2, "device_speedup": 5.5, "device_method": "profiler",
                      "device_between_run_sd": 0.003, "device_between_run_count": 20, "device_between_run_runs": []},
               {"torch": "2.11.0"})
    two.write()
    store = ["--history", str(history.url.database), "--baseline-dir", str(tmp_path)]
    assert main(["history", "explain", cell, *store]) == 0
    out = capsys.readouterr().out
    assert f"{cell} device_speedup on {H100} x2: 3 runs" in out
    assert "of them from the baseline file" in out  # the file's 20 runs' spread pooled in
