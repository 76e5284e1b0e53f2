"""The table dev/two_nodes.sh prints last, from its runs' benchmark JSONs (NN-<kind>.json, in run order):

    python dev/dist_table.py gpu-run-out/two-nodes/runs [NCCL debug logs ...]

Per kind of run (sockets, slowed, nvlink, standalone-xN), the last run's distributed cells: the mode's device
step time, the device-time speedup with the tolerance it was held to (learned from the earlier runs of the
history) and its verdict, and the scaling efficiency in device time and wall clock; then fp32 / bf16_hook /
fp16_hook device step times over sockets against NVLink; then what the NCCL debug logs say of the transport.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# this checkout's package, not an installed copy of another checkout's
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampbench.results import FP32_SIDE, MODE_SIDE, DistributedRecord, load_run  # noqa: E402
from ampbench.results.ratios import DEVICE_SCALING, DIST_DEVICE, SCALING  # noqa: E402


def last_runs(folder: Path) -> dict[str, list[DistributedRecord]]:
    """The distributed cells of the last run of each kind, by kind."""
    runs: dict[str, Path] = {}
    for path in sorted(folder.glob("*.json")):
        runs[path.stem.split("-", 1)[1]] = path
    return {kind: load_run(p).of_kind(DistributedRecord) for kind, p in runs.items()}


def _f(value, spec: str, suffix: str = "") -> str:
    return f"{value:{spec}}{suffix}" if isinstance(value, (int, float)) else "-"


def cell_table(kind: str, cells: list[DistributedRecord]) -> list[str]:
    head = f"{'cell':44} {'device ms':>9} {'fp32 ms':>8} {'device speedup':>14} {'tolerance':>9} {'verdict':>11} " \
           f"{'eff device':>10} {'eff wall':>8}"
    lines = [f"== {kind} ({len(cells)} cells)", head]
    for c in sorted(cells, key=lambda c: c.test_id):
        device = c.ratio(DIST_DEVICE)
        lines.append(f"{c.test_id:44} {_f(device.side(MODE_SIDE).step_ms, '.2f'):>9} "
                     f"{_f(device.side(FP32_SIDE).step_ms, '.2f'):>8} "
                     f"{_f(device.speedup, '.4f', 'x'):>14} {_f(device.tolerance, '.2%'):>9} "
                     f"{str(c.verdict_of(DIST_DEVICE)):>11} "
                     f"{_f(c.ratio(DEVICE_SCALING).speedup, '.1%'):>10} {_f(c.ratio(SCALING).speedup, '.1%'):>8}")
    return lines


def transport_table(sockets: list[DistributedRecord], nvlink: list[DistributedRecord]) -> list[str]:
    """Device step times of each comm variant over sockets and over NVLink: does compression pay?"""
    by = {(c.model, c.mode, c.comm): c for c in nvlink}
    lines = ["== device step ms, sockets (two nodes) against NVLink (one node)",
             f"{'model mode':24} {'comm':10} {'sockets':>9} {'NVLink':>9} {'sockets/NVLink':>14}"]
    for c in sorted(sockets, key=lambda c: (c.model, c.mode, c.comm)):
        other = by.get((c.model, c.mode, c.comm))
        s = c.ratio(DIST_DEVICE).side(MODE_SIDE).step_ms
        n = other.ratio(DIST_DEVICE).side(MODE_SIDE).step_ms if other else None
        ratio = s / n if isinstance(s, (int, float)) and isinstance(n, (int, float)) and n else None
        lines.append(f"{c.model + ' ' + c.mode:24} {c.comm:10} {_f(s, '.2f'):>9} {_f(n, '.2f'):>9} "
                     f"{_f(ratio, '.2f', 'x'):>14}")
    return lines


def transport_lines(logs: list[Path]) -> list[str]:
    """How NCCL's channels connected, from its debug logs (NCCL_DEBUG=INFO, subsystems INIT and NET)."""
    if not logs:
        return []
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    via = sorted(set(re.findall(r"via (\S+)", text)))
    nets = sorted(set(re.findall(r"Using network (\S+)", text)))
    return ["== NCCL transport (debug logs of the runs over sockets)",
            f"networks: {', '.join(nets) or 'none named'}; channels via: {', '.join(via) or 'none named'}"]


def main(argv: list[str]) -> int:
    runs = last_runs(Path(argv[0]))
    lines: list[str] = []
    for kind, cells in runs.items():
        lines += cell_table(kind, cells) + [""]
    if "sockets" in runs and "nvlink" in runs:
        lines += transport_table(runs["sockets"], runs["nvlink"]) + [""]
    lines += transport_lines([Path(p) for p in argv[1:] if Path(p).is_file()])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
