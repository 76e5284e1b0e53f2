"""`ampbench baselines export` and `ampbench spread` work on the same file: an exported entry names the GPU
and its compute capability, which spread holds each run to."""

from __future__ import annotations

import re
from pathlib import Path

from ampbench.baselines.file import load_document
from ampbench.cli import main

RUN = Path(__file__).parent / "data" / "h100_speed_device.json"  # a quick-tier run on an H100


def test_spread_learns_from_runs_into_a_file_the_history_exported(tmp_path, capsys):
    store, out = str(tmp_path / "history.sqlite"), tmp_path / "baselines"
    assert main(["history", "import", "--history", store, str(RUN)]) == 0
    assert main(["baselines", "export", "--history", store, "--baseline-dir", str(out)]) == 0
    path = out / "nvidia-h100-80gb-hbm3.json"
    entries = load_document(path)["entries"]
    assert {(e["software"].get("device"), e["software"].get("capability")) for e in entries.values()} == {
        ("NVIDIA H100 80GB HBM3", "9.0")}
    capsys.readouterr()
    assert main(["spread", str(path), str(RUN), "--dry-run"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr()
    assert "other software" not in printed.out + printed.err
    # the cell's values: the exported level and the run
    assert re.search(r"^test_speed\[gpt-amp_bf16\]\s+2\s", printed.out, re.MULTILINE), printed.out
