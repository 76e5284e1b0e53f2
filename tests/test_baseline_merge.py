"""`ampbench baselines merge`: baseline files of one GPU recorded in parts, merged test by test with the
latest recording winning, and the files it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ampbench.baselines.file import SCHEMA_VERSION, latest_entries, load_document
from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK

H100 = "NVIDIA H100 80GB HBM3"


def entry(speedup: float, recorded: str) -> dict:
    return {"figures": {"speedup": speedup, "ci_low": speedup * 0.99, "ci_high": speedup * 1.01},
            "software": {"torch": "2.11.0"}, "recorded": recorded}


def write(path: Path, entries: dict, gpu: str = H100) -> Path:
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "gpu": gpu, "entries": entries}))
    return path


# the committed file, and two runs that each started from it and re-recorded one model
COMMITTED = {"test_speed[mlp-amp_bf16]": entry(1.5, "2026-01-01T00:00:00Z"),
             "test_speed[gpt-amp_bf16]": entry(2.5, "2026-01-01T00:00:00Z"),
             "test_speed[resnet50-amp_bf16]": entry(2.4, "2026-01-01T00:00:00Z")}
PART_1 = {**COMMITTED, "test_speed[mlp-amp_bf16]": entry(1.6, "2026-02-01T10:00:00Z")}
PART_2 = {**COMMITTED, "test_speed[gpt-amp_bf16]": entry(2.7, "2026-02-01T11:00:00Z"),
          "test_speed[lstm_lm-amp_bf16]": entry(2.0, "2026-02-01T11:00:00Z")}


def test_latest_recording_wins_and_nothing_is_lost():
    merged, given = latest_entries([{"entries": COMMITTED}, {"entries": PART_1}, {"entries": PART_2}])
    speedups = {t: e["figures"]["speedup"] for t, e in merged.items()}
    assert speedups == {"test_speed[gpt-amp_bf16]": 2.7, "test_speed[lstm_lm-amp_bf16]": 2.0,
                        "test_speed[mlp-amp_bf16]": 1.6, "test_speed[resnet50-amp_bf16]": 2.4}
    assert list(merged) == sorted(merged) and given == [1, 1, 2]


def test_merge_writes_the_baseline_file(tmp_path, capsys):
    base = write(tmp_path / "h100.json", COMMITTED)
    parts = [write(tmp_path / "part1.json", PART_1), write(tmp_path / "part2.json", PART_2)]
    assert main(["baselines", "merge", str(base), *map(str, parts)]) == EXIT_OK
    merged = load_document(base)
    assert merged["gpu"] == H100 and len(merged["entries"]) == 4
    assert merged["entries"]["test_speed[mlp-amp_bf16]"] == PART_1["test_speed[mlp-amp_bf16]"]
    assert f"4 entries: 1 from {base}, 1 from {parts[0]}, 2 from {parts[1]}" in capsys.readouterr().out


def test_dry_run_writes_nothing_and_a_missing_baseline_is_created(tmp_path):
    base = write(tmp_path / "h100.json", COMMITTED)
    before = base.read_text()
    part = write(tmp_path / "part1.json", PART_1)
    assert main(["baselines", "merge", "--dry-run", str(base), str(part)]) == EXIT_OK
    assert base.read_text() == before
    new = tmp_path / "new" / "h100.json"
    assert main(["baselines", "merge", str(new), str(part)]) == EXIT_OK
    assert load_document(new)["entries"] == PART_1


def test_files_of_different_gpus_are_refused(tmp_path, capsys):
    base = write(tmp_path / "h100.json", COMMITTED)
    before = base.read_text()
    other = write(tmp_path / "a100.json", PART_1, gpu="NVIDIA A100-SXM4-80GB")
    assert main(["baselines", "merge", str(base), str(other)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{base} ({H100})" in err and f"{other} (NVIDIA A100-SXM4-80GB)" in err
    assert base.read_text() == before


def test_a_bad_file_names_itself_and_the_field(tmp_path, capsys):
    base = write(tmp_path / "h100.json", COMMITTED)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 99, "gpu": H100, "entries": {}}))
    assert main(["baselines", "merge", str(base), str(bad)]) == EXIT_BAD_INPUT
    assert f"baseline file {bad}: field 'schema_version'" in capsys.readouterr().err


def test_help_says_which_entry_wins(capsys):
    with pytest.raises(SystemExit) as info:
        main(["baselines", "merge", "--help"])
    assert info.value.code == 0 and "the entry recorded last wins" in " ".join(capsys.readouterr().out.split())
