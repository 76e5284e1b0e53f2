"""``ampbench baselines record``: N runs, each a process of its own, into the recording's history, then the
file written from it with learned tolerances; an interrupted recording resumes; a run that stops it says so;
SIGTERM and SIGINT end the run under way, which is not learned; one recorder at a time uses a folder; runs of
another GPU or software are named and left out. Each run here is a stand-in process that appends a saved
H100 run, its device speedups moved by a little noise, since the CPU smoke pass appends nothing to a history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ampbench import children
from ampbench.cli import main, record

ROOT = Path(__file__).resolve().parent.parent
SAVED = ROOT / "tests" / "data" / "h100_speed_device.json"
FAKE_RUN = """
import json, random, subprocess, sys
from pathlib import Path
out, history, run = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
doc = json.loads(Path(sys.argv[4]).read_text())
rng = random.Random(run)
doc["machine_info"]["ampbench"].update(run_id=f"record-test-{run}", label=f"record-{run}")
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
    assert "run 3 of 3: 35 passed" in text and "learned from 3 runs (record-1, record-2, record-3) written to" in text
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


# a run that appends its run to the history as a stand-in pytest does, then sends its recorder a signal and
# sleeps on, as a pytest run still measuring would: the recorder must end it and forget the run
STOPPING_RUN = """
import os, pathlib, signal, subprocess, sys, time
pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
subprocess.run(sys.argv[3:], check=True)
os.kill(os.getppid(), int(sys.argv[2]))
time.sleep(60)
"""


def _stop_at(monkeypatch, tmp_path, stop: int, signum: int) -> Path:
    """Runs as `fake_runs` makes them, but run `stop` signals the recorder; the file its pid is written to."""
    pid_file = tmp_path / "stopped.pid"
    fake = record._pytest_command

    def command(args, run, empty):
        cmd = fake(args, run, empty)
        if run != stop or pid_file.exists():  # it stops once; the command run again resumes
            return cmd
        return [sys.executable, "-c", STOPPING_RUN, str(pid_file), str(int(signum)), *cmd]

    monkeypatch.setattr(record, "_pytest_command", command)
    return pid_file


def _runs_of(work: Path) -> list[str]:
    from ampbench.history.store import open_history

    history = open_history(str(work / "history.sqlite"), create=False)
    try:
        return sorted(r.label for r in history.runs())
    finally:
        history.release()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_sigterm_ends_the_run_under_way_which_is_not_learned_and_the_same_command_resumes(tmp_path, fake_runs,
                                                                                        monkeypatch, capsys):
    work, out = tmp_path / "rec", tmp_path / "baselines"
    pid_file = _stop_at(monkeypatch, tmp_path, 2, signal.SIGTERM)
    handler = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(children, "GRACE", 60.0)
    started = time.monotonic()
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out)]) == 143
    assert time.monotonic() - started < 30  # the sleeping run ended on SIGTERM, not after the grace on SIGKILL
    assert _gone(int(pid_file.read_text()))
    err = capsys.readouterr().err
    assert "run 2 of 3 stopped by SIGTERM" in err and "nothing of it is learned" in err
    assert "the run it had appended, record-test-2, is taken out of" in err
    assert "The 1 run before it stay" in err and "the same command resumes" in err
    assert _runs_of(work) == ["record-1"] and not out.exists()
    assert signal.getsignal(signal.SIGTERM) == handler  # the handler before is back
    fake_runs.clear()
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out)]) == 0
    assert fake_runs == [2, 3]
    assert "learned from 3 runs (record-1, record-2, record-3)" in capsys.readouterr().out


def test_sigint_before_any_run_reached_the_history_exits_130(tmp_path, fake_runs, monkeypatch, capsys):
    work = tmp_path / "rec"
    pid_file = _stop_at(monkeypatch, tmp_path, 1, signal.SIGINT)
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(tmp_path)]) == 130
    assert _gone(int(pid_file.read_text()))
    assert "run 1 of 3 stopped by SIGINT" in capsys.readouterr().err
    assert _runs_of(work) == []


def test_a_second_recorder_into_a_folder_in_use_is_refused_and_a_dead_holder_never_blocks(tmp_path, capsys):
    work = tmp_path / "rec"
    work.mkdir()
    holds = ("import sys, time; from pathlib import Path; from ampbench.cli.record import hold; "
             "hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", holds, str(work)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert main(["baselines", "record", "--dir", str(work), "--baseline-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert f"--dir {work} is in use" in err and f"(pid {holder.pid})" in err and "give another --dir" in err
    finally:
        holder.kill()
        holder.wait()
    os.close(record.hold(work))  # the OS let go of the dead recorder's lock


def _seed(work: Path, tmp_path: Path, name: str, when: str, **machine) -> None:
    """A saved H100 run, its machine changed by `machine`, imported into the recording's history."""
    doc = json.loads(SAVED.read_text())
    doc["machine_info"]["ampbench"].update(run_id=f"seed-{name}", label=name, **machine)
    doc["datetime"] = when
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    assert main(["history", "import", str(path), "--history", str(work / "history.sqlite")]) == 0


def _most_runs(out: Path) -> int:
    """The most runs any entry of the H100's file was learned from."""
    entries = json.loads((out / "nvidia-h100-80gb-hbm3.json").read_text())["entries"]
    return max(e["figures"].get("between_run_count", 0) for e in entries.values())


def test_runs_of_another_gpu_or_software_are_named_and_left_out_unless_asked_for(tmp_path, fake_runs, capsys):
    work, out = tmp_path / "rec", tmp_path / "baselines"
    _seed(work, tmp_path, "a100", "2026-11-20T10:00:00+00:00", device="NVIDIA A100-SXM4-80GB",
          gpu_slug="nvidia-a100-sxm4-80gb")
    _seed(work, tmp_path, "older-torch", "2026-11-21T10:00:00+00:00", torch="2.10.0+cu130", driver="575.57.08")
    capsys.readouterr()
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out)]) == 0
    assert fake_runs == [3, 4, 5]  # the seeded runs count for nothing, and no run's files are written over
    text = capsys.readouterr().out
    assert "ran on NVIDIA A100-SXM4-80GB, not NVIDIA H100 80GB HBM3" in text and "--gpu 'NVIDIA A100-SXM4-80GB'" in text
    assert ("run older-torch (seed-older-torch) of" in text and "torch 2.10.0+cu130, not 2.11.0+cu130" in text
            and "driver 575.57.08, not 580.159.04" in text and "--include-other-runs uses it" in text)
    assert "learned from 3 runs (record-3, record-4, record-5)" in text and _most_runs(out) == 3

    fake_runs.clear()
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(out),
                 "--include-other-runs"]) == 0
    assert fake_runs == []  # the recording has its runs: the file is written again from them
    text = capsys.readouterr().out
    assert "4 runs recorded already" in text and "left out: run older-torch" not in text
    assert "learned from 4 runs (older-torch, record-3, record-4, record-5)" in text and _most_runs(out) == 4
    assert "A100" in text  # another GPU model's run never feeds this file


def test_software_that_changes_during_the_recording_stops_it(tmp_path, fake_runs, monkeypatch, capsys):
    doc = json.loads(SAVED.read_text())
    doc["machine_info"]["ampbench"]["torch"] = "2.12.0+cu130"
    upgraded = tmp_path / "upgraded.json"
    upgraded.write_text(json.dumps(doc))
    fake = record._pytest_command
    monkeypatch.setattr(record, "_pytest_command",
                        lambda args, run, empty: [*fake(args, run, empty)[:-1], str(upgraded if run == 2 else SAVED)])
    work = tmp_path / "rec"
    assert main(["baselines", "record", "--runs", "3", "--dir", str(work), "--baseline-dir", str(tmp_path)]) == 2
    assert fake_runs == [1, 2]
    err = capsys.readouterr().err
    assert "run 2 ran on other software (torch 2.12.0+cu130, not 2.11.0+cu130): the GPU or software changed" in err
