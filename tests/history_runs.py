"""Runs for the history tests to append, made from records the way the pytest plugin hands them over."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ampbench.history.ingest import session_run
from ampbench.history.rows import RunRow
from ampbench.results import SpeedRecord, Verdict
from tests import records

H100 = "NVIDIA H100 80GB HBM3"
START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def speed_record(model: str, mode: str, speedup: float, verdict: Verdict = Verdict.PASS, **more) -> SpeedRecord:
    """A speed cell's record with a device-time speedup and a 1% interval around it."""
    return records.speed(test_id=f"test_speed[{model}-{mode}]", model=model, mode=mode, device="cuda:0",
                       verdict=verdict, device_verdict=verdict, device_speedup=speedup,
                       device_speedup_low=speedup * 0.99, device_speedup_high=speedup * 1.01, speedup=speedup,
                       speedup_low=speedup * 0.98, speedup_high=speedup * 1.02, **more)


def speed_run(run_id: str, records, *, gpu: str = H100, at: int = 0, **machine) -> RunRow:
    """A run of `records` on `gpu`, `at` hours after START, as the plugin hands it to the history."""
    info = {"device": gpu, "gpu_slug": gpu.lower().replace(" ", "-"), "torch": "2.11.0", "cuda": "13.0",
            "driver": "580.1", "run_id": run_id, "suite_revision": "v0.1", "host_load": {"cpus": 2}, **machine}
    return session_run(records, info, START + timedelta(hours=at))


def cells_of(n: int, base: float = 2.0) -> list[SpeedRecord]:
    return [speed_record(f"model{i}", "amp_bf16", base + i / 10) for i in range(n)]
