"""The terminal summary: one table per kind of cell, model by mode, then the cells that need a look; the
smoke note on a CPU run; pytest-benchmark's own table trimmed to step times, the JSON untouched; and
``-p no:ampbench-summary`` turns it all off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import records
from ampbench.plugin.summary import SMOKE_SUMMARY, summary_lines, table, tables
from ampbench.results import (
    ConvergenceRecord,
    DistributedRecord,
    MemoryRecord,
    PipelineRecord,
    SpeedRecord,
    UnderflowRecord,
    Verdict,
)

ROOT = Path(__file__).parent.parent
INTERVAL = dict(rounds=12, confidence=0.99)
GPT = records.speed(model="gpt", mode="amp_bf16", device="cuda:0", device_speedup=2.412, device_speedup_low=2.405,
                  device_speedup_high=2.419, device_rounds=12, device_verdict=Verdict.PASS, speedup=1.873,
                  speedup_low=1.851, speedup_high=1.902, wall_verdict=Verdict.REGRESSION, idle_share=0.2345,
                  host_bound=True, device_method="graph", verdict=Verdict.PASS, **INTERVAL)
LSTM = records.speed(model="lstm_lm", mode="fp16", device="cuda:0", speedup=2.95, speedup_low=2.9, speedup_high=3.0,
                   device_verdict=Verdict.NO_BASELINE, idle_share=0.031, host_bound=False, device_method="kernels",
                   **INTERVAL)
FP32 = records.speed(model="gpt", mode="fp32", device="cuda:0", speedup=1.0, speedup_low=0.99, speedup_high=1.01,
                   device_speedup=1.0, device_speedup_low=0.999, device_speedup_high=1.001, device_rounds=12,
                   **INTERVAL)
MEMORY = MemoryRecord.of_figures(model="gpt", mode="amp_bf16", device="cuda:0", memory_ratio=0.734, max_batch=24,
                                 max_batch_ratio=1.5, verdict=Verdict.PASS)
CONVERGENCE = ConvergenceRecord(model="mnist_cnn", mode="fp16", device="cuda:0", accuracy=0.61, accuracy_ref=0.975,
                                verdict=Verdict.EXPECTED_LAG, reason="below margin", message="fp16 lags fp32")
NONFINITE = ConvergenceRecord(model="mnist_cnn", mode="bf16", device="cuda:0", accuracy=0.1, accuracy_ref=0.975,
                              verdict=Verdict.NON_FINITE, message="loss NaN at steps [3]")
PIPELINE = PipelineRecord(model="dpn26", mode="amp_fp16", device="cuda:0", throughput_loader=900.0,
                          throughput_resident=2000.0, throughput_loader_only=1000.0, loader_ratio=0.45,
                          input_bound=True, verdict=Verdict.INPUT_BOUND, message="the loader caps the step")
DISTRIBUTED = records.distributed(model="resnet50", mode="amp_bf16", device="cuda:0", comm="bf16_hook", world_size=2,
                                speedup=2.5, speedup_low=2.4, speedup_high=2.6, scaling_efficiency=0.93,
                                scaling_efficiency_low=0.92, scaling_efficiency_high=0.94, comm_share=0.12,
                                verdict=Verdict.PASS, **INTERVAL)


def test_no_cell_no_lines():
    assert summary_lines([], {}) == []
    assert table(SpeedRecord, []) == []


def test_one_row_per_speed_cell_under_a_header_of_every_column():
    title, header, rule, *rows = table(SpeedRecord, [GPT, LSTM])
    assert title.startswith("ampbench: speed cells (2)")
    assert header.split("  ")[0] == "model" and "device speedup" in header and "host-bound" in header
    assert set(rule.replace("  ", "")) == {"-"}
    gpt, lstm = rows
    for text in ("gpt", "amp_bf16", "2.412x [2.405, 2.419]", "pass", "1.873x [1.851, 1.902]", "regression",
                 "23%", "yes", "graph"):
        assert text in gpt
    assert "3%" in lstm and " no " in lstm and lstm.endswith("kernels") and "no baseline" in lstm


def test_columns_line_up():
    header, rule, *rows = table(SpeedRecord, [GPT, LSTM, FP32])[1:]
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    assert len(starts) == 2 + len(tables()[SpeedRecord].columns)
    for line in (header, *rows):
        assert all(line[i] != " " and (i == 0 or line[i - 2:i] == "  ") for i in starts), line


def test_missing_values_show_as_a_dash_and_fp32_as_the_reference():
    [row] = table(SpeedRecord, [records.speed(model="mlp", mode="tf32")])[3:]
    assert row.split() == ["mlp", "tf32", "-", "-", "-", "-", "-", "-", "-"]
    [fp32] = table(SpeedRecord, [FP32])[3:]
    assert fp32.split()[2] == "reference" and "1.000x" not in fp32  # fp32 over itself is no finding


def test_a_memory_cell_without_a_search_says_so_where_its_largest_batch_would_be():
    quick = MemoryRecord(model="gpt", mode="bf16", device="cuda:0", memory_ratio=0.52, max_batch_searched=False,
                         verdict=Verdict.PASS)
    rows = table(MemoryRecord, [MEMORY, quick])[3:]
    assert rows[0].split()[2:] == ["0.734x", "24", "1.50x", "pass"]
    assert rows[1].split()[2:] == ["0.520x", "not", "searched", "-", "pass"]


def test_one_table_per_kind_then_the_cells_that_need_a_look():
    cells = [(f"perf/x.py::t[{i}]", r) for i, r in
             enumerate([GPT, MEMORY, CONVERGENCE, NONFINITE, PIPELINE, DISTRIBUTED, UnderflowRecord(device="cuda:0")])]
    lines = summary_lines(cells, {"perf/x.py::t[2]": "xfailed", "perf/x.py::t[3]": "failed"})
    titles = [line for line in lines if line.startswith("ampbench: ")]
    assert [t.split(" (")[0] for t in titles] == [
        "ampbench: speed cells", "ampbench: memory cells", "ampbench: convergence cells",
        "ampbench: input-pipeline cells", "ampbench: distributed cells", "ampbench: cells that need a look"]
    text = "\n".join(lines)
    assert SMOKE_SUMMARY not in text  # a GPU run
    for figure in ("0.734x", "1.50x", "-36.5 pts", "expected lag (below margin)", "45%", "93.0% [92.0%, 94.0%]",
                   "bf16_hook", "12%"):
        assert figure in text, figure
    look = lines[lines.index(titles[-1]) + 1:]
    assert look == [
        "  perf/x.py::t[2] (expected lag, test xfailed): fp16 lags fp32",
        "  perf/x.py::t[3] (non-finite, test failed): loss NaN at steps [3]",
        "  perf/x.py::t[4] (input-bound): the loader caps the step",
    ]


def test_a_distributed_cell_shows_its_device_speedup_beside_the_wall_clock():
    record = records.distributed(model="gpt", mode="amp_bf16", comm="fp32", world_size=2, device_speedup=5.2,
                               device_speedup_low=5.1, device_speedup_high=5.3, speedup=4.5, speedup_low=4.2,
                               speedup_high=4.7, verdict=Verdict.PASS)
    header, row = table(DistributedRecord, [record])[1], table(DistributedRecord, [record])[3]
    assert header.index("device speedup") < header.index("wall speedup")
    assert "5.200x [5.100, 5.300]" in row and "4.500x [4.200, 4.700]" in row
    assert "-" in table(DistributedRecord, [records.distributed(model="gpt", mode="amp_bf16", speedup=4.5)])[3]


def test_a_cpu_run_leads_with_the_smoke_note():
    lines = summary_lines([("n", records.speed(model="mlp", mode="bf16", device="cpu"))], {})
    assert lines[0] == f"ampbench: {SMOKE_SUMMARY}" and "figures are not comparable" in lines[0]


# -- as a plugin, in a pytest run of its own -------------------------------------------------------

CONFTEST = '''
import pytest
from ampbench.plugin import summary


def pytest_configure(config):
    summary.register_summary(config)


@pytest.fixture
def record_result(request, benchmark):
    def write(record):
        benchmark.extra_info.update(record.to_info())
        summary.keep_record(request.config, request.node.nodeid, record)
    return write
'''
TESTS = '''
from ampbench.results import ConvergenceRecord, MemoryRecord, RatioFigures, SpeedRecord, Verdict


def test_speed(benchmark, record_result):
    benchmark.pedantic(lambda: None, rounds=3, iterations=1)
    wall = RatioFigures(speedup=2.0, speedup_low=1.9, speedup_high=2.1, rounds=12, confidence=0.99)
    record_result(SpeedRecord(model="mlp", mode="bf16", device="cuda:0", ratios={"wall": wall}, verdict=Verdict.PASS))


def test_convergence(benchmark, record_result):
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    record_result(ConvergenceRecord(model="mnist_cnn", mode="bf16", device="cuda:0", accuracy=0.97,
                                    accuracy_ref=0.975, verdict=Verdict.PASS))


def test_memory_searched(benchmark, record_result):
    benchmark.pedantic(lambda: None, rounds=2, iterations=1)
    record_result(MemoryRecord.of_figures(model="gpt", mode="bf16", device="cuda:0", memory_ratio=0.5,
                                          max_batch_searched=True, max_batch=64, max_batch_ratio=1.9))


def test_memory_unsearched(benchmark, record_result):
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    record_result(MemoryRecord(model="gpt", mode="fp16", device="cuda:0", memory_ratio=0.5, max_batch_searched=False))


def test_not_ampbench(benchmark):
    benchmark(lambda: None)
'''


def _pytest(tmp_path: Path, *args: str) -> tuple[str, dict]:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_cells.py").write_text(textwrap.dedent(TESTS))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                          "--benchmark-json", str(out), *args, str(tmp_path)],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout, json.loads(out.read_text())


def _benchmark_table(stdout: str) -> str:
    return stdout[stdout.index("benchmark:"):]


def test_the_plugin_summarises_and_trims_pytest_benchmarks_table_but_not_its_json(tmp_path):
    stdout, doc = _pytest(tmp_path)
    assert "ampbench summary" in stdout and "ampbench: speed cells (1)" in stdout
    assert "ampbench: convergence cells (1)" in stdout
    bench_table = _benchmark_table(stdout)
    assert "test_speed" in bench_table and "test_not_ampbench" in bench_table
    assert "test_convergence" not in bench_table  # one round of a whole training run is no step time
    # a memory cell's steps at its largest batch are step times; one that searched none timed nothing
    assert "test_memory_searched" in bench_table and "test_memory_unsearched" not in bench_table
    assert sorted(b["name"] for b in doc["benchmarks"]) == ["test_convergence", "test_memory_searched",
                                                            "test_memory_unsearched", "test_not_ampbench", "test_speed"]


def test_p_no_ampbench_summary_turns_it_off(tmp_path):
    stdout, doc = _pytest(tmp_path, "-p", "no:ampbench-summary")
    assert "ampbench summary" not in stdout and "ampbench:" not in stdout
    assert "test_convergence" in _benchmark_table(stdout)
    assert len(doc["benchmarks"]) == 5
