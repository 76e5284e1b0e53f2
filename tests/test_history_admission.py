"""What the history refuses to file from a saved run, each refusal one line naming the file, nothing of it
written: a run that names no GPU model, no usable time or one in the future, no cell, a kind or mode this
version does not know, a baseline stem its GPU's name does not make, and another run carrying a run id
the history holds. An integer no figure can be is refused by every command that reads a run, and a store
in memory by every command that takes a store."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ampbench.cli import main
from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.history.store import open_history

DATA = Path(__file__).parent / "data"
RUN = DATA / "h100_speed_device.json"


def _run(tmp_path: Path, name: str, change=None) -> Path:
    """tests/data/h100_speed_device.json with its own run id, changed by `change` (the document, in place)."""
    document = json.loads(RUN.read_text())
    document["machine_info"]["ampbench"]["run_id"] = "a1b2c3d4-0000-4000-8000-000000000001"
    if change is not None:
        change(document)
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def _import(tmp_path: Path, capsys, *paths: Path) -> tuple[int, str, str]:
    status = main(["history", "import", *map(str, paths), "--history", str(tmp_path / "h.sqlite")])
    out, err = capsys.readouterr()
    return status, out, err


def _machine(document: dict) -> dict:
    return document["machine_info"]["ampbench"]


def _cells(document: dict) -> list[dict]:
    return [b["extra_info"] for b in document["benchmarks"]]


REFUSED = {
    "no GPU name": (lambda d: [_machine(d).pop(k) for k in ("device", "gpu_slug")],
                    "machine_info.ampbench.device is missing: the run names no GPU model"),
    "a device index": (lambda d: _machine(d).update(device="cuda:0", gpu_slug="cuda-0"),
                       "machine_info.ampbench.device 'cuda:0' is a device index, not a GPU model's name"),
    "no datetime": (lambda d: d.pop("datetime"), "holds no datetime"),
    "a garbage datetime": (lambda d: d.update(datetime="last tuesday"),
                           "its datetime 'last tuesday' is no ISO 8601 time"),
    "year 9999": (lambda d: d.update(datetime="9999-01-01T00:00:00+00:00"),
                  "its datetime 9999-01-01T00:00:00+00:00 lies in the future"),
    "no cell": (lambda d: d.update(benchmarks=[]), "holds no cell"),
    "an unknown kind": (lambda d: _cells(d)[0].update(kind="bandwidth"),
                        "cells of unknown kind bandwidth; the history files speed, memory, convergence"),
    "an A/B run": (lambda d: d.update(benchmarks=json.loads((DATA / "paired_h100.json").read_text())["benchmarks"]),
                   "is an A/B run (ampbench ab): its cells hold head over base, not one tree's figures"),
    "an unknown mode": (lambda d: _cells(d)[1].update(mode="fp64"),
                        "cells of unknown mode fp64; the modes are fp32, tf32, amp_fp16"),
    "a slug outside the folder": (lambda d: _machine(d).update(gpu_slug="../../etc/evil"),
                                  "gpu_slug '../../etc/evil' is no file stem"),
    "another GPU's slug": (lambda d: _machine(d).update(gpu_slug="nvidia-a100-sxm4-80gb"),
                           "gpu_slug 'nvidia-a100-sxm4-80gb' is not the stem of its GPU 'NVIDIA H100 80GB HBM3'"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_run_the_history_cannot_file_is_refused_naming_why(tmp_path, capsys, case):
    change, expected = REFUSED[case]
    bad = _run(tmp_path, "bad.json", change)
    status, out, err = _import(tmp_path, capsys, bad)
    assert status == EXIT_BAD_INPUT
    assert err.startswith(f"ampbench: error: {bad}: ") and expected in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "nothing imported" in out and not (tmp_path / "h.sqlite").exists()


def test_a_run_of_today_in_another_time_zone_is_filed(tmp_path, capsys):
    ahead = (datetime.now(timezone.utc) + timedelta(hours=13)).astimezone(timezone(timedelta(hours=14)))
    good = _run(tmp_path, "good.json", lambda d: d.update(datetime=ahead.isoformat()))
    assert _import(tmp_path, capsys, good)[0] == EXIT_OK


def test_another_run_under_a_held_run_id_is_an_error_naming_both(tmp_path, capsys):
    first = _run(tmp_path, "first.json")
    assert _import(tmp_path, capsys, first)[0] == EXIT_OK

    def slower(document: dict) -> None:
        cell = _cells(document)[3]
        for name in ("device_speedup", "device_speedup_low", "device_speedup_high"):
            cell[name] *= 0.99

    other = _run(tmp_path, "other.json", slower)
    status, out, err = _import(tmp_path, capsys, other)
    assert status == EXIT_BAD_INPUT
    assert f"{other}: run id a1b2c3d4-0000-4000-8000-000000000001 is already in the history" in err
    assert "as another run (first.json, 2026-11-23T09:03:34)" in err
    assert "1 figure differs, e.g. device_speedup of test_speed[mlp-amp_bf16]" in err
    assert "0 runs imported" in out and "1 unusable" in out
    # the same run again, under another file name, is no clash: it is there already
    again = tmp_path / "copy.json"
    again.write_text(json.dumps(json.loads(first.read_text()), indent=2))
    status, out, err = _import(tmp_path, capsys, again)
    assert status == EXIT_OK and "already in the history" in out and err == ""
    assert open_history(str(tmp_path / "h.sqlite")).counts()[0] == 1


def test_another_run_on_another_gpu_under_a_held_run_id_names_the_gpus(tmp_path, capsys):
    assert _import(tmp_path, capsys, _run(tmp_path, "first.json"))[0] == EXIT_OK
    h200 = _run(tmp_path, "h200.json", lambda d: _machine(d).update(device="NVIDIA H200", gpu_slug="nvidia-h200"))
    status, _, err = _import(tmp_path, capsys, h200)
    assert status == EXIT_BAD_INPUT and "GPU 'NVIDIA H100 80GB HBM3' there, 'NVIDIA H200' here" in err


# -- an integer no figure can be ----------------------------------------------------------------------

def _huge(tmp_path: Path, digits: int) -> Path:
    text = RUN.read_text()
    batch = '"batch_size": ' + json.dumps(_cells(json.loads(text))[0]["batch_size"])
    assert batch in text
    path = tmp_path / f"huge{digits}.json"
    path.write_text(text.replace(batch, '"batch_size": ' + "9" * digits, 1))
    return path


@pytest.mark.parametrize("digits", [5000, 400])
def test_an_overlong_integer_is_a_one_line_error_naming_the_file_in_every_reader(tmp_path, capsys, digits):
    huge = _huge(tmp_path, digits)
    commands = {"report": ["report", str(huge), "-o", str(tmp_path / "report")],
                "compare": ["compare", str(RUN), str(huge)],
                "export": ["export", str(huge), "--format", "bmf"],
                "import": ["history", "import", str(huge), "--history", str(tmp_path / "h.sqlite")]}
    for name, argv in commands.items():
        assert main(argv) == EXIT_BAD_INPUT, name
        err = capsys.readouterr().err
        assert f"{huge}: holds an integer of {digits} digits" in err, (name, err)
        assert "Traceback" not in err and "int_max_str_digits" not in err


def test_an_overlong_integer_in_a_baseline_file_names_the_file(tmp_path, capsys):
    document = {"schema_version": 1, "gpu": "NVIDIA H100 80GB HBM3", "entries": {}}
    baseline = tmp_path / "nvidia-h100-80gb-hbm3.json"
    baseline.write_text(json.dumps(document).replace('"schema_version": 1', '"schema_version": ' + "1" * 5000))
    assert main(["baselines", "show", str(baseline)]) == EXIT_BAD_INPUT
    assert f"baseline file {baseline}: field '<file>': holds an integer of 5000 digits" in capsys.readouterr().err


# -- a store in memory ----------------------------------------------------------------------------------

MEMORY = ["sqlite:///:memory:", "sqlite://", "sqlite:///file::memory:?uri=true"]


@pytest.mark.parametrize("store", MEMORY)
@pytest.mark.parametrize("command", ["import", "runs", "report", "baselines export"])
def test_a_store_in_memory_is_refused_by_every_command_that_takes_a_store(tmp_path, capsys, store, command):
    argv = {"import": ["history", "import", str(RUN)], "runs": ["history", "runs"],
            "report": ["report", str(RUN), "-o", str(tmp_path / "report")],
            "baselines export": ["baselines", "export", "--baseline-dir", str(tmp_path / "b")]}[command]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--history", store])
    assert exit_.value.code == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"history store {store!r}: an in-memory SQLite database keeps nothing" in err
    assert "imported" not in err and not (tmp_path / "report").exists()

