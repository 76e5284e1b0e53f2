"""The throttling experiment of dev/clocks_check.sh (GPU only): a second process that loads the GPU with
heavy matmuls during the mode's timed blocks only, and the table of what the speed cells saw.

Three parts:
- a pytest plugin (``-p clock_phases`` with dev/ on PYTHONPATH): where $AMPBENCH_DEV_PHASE_FILE names a
  file, each timed block of a speed cell writes "mode" there while the mode's block runs and "idle"
  otherwise. It wraps the timer's block call; nothing in the package knows of it.
- ``python dev/clock_phases.py load``: the loader, polling that file and running bf16 matmuls on the GPU
  while it reads "mode", until a stop file appears or its time runs out.
- ``python dev/clock_phases.py table RUN.json ...``: per speed cell of each run, its device-time speedup
  and verdict, each side's step time, the rounds flagged, the clocks per side and the energy ratio;
  printed, and written as JSON with --json.

The loader's work shares the GPU with the mode's blocks by time-slicing, so it lengthens their device time
as well as moving the clock or power state; the record's flags and its cycle-space figure tell which.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PHASE_ENV = "AMPBENCH_DEV_PHASE_FILE"
MODE, IDLE = "mode", "idle"


def _write(path: str, phase: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(phase)
    os.replace(tmp, path)  # the loader never reads half a word


def _phase(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return IDLE


def pytest_configure(config) -> None:
    """Mark each timed block's phase in $AMPBENCH_DEV_PHASE_FILE, where it is set."""
    path = os.environ.get(PHASE_ENV)
    if not path:
        return
    from ampbench.speed.timing import PairedTimer

    timed = PairedTimer._timed

    def marked(self, block, times, conditions) -> None:
        _write(path, MODE if times is self.mode_times else IDLE)
        try:
            timed(self, block, times, conditions)
        finally:
            _write(path, IDLE)

    PairedTimer._timed = marked  # type: ignore[method-assign]
    _write(path, IDLE)


def load(phase_file: str, size: int, seconds: float) -> int:
    """Run bf16 matmuls of `size` while the phase file reads "mode"; the bursts run (synchronized) one after
    another, so the load stops within one burst of the phase ending. Returns the bursts run."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    bursts, end = 0, time.monotonic() + seconds
    while time.monotonic() < end and not os.path.exists(f"{phase_file}.stop"):
        if _phase(phase_file) == MODE:
            for _ in range(4):
                a @ b
            torch.cuda.synchronize()
            bursts += 1
        else:
            time.sleep(0.0005)
    return bursts


def table(paths: list[Path]) -> list[dict]:
    """One row per speed cell of each run: what its conditions and verdict say."""
    from ampbench.results import SpeedRecord, load_run
    from ampbench.results.ratios import DEVICE
    from ampbench.results.schema import FP32_SIDE, MODE_SIDE

    rows = []
    for path in paths:
        for cell in load_run(path).of_kind(SpeedRecord):
            device, conditions = cell.ratio(DEVICE), cell.conditions or {}
            rows.append({
                "run": path.stem, "model": cell.model, "mode": cell.mode, "speedup": device.speedup,
                "verdict": str(device.verdict) if device.verdict is not None else None,
                "fp32_step_ms": device.side(FP32_SIDE).step_ms, "mode_step_ms": device.side(MODE_SIDE).step_ms,
                "read": conditions.get("read"), "flagged": conditions.get("flagged"),
                "rounds": len(conditions.get("rounds") or []),
                "clocks": conditions.get("summary") or conditions.get("why_unread"),
                "energy_ratio": cell.energy.ratio if cell.energy is not None else None})
    return rows


def _show(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description="The throttling experiment's loader, and the table of the runs.")
    sub = parser.add_subparsers(dest="command", required=True)
    loader = sub.add_parser("load", help="load the GPU while the phase file reads 'mode'")
    loader.add_argument("--phase-file", required=True)
    loader.add_argument("--size", type=int, default=8192, help="matmul size (default: 8192)")
    loader.add_argument("--seconds", type=float, default=3600.0, help="stop after this long at the latest")
    tab = sub.add_parser("table", help="per speed cell: speedup, verdict, step times, flags, clocks, energy")
    tab.add_argument("runs", nargs="+", type=Path)
    tab.add_argument("--json", type=Path, default=None, help="write the rows here too")
    args = parser.parse_args()
    if args.command == "load":
        print(f"loader: {load(args.phase_file, args.size, args.seconds)} bursts")
        return 0
    rows = table(args.runs)
    for r in rows:
        print(f"{r['run']:<14} {r['model']:<18} {r['mode']:<10} {_show(r['speedup'], '.3f')}x "
              f"{r['verdict'] or '-':<13} "
              f"fp32 {_show(r['fp32_step_ms'], '.3f')} ms mode {_show(r['mode_step_ms'], '.3f')} ms "
              f"flagged {r['flagged'] if r['flagged'] is not None else '-'}/{r['rounds']} "
              f"energy {_show(r['energy_ratio'], '.3f')}x | {r['clocks'] or '-'}")
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
