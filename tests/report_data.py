"""The runs the report's tests read (``tests/data/``) and what they share: a run written to a file, the
synthetic-run generator, the report of a run with GPU figures (made once a session)."""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from ampbench.report import build_report, load_run

DATA = Path(__file__).parent / "data"
RUNS = sorted(DATA.glob("*.json"))
REAL_H100 = DATA / "h100_run.json"


def fixtures_module():
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
    """(run, its report's files) of ``gpu_run``."""
    run = load_run(gpu_run())
    return run, build_report(run)
