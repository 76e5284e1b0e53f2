"""``ampbench baselines record``: N runs, each a process of its own, into the recording's history, then the
file written from it with learned tolerances; an interrupted recording resumes; a run that stops it says so.
Each run here is a stand-in process that appends a saved H100 run, its device speedups moved by a little
noise, since the CPU smoke pass appends nothing to a history."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ampbench.cli import main, record

ROOT = Path(__file__).resolve().parent.parent
SAVED = ROOT / "tests" / "data" / "h100_speed_device.json"
FAKE_RUN = """
import json, random, subprocess, sys
from pathlib import Path
out, history, run = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
doc = json.loads(Path(sys.argv[4]).read_text())
rng = random.Random(run)
doc["machine_info"]["ampbench"]["run_id"] = f"record-test-{run}"
doc["datetime"] = f"2026-11-23T{10 + run:02d}:00:00+00:00"
for b in doc["benchmarks"]:
    info = b["extra_info"]
    f = 1 + 0.001 * rng.gauss(0, 1)
    device = info["ratios"].get("device", {}) if "ratios" in info else None
    for key in ("speedup", "speedup_low", "speedup_high") if device else ():
        device[key] = device[key] * f if device.get(key) else device.get(key)
    for key in ("device_speedup", "device_speedup_low", "device_speedup_high") if device is None else ():
        if info.get(key):
            info[key] *= f
out.write_text(json.dumps(doc))
print("== 35 passed in 1.00s ==", flush=True)
sys.exit(subprocess.run([sys.executable, "-m", "ampbench", "history", "import", str(out),
                        "--history", history]).returncode)
"""


@pytest.fixture
def fake_runs(monkeypatch, tmp_path):
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    calls = []

    def command(args, run, empty):
        calls.append(run)
        return [sys.executable, str(script), str(args.dir / f"run-{run}.json"), str(args.dir / "history.sqlite"),
                str(run), str(SAVED)]

    monkeypatch.setattr(record, "_pytest_command", command)
    return calls


def test_record_runs_n_processes_then_writes_learned_tolerances(tmp_path, fake_runs, capsys):
    work, out = tmp_path / "rec", tmp_path / "baselines"
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out)]) == 0
    assert fake_runs == [1, 2, 3]
    text = capsys.readouterr().out
    assert "run 3 of 3: 35 passed" in text and "learned from 3 runs written to" in text
    entries = json.loads((out / "nvidia-h100-80gb-hbm3.json").read_text())["entries"]
    device = [e["figures"]
              for t, e in entries.items() if t.startswith("test_speed[") and "device_tolerance" in e["figures"]]
    assert device and all(f["device_between_run_count"] == 3 for f in device)
    assert all(f["device_tolerance"] < 0.03 for f in device)  # learned, not the unlearned 3%


def test_an_interrupted_recording_resumes_from_the_runs_its_history_holds(tmp_path, fake_runs, capsys):
    work, out = tmp_path / "rec", tmp_path / "baselines"
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out)]) == 0
    fake_runs.clear()
    assert main(["baselines", "record", "--runs", "4", "--dir", str(work), "--baseline-dir", str(out)]) == 0
    assert fake_runs == [4]
    assert "3 runs recorded already" in capsys.readouterr().out


def test_a_run_that_does_not_reach_the_history_stops_the_recording_and_keeps_the_runs_before(tmp_path, monkeypatch,
                                                                                           capsys):
    monkeypatch.setattr(record, "_pytest_command",
                        lambda args, run, empty: [sys.executable, "-c", "print('no GPU'); raise SystemExit(4)"])
    work = tmp_path / "rec"
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "run 1 stopped the recording (a usage error, pytest exit 4)" in err and "resumes" in err


def test_the_runs_are_checked_and_each_run_is_a_gpu_run_of_its_own(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["baselines", "record", "--runs", "2"])
    assert "must lie in [3, 100] (a spread needs three runs), got 2" in capsys.readouterr().err
    from ampbench.cli.args import build_parser

    args = build_parser().parse_args(["baselines", "record", "--dir", str(tmp_path), "--", "--perf-models", "gpt"])
    cmd = record._pytest_command(args, 2, tmp_path / "none")
    assert cmd[2:4] == ["pytest", "perf/test_speed.py"] and "--perf-require-gpu" in cmd
    assert cmd[-2:] == ["--perf-models", "gpt"] and "record-2" in cmd
