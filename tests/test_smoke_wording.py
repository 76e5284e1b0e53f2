"""A CPU smoke run speaks of itself as one: no GPU words in its report, counts in the singular where
there is one, `compare` of smoke runs says so before any verdict, and its distributed cells name ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ampbench.cli import main
from ampbench.report import build_report, load_run, parse_run, render_markdown
from ampbench.report.compare import compare_runs, format_text

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parents[1]
CPU_RUN = DATA / "cpu_smoke.json"


def _host_bound(document: dict) -> dict:
    """`document` with its first speed cell host-bound, as a loaded host leaves one."""
    info = document["benchmarks"][1]["extra_info"]
    info.update(host_bound=True, idle_share=0.23, host_overhead_ms=0.4)
    return document


def test_a_cpu_report_names_no_gpu_where_it_means_the_device(tmp_path):
    run = parse_run(_host_bound(json.loads(CPU_RUN.read_text())), tmp_path / "cpu.json")
    assert run.smoke
    files = build_report(run)
    md, html = files["summary.md"].decode(), files["index.html"].decode()
    assert "the device idles 23% of the eager step" in md and "GPU idles" not in md
    assert "The device sat idle more than a tenth" in html and "<th>device idle</th>" in html
    assert "GPU sat idle" not in html and "GPU idle" not in html and "GPU busy" not in html
    # a GPU run keeps its word
    gpu = parse_run(_host_bound(json.loads((DATA / "h100_speed_device.json").read_text())), tmp_path / "gpu.json")
    assert "the GPU idles 23%" in render_markdown(gpu)


def test_one_cell_is_one_cell(tmp_path):
    document = json.loads(CPU_RUN.read_text())
    document["benchmarks"] = document["benchmarks"][:1]
    md = render_markdown(parse_run(document, tmp_path / "one.json"))
    assert "- **speed** (1 cell):" in md and "1 cells" not in md
    assert "- **speed** (12 cells):" in render_markdown(load_run(CPU_RUN))


def test_compare_of_two_smoke_runs_says_so_before_any_verdict(tmp_path, capsys):
    comparison = compare_runs(load_run(CPU_RUN), load_run(CPU_RUN))
    assert format_text(comparison).startswith("SMOKE RUNS: both runs are CPU smoke runs")
    main(["compare", str(CPU_RUN), str(CPU_RUN)])
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("SMOKE RUNS: ") and "say nothing about a GPU's speed" in out
    assert main(["report", str(CPU_RUN), "--compare", str(CPU_RUN), "-o", str(tmp_path / "r")]) == 0
    assert "SMOKE RUNS: both runs" in capsys.readouterr().out
    assert "> SMOKE RUNS: both runs" in (tmp_path / "r" / "summary.md").read_text()
    # two GPU runs carry no such note
    gpu = load_run(DATA / "h100_speed_device.json")
    assert not any("SMOKE" in n for n in compare_runs(gpu, gpu).notes)


def test_a_smoke_run_against_a_gpu_run_is_named_after_the_cross_device_note(capsys):
    main(["compare", str(CPU_RUN), str(DATA / "h100_speed_device.json"), "--cross-device", "--allow-missing"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("CROSS-DEVICE") and lines[1].startswith("SMOKE RUN: cpu_smoke.json is a CPU smoke run")


def test_a_cpu_distributed_cell_speaks_of_ranks(tmp_path):
    """A real launch of two CPU ranks: its message, and the report made of it, say ranks, not GPUs."""
    out = tmp_path / "dist.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "perf/test_distributed.py", "-q", "-p", "no:cacheprovider",
         "--perf-models", "mlp", "--perf-precisions", "amp_bf16", "-k", "test_ddp_speed and fp32",
         "--benchmark-json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (cell,) = load_run(out).cells
    assert cell.test_id == "test_ddp_speed[mlp-amp_bf16-fp32]"
    assert "samples/s per rank" in cell.message and "GPU" not in cell.message
    assert "no baseline for this device and rank count" in cell.message
    files = build_report(load_run(out))
    assert "per GPU" not in files["index.html"].decode() and "per GPU" not in files["summary.md"].decode()
