"""The saved runs the report's and the ``ampbench`` command's tests read (``tests/data/*.json``: runs the
suite wrote, or could have written), the report made of one, and runs changed from one (a speed cell
made slower, an interval widened across its line). The tests assert the structure of what is made from
a run, never its numbers, so a fresh capture can replace any of them."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

import pytest

from ampbench.report import build_report, load_run
from ampbench.results import SpeedRecord
from ampbench.results.ratios import WALL

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("*.json"))
REAL_H100 = DATA / "h100_run.json"
SEARCHED_RUN = DATA / "synthetic_h100_quick.json"  # memory cells with their largest batch


def fixtures_module():
    """tests/data/make_fixtures.py, which writes the synthetic runs."""
    spec = importlib.util.spec_from_file_location("ampbench_test_fixtures", DATA / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(tmp_path: Path, name: str, document) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return path


def gpu_run() -> Path:
    """A run with GPU figures (memory, largest batch): the real H100 capture once it is there."""
    return REAL_H100 if REAL_H100.exists() else DATA / "synthetic_h100_quick.json"


def png_ok(data: bytes) -> bool:
    return data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000


@lru_cache(maxsize=1)
def gpu_report_of():
    """(run, its report's files) of ``gpu_run``, made once a session."""
    run = load_run(gpu_run())
    return run, build_report(run)


@pytest.fixture(scope="module")
def gpu_report():
    """The GPU run and the files of its report."""
    return gpu_report_of()


def slower_run(tmp_path: Path, factor: float = 0.5, name: str = "new.json", verdict: str | None = None) -> Path:
    """gpu_run() with the tightest speed cell's speedup scaled by `factor` (0.5: a clear regression)."""
    doc = json.loads(gpu_run().read_text())
    run = load_run(gpu_run())
    target = min(run.of_kind(SpeedRecord), key=lambda c: c.estimate(WALL).half_width).test_id
    for b in doc["benchmarks"]:
        if b["name"] == target:
            for k in ("speedup", "speedup_low", "speedup_high"):
                b["extra_info"][k] *= factor
            if verdict:
                b["extra_info"]["verdict"] = verdict
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def straddling_run(tmp_path: Path) -> Path:
    """gpu_run() with one speed interval widened across the regression line: inconclusive against gpu_run()."""
    doc = json.loads(gpu_run().read_text())
    for b in doc["benchmarks"]:
        e = b["extra_info"]
        if e.get("kind") == "speed":
            e["speedup_low"], e["speedup_high"] = e["speedup"] * 0.5, e["speedup"] * 1.5
            break
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(doc))
    return path
