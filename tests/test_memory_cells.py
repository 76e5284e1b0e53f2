"""A memory cell's verdict and figures on the CPU: held against its baseline entry, with and without the
largest-batch search, and where its memory goes (the tensor accounting runs on any device)."""

from __future__ import annotations

import json

import pytest
import torch

from ampbench import memory, models
from ampbench.baselines.entries import MemoryEntry
from ampbench.memory import find_largest_batch, judge
from ampbench.modes import get_mode
from ampbench.results import MemoryRecord, MemorySearch
from ampbench.train import Trainer
from ampbench.verdict import Verdict
from memory_steps import GIB, MIB, FakeStep, linear

# -- the verdict ---------------------------------------------------------------------------------


def figures(**overrides) -> dict:
    f = {
        "batch_size": 128, "peak_mem_bytes": 10 * GIB, "memory_ratio": 0.55, "max_batch": 1456,
        "max_batch_ref": 800, "max_batch_ratio": 1.82, "max_batch_step": 16, "max_batch_ref_step": 8,
        "max_batch_limited": False, "max_batch_ref_limited": False, "max_batch_throughput": 3000.0,
        "max_batch_throughput_ratio": 2.4, "cap_bytes": 70 * GIB, "alloc_conf": None,
    }
    f.update(overrides)
    return f


def baseline_of(f: dict) -> MemoryEntry:
    return MemoryEntry.from_figures({k: f[k] for k in memory.BASELINE_FIGURES})


def test_no_baseline_reports_the_figures():
    j = judge("resnet50", "amp_bf16", figures(), None, 0.03)
    assert j.verdict is Verdict.NO_BASELINE and not j.failures
    assert "largest batch 1456 (1.82x fp32's 800)" in j.message


def test_the_same_figures_pass():
    j = judge("resnet50", "amp_bf16", figures(), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.PASS, j.message


def test_a_grown_memory_ratio_fails_naming_model_mode_figure_and_values():
    j = judge("resnet50", "amp_bf16", figures(memory_ratio=0.60), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.REGRESSION
    (msg,) = j.failures
    assert "resnet50 amp_bf16: memory ratio to fp32 0.6 against baseline 0.55 (+9.1%)" in msg


def test_a_smaller_largest_batch_fails_beyond_tolerance_and_grid():
    base = baseline_of(figures())
    # 1.82 -> 1.75 is -3.8%: inside 3% + the two grid steps (1.1% + 1.0%)
    assert judge("resnet50", "amp_bf16", figures(max_batch_ratio=1.75), base, 0.03).verdict is Verdict.PASS
    j = judge("resnet50", "amp_bf16", figures(max_batch=1296, max_batch_ratio=1.62), base, 0.03)
    assert j.verdict is Verdict.REGRESSION
    assert any("largest batch 1296 against baseline 1456" in m for m in j.failures)


def test_the_largest_batch_is_not_compared_across_caps_or_at_the_limit():
    base = baseline_of(figures())
    j = judge("resnet50", "amp_bf16", figures(cap_bytes=40 * GIB, max_batch=800, max_batch_ratio=1.0), base, 0.03)
    assert j.verdict is Verdict.PASS and "largest batch not compared" in j.message
    j = judge("mlp", "bf16", figures(max_batch_limited=True, max_batch=131072), base, 0.03)
    assert j.verdict is Verdict.PASS and "batch limit" in j.message


def test_less_memory_than_the_baseline_is_an_improvement():
    j = judge("gpt", "amp_bf16", figures(memory_ratio=0.40, peak_mem_bytes=7 * GIB), baseline_of(figures()), 0.03)
    assert j.verdict is Verdict.IMPROVED, j.message


# -- without a search (the quick tier): the default batch's figures only ---------------------------------


def unsearched(**overrides) -> dict:
    """figures() as a cell that did not search its largest batch has them."""
    f = {k: v
         for k, v in figures(**overrides).items() if k in memory.DEFAULT_BATCH_FIGURES or k == "peak_mem_ref_bytes"}
    return dict(f, max_batch_searched=False)


def test_without_a_search_the_summary_says_so_and_names_no_batch():
    line = memory.summary("wide_resnet28_10", "amp_bf16", unsearched())
    assert line.startswith("wide_resnet28_10 amp_bf16: peak 10.00 GiB at batch 128 (0.550x fp32)")
    assert memory.NOT_SEARCHED in line and "--perf-tier full" in line
    assert "samples/s" not in line and "cap" not in line


def test_without_a_search_and_without_a_baseline_the_default_batch_is_reported():
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(), None, 0.03)
    assert j.verdict is Verdict.NO_BASELINE and not j.failures
    assert "largest batch not searched" in j.message


def test_without_a_search_the_peak_and_ratio_are_held_against_a_full_baseline():
    base = baseline_of(figures())  # recorded by the full tier: it has the largest batch
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(), base, 0.03)
    assert j.verdict is Verdict.PASS, j.message
    assert "peak memory (bytes)" in j.message and "memory ratio to fp32" in j.message
    assert "largest batch 1456" not in j.message and "largest batch not compared" not in j.message
    assert "largest batch not searched" in j.message
    j = judge("wide_resnet28_10", "amp_bf16", unsearched(memory_ratio=0.60), base, 0.03)
    assert j.verdict is Verdict.REGRESSION
    (msg,) = j.failures
    assert msg.startswith("wide_resnet28_10 amp_bf16: memory ratio to fp32 0.6 against baseline 0.55")


def test_without_a_search_a_baseline_of_the_default_batch_only_holds_too():
    base = MemoryEntry.from_figures({k: unsearched()[k] for k in memory.DEFAULT_BATCH_FIGURES})
    assert judge("gpt", "bf16", unsearched(), base, 0.03).verdict is Verdict.PASS
    j = judge("gpt", "bf16", figures(), base, 0.03)  # a full run against it: the batch has nothing to meet
    assert j.verdict is Verdict.PASS and "largest batch not compared" in j.message


def cell_memory(mode: str, peak: int, search: memory.SearchResult | None) -> memory.CellMemory:
    """A CellMemory as measure_memory returns it, without a device: figures only."""
    breakdown = memory.Breakdown(
        batch_size=128, peak_bytes=peak, steady_bytes=peak // 4,
        resident={"weights": peak // 8, "grads": peak // 8, "master": 0, "optimizer_state": 0, "batch": 0},
        reserved_peak_bytes=peak + MIB, allocator={"large_pool_peak_bytes": peak})
    return memory.CellMemory(
        model="resnet50", mode=mode, breakdown=breakdown, search=search, cap_bytes=24 * GIB,
        step_seconds=[0.5, 0.4] if search else [], probe_log=[{"batch": 128, "peak_bytes": peak,
        "reserved_peak_bytes": peak + MIB, "seconds": 0.01, "alloc_retries": 0}], warmup_steps=1,
        search_seconds=3.0 if search else None, allocator_events={"alloc_retries": 0, "ooms": 0},
        timed_alloc_retries=0 if search else None, seconds=4.0)


def a_search(per_sample: float) -> memory.SearchResult:
    return find_largest_batch(FakeStep(linear(GIB, per_sample), 24 * GIB), 24 * GIB, 128)


def test_a_cell_without_a_search_has_no_largest_batch_figures_not_zeros():
    cell, ref = cell_memory("amp_bf16", 5 * GIB, None), cell_memory("fp32", 10 * GIB, None)
    f = memory.memory_figures(cell, ref)
    assert f["memory_ratio"] == pytest.approx(0.5) and f["max_batch_searched"] is False
    assert not [k for k in f if k.startswith("max_batch") and k != "max_batch_searched"]
    assert not {"search_steps", "search_seconds", "cap_bytes", "alloc_conf"} & set(f)
    assert f["weights_bytes"] == 5 * GIB // 8  # the breakdown is still there
    record, j = memory.memory_record(cell, ref, "cuda:0", baseline_of(figures()), 0.03)
    assert record.side("mode").max_batch is None and record.max_batch_ratio is None
    assert record.max_batch_search.text is None and record.max_batch_search.cap_bytes is None
    assert not record.batch_searched and not type(record).times_steps(record.to_info())
    assert j.verdict is Verdict.IMPROVED and record.verdict is Verdict.IMPROVED, j.message  # 0.5x against 0.55x
    assert memory.baseline_figures(record) == {"batch_size": 128, "peak_mem_bytes": 5 * GIB, "memory_ratio": 0.5}


def test_a_searched_cell_has_every_figure_a_baseline_keeps():
    cell, ref = cell_memory("amp_bf16", 6 * GIB, a_search(MIB)), cell_memory("fp32", 10 * GIB, a_search(2 * MIB))
    record, _ = memory.memory_record(cell, ref, "cuda:0", None, 0.03)
    assert record.batch_searched and type(record).times_steps(record.to_info())
    assert record.max_batch_ratio == pytest.approx(record.side("mode").max_batch / record.side("fp32").max_batch)
    kept = memory.baseline_figures(record)
    assert set(kept) == set(memory.BASELINE_FIGURES)
    assert all(kept[k] is not None for k in kept if k != "alloc_conf")


def test_a_searched_cell_holds_its_search_under_one_key():
    cell, ref = cell_memory("amp_bf16", 6 * GIB, a_search(MIB)), cell_memory("fp32", 10 * GIB, a_search(2 * MIB))
    record, _ = memory.memory_record(cell, ref, "cuda:0", None, 0.03)
    info = json.loads(json.dumps(record.to_info()))
    search = info["max_batch_search"]
    assert search["cap_bytes"] == 24 * GIB and search["text"] == cell.search.describe()
    assert search["steps"] == cell.search.steps and search["confirmed"] is True and search["seconds"] == 3.0
    assert not {"search", "search_steps", "cap_bytes", "alloc_conf", "max_batch_limit"} & set(info)
    assert MemoryRecord.from_info(info, record.test_id) == record


def test_a_memory_record_of_schema_3_reads_its_flat_search_into_the_search():
    info = {"ampbench_schema": 3, "kind": "memory", "max_batch_searched": True, "max_batch_ratio": 1.5,
            "sides": {"mode": {"max_batch": 96}}, "search": "largest batch 96", "search_steps": 5,
            "search_seconds": 2.0, "max_batch_limit": 4096, "max_batch_confirmed": True, "cap_bytes": 24 * GIB,
            "alloc_conf": None, "search_probes": [[96, 1, 2, 0.1, 0]], "max_batch_step_ms": 4.0}
    record = MemoryRecord.from_info(info)
    assert record.max_batch_search == MemorySearch(
        text="largest batch 96", steps=5, seconds=2.0, limit=4096, confirmed=True, cap_bytes=24 * GIB,
        probes=[[96, 1, 2, 0.1, 0]], step_ms=4.0)
    assert not record.detail and record.entry_value("cap_bytes") == 24 * GIB
    written = json.loads(json.dumps(record.to_info()))
    assert written["max_batch_search"]["steps"] == 5 and "search_steps" not in written
    assert MemoryRecord.from_info(written) == record


def test_a_quick_recording_leaves_the_next_full_run_its_largest_batch(tmp_path, monkeypatch):
    """Recorded by the full tier, then by the quick tier: the entry still starts the next search and
    holds its largest batch, under the cap it was found under."""
    from ampbench.baselines.file import BaselineFile

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    monkeypatch.delenv("PYTORCH_ALLOC_CONF", raising=False)
    test_id = "test_memory[resnet50-amp_bf16]"
    full, quick_ref = figures(cap_bytes=24 * GIB), cell_memory("fp32", 10 * GIB, None)
    store = BaselineFile.open(tmp_path, "GPU X", "gpu-x")
    store.record(test_id, baseline_of(full).to_figures(), {})
    store.write()
    quick, _ = memory.memory_record(cell_memory("amp_bf16", 5 * GIB, None), quick_ref, "cuda:0",
                                    MemoryEntry.of(store.figures(test_id)), 0.03)
    store.record(test_id, memory.baseline_figures(quick), {})
    store.write()
    entry = MemoryEntry.of(BaselineFile.open(tmp_path, "GPU X", "gpu-x").figures(test_id))
    assert entry.memory_ratio == 0.5 and entry.cap_bytes == 24 * GIB
    assert memory.search_start(entry, 24 * GIB) == (1456, 16)
    j = judge("resnet50", "amp_bf16", figures(cap_bytes=24 * GIB, max_batch=1296, max_batch_ratio=1.62), entry, 0.03)
    assert any("largest batch 1296 against baseline 1456" in m for m in j.failures)


def test_a_cell_and_its_fp32_side_are_measured_alike():
    with pytest.raises(ValueError,
                       match="resnet50 amp_bf16: the cell did not search its largest batch and fp32's reference did"):
        memory.memory_figures(cell_memory("amp_bf16", 6 * GIB, None), cell_memory("fp32", 10 * GIB, a_search(MIB)))


# -- where the memory goes (tensor accounting runs on any device) ------------------------------------


def bytes_of(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def mlp_after_one_step(mode: str) -> tuple[Trainer, dict[str, int], list[torch.nn.Parameter]]:
    """The smoke MLP after one CPU training step in `mode`: the trainer, its resident bytes, its parameters."""
    trainer = Trainer(models.get_model("mlp"), get_mode(mode), torch.device("cpu"), smoke=True)
    trainer.run(1)
    return trainer, memory.resident_bytes(trainer), list(trainer.model.parameters())


def test_resident_bytes_splits_weights_grads_and_optimizer_state():
    trainer, resident, params = mlp_after_one_step("fp32")
    assert resident["weights"] == bytes_of(params)
    assert resident["grads"] == bytes_of(p.grad for p in params)
    assert resident["optimizer_state"] == bytes_of(params)  # SGD momentum: one buffer per parameter
    assert resident["master"] == 0
    assert resident["batch"] == bytes_of((trainer.inputs, trainer.targets))


def test_resident_bytes_counts_fp16_masters_once():
    _, resident, params = mlp_after_one_step("fp16_master")
    assert resident["weights"] == bytes_of(params)  # fp16
    assert resident["master"] == 2 * 2 * bytes_of(params)  # fp32 copies and their fp32 gradients


def test_probes_switch_the_trainers_batch():
    """The search trains one trainer at many batch sizes: each probe replaces the synthetic pools
    with one batch of its size (the pools themselves are read-only)."""
    trainer = Trainer(models.get_model("mlp"), get_mode("amp_bf16"), torch.device("cpu"), smoke=True)
    prober = memory.probe._Prober(trainer, base_allocated=0, base_reserved=0)
    prober.set_batch(5)
    assert trainer.inputs.shape[0] == 5 and trainer.targets.shape[0] == 5 and trainer.batch_size == 5
    trainer.run(2)
    assert memory.resident_bytes(trainer)["batch"] == 2 * 5 * 64 * 4  # inputs and targets, fp32
    prober.set_batch(None)
    assert trainer.input_pool == [] and trainer.target_pool == []
