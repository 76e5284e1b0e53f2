"""`ampbench history changes` on a store: a controlled 1.5% slowdown of one mode from run k on is listed
at run k, with the runs around it, what differs and the added kernel; an unchanged cell is not listed."""

from __future__ import annotations

import random

from ampbench.cli import main
from ampbench.history.store import open_history
from history_runs import speed_record, speed_run

GEMM = {"name": "sm90_gemm", "ms": 1.0}
SPIN = {"name": "spin_kernel", "ms": 0.015}


def _series(history, runs: int = 10, k: int = 6) -> None:
    rng = random.Random(7)
    for i in range(runs):
        slowed = i >= k - 1  # run k (1-based) is the first slowed run
        noise = lambda: rng.gauss(0.0, 0.002)  # noqa: E731 - 0.2% between runs, as an H100's cells
        cells = [speed_record("gpt", "amp_bf16", 5.65 * (1 - 0.015 * slowed) * (1 + noise()), device_method="graph",
                              kernels=[GEMM, SPIN] if slowed else [GEMM]),
                 speed_record("gpt", "bf16", 6.63 * (1 + noise()), device_method="graph", kernels=[GEMM])]
        history.append(speed_run(f"run{i + 1:02d}", cells, at=i, torchao="0.17" if slowed else "0.16"))


def test_a_slowdown_from_run_k_is_listed_at_k_and_nothing_else(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    _series(open_history(url))
    assert main(["history", "changes", "--history", url, "--figure", "all"]) == 0
    out = capsys.readouterr().out
    assert "test_speed[gpt-amp_bf16] device_speedup" in out and "from run #6 of 10" in out
    assert "before: #5 run run05" in out and "after: #6 run run06" in out
    assert "torchao 0.16 -> 0.17" in out and "spin_kernel" in out  # what differs, and the added kernel
    assert "gpt-bf16" not in out  # the unchanged mode is no change
    # the cell's device-time and wall-clock series both moved (this record's two speedups are one figure)
    assert out.count("test_speed[gpt-amp_bf16] ") == 2 and "test_speed[gpt-amp_bf16] speedup" in out
    last = out.rstrip().splitlines()[-1]
    assert last.startswith("ampbench: 2 changes in device_speedup, versus_speedup, device_scaling_efficiency, "
                           "speedup") and "history.sqlite" in last


def test_changes_of_a_store_that_is_not_there_is_an_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "nope.sqlite"
    assert main(["history", "changes", "--history", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


def test_a_gpu_the_history_holds_no_series_of_is_warned_about(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'history.sqlite'}"
    _series(open_history(url), runs=3)
    assert main(["history", "changes", "--history", url, "--gpu", "NVIDIA H10O 80GB HBM3"]) == 0
    printed = capsys.readouterr()
    assert ("ampbench: warning: --gpu 'NVIDIA H10O 80GB HBM3': " in printed.err
            and "holds no series of it; it holds 'NVIDIA H100 80GB HBM3'" in printed.err), printed.err
    assert main(["history", "changes", "--history", url, "--gpu", "NVIDIA H100 80GB HBM3"]) == 0
    assert "warning" not in capsys.readouterr().err
