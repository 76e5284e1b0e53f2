"""The baseline files and saved runs the spread's tests learn from: a baseline of two speed entries (WRN
with a device-time speedup where asked, GPT from before device time) and runs of schema 1 holding each
cell's wall-clock (and device-time) speedup, as the runs `ampbench spread` is given were written."""

from __future__ import annotations

from ampbench.baselines.entries import RatioEntry, entry_tolerance, learned_spread
from ampbench.baselines.spread import learn_spread
from ampbench.report import parse_run
from ampbench.results.ratios import SPEED_RATIOS

SOFTWARE = {"torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91900, "driver": "580.159.04",
            "device": "NVIDIA H100 80GB HBM3", "capability": "9.0"}
MEASURED = {"cudnn_benchmark": False, "block_seconds": 0.1}
WRN = "test_speed[wide_resnet28_10-amp_fp16]"
GPT = "test_speed[gpt-bf16]"
WRN_DEVICE = 3.104  # the recording's device-time speedup of WRN amp_fp16


def kind_of(prefix: str):
    return next(kind for kind in SPEED_RATIOS.values() if kind.prefix == prefix)


def spread_of(figures, prefix=""):
    """The learned spread of the ratio `figures` (a baseline entry's) hold under `prefix`."""
    return learned_spread(None if figures is None else RatioEntry.read(figures, kind_of(prefix)))


def tolerance_of(floor, figures, prefix, noise=None):
    """The tolerance of the ratio `figures` hold under `prefix`."""
    return entry_tolerance(kind_of(prefix), floor, RatioEntry.read(figures, kind_of(prefix)), noise)


def baseline_doc() -> dict:
    entry = lambda speedup: {"figures": {"speedup": speedup, "noise": 0.01, **MEASURED}, "software": dict(SOFTWARE),  # noqa: E731
                             "recorded": "2026-11-21T18:58:39Z"}
    return {"schema_version": 1, "gpu": SOFTWARE["device"], "entries": {
        WRN: entry(8.402), GPT: entry(6.422),
        "test_memory[gpt-bf16]": {"figures": {"memory_ratio": 0.5, "peak_mem_bytes": 2**30}, "software": dict(SOFTWARE),
                                  "recorded": "2026-11-21T18:58:39Z"}}}


def run_doc(speedups: dict[str, float], when: str, software: dict | None = None, **info) -> dict:
    """A benchmark JSON document holding one speed cell per entry of `speedups`."""
    benchmarks = [{"name": test_id, "extra_info": {"ampbench_schema": 1, "kind": "speed", "speedup": s,
                                                    "verdict": "pass", **MEASURED, **info}}
                  for test_id, s in speedups.items()]
    return {"benchmarks": benchmarks, "datetime": when, "machine_info": {"ampbench": software or dict(SOFTWARE)}}


def learn_from(*documents: dict, baseline: dict | None = None):
    entries = (baseline or baseline_doc())["entries"]
    return learn_spread(entries, [parse_run(d, f"run{i}.json") for i, d in enumerate(documents)])


def device_baseline(method: str = "graph") -> dict:
    """The baseline with a device-time speedup on WRN's entry (GPT's entry predates device time)."""
    document = baseline_doc()
    document["entries"][WRN]["figures"].update(device_speedup=WRN_DEVICE, device_method=method, device_noise=0.004)
    return document


def device_run(speedups: dict[str, tuple[float, float | None]], when: str, method: str = "graph", **info) -> dict:
    """A run whose cells carry (wall, device) speedups; a device speedup of None leaves the key out, as
    a run from before device time did."""
    run = run_doc({t: wall for t, (wall, _) in speedups.items()}, when, **info)
    for bench in run["benchmarks"]:
        device = speedups[bench["name"]][1]
        if device is not None:
            bench["extra_info"].update(device_speedup=device, device_method=method)
    return run
