"""The chrome traces of ``fsdp2_probe.py``: each profiled step's figures, and the ranks' traces on one
clock."""

from __future__ import annotations

import json
from pathlib import Path

from ampbench.distributed.variants import kernels_from_trace


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total / 1e3


def summarise(trace: dict) -> list[dict]:
    """Per ``probe.step`` range of the trace: its kernels lie inside it, as it ends in a synchronize."""
    base_us = trace.get("baseTimeNanoseconds", 0) / 1e3
    user = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation" and "dur" in e]
    kernels = kernels_from_trace(trace)
    out = []
    for s in sorted((e for e in user if e["name"] == "probe.step"), key=lambda e: e["ts"]):
        a, b = s["ts"], s["ts"] + s["dur"]
        def within(name):
            return sum(e["dur"] for e in user if e["name"] == name and a <= e["ts"] < b) / 1e3

        ks = [k for k in kernels if a <= k.start < b]
        nccl = [(k.start, k.end) for k in ks if "nccl" in k.name.lower()]
        compute = [(k.start, k.end) for k in ks if "nccl" not in k.name.lower()]
        busy = _union_ms(nccl + compute)
        out.append({"start_us": base_us + a, "wall_ms": s["dur"] / 1e3,
                    "launch_ms": s["dur"] / 1e3 - within("probe.sync"), "opt_host_ms": within("probe.optimizer"),
                    "gpu_busy_ms": busy if ks else None, "nccl_ms": _union_ms(nccl) if ks else None,
                    "nccl_exposed_ms": busy - _union_ms(compute) if ks else None})
    return out


def merge_traces(paths: list[Path], out: Path) -> None:
    """The ranks' traces as one on rank 0's clock, each rank's processes named ``rank<R> ...``."""
    traces = [json.loads(p.read_text()) for p in paths]
    base = traces[0].get("baseTimeNanoseconds", 0)
    events = []
    for rank, trace in enumerate(traces):
        shift_us = (trace.get("baseTimeNanoseconds", 0) - base) / 1e3
        for e in trace["traceEvents"]:
            e = dict(e, pid=f"rank{rank} {e.get('pid')}")  # kineto's own traces have string pids too
            if e.get("ph") == "M" and e.get("name") == "process_name":
                e["args"] = dict(e.get("args", {}), name=f"rank{rank} {e.get('args', {}).get('name', '')}")
            if "ts" in e:
                e["ts"] = float(e["ts"]) + shift_us
            events.append(e)
    out.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": base}))
