"""The saved runs the report's tests read (``tests/data/*.json``: runs the suite wrote, or could have
written) and what they make of them. The tests assert the structure of what is made from a run, never
its numbers, so a fresh capture can replace any of them."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from ampbench.report import build_report, load_run

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


@pytest.fixture(scope="module")
def gpu_report():
    """The GPU run and the files of its report, made once per module."""
    run = load_run(gpu_run())
    return run, build_report(run)
