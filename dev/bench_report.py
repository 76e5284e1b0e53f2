"""Time `ampbench report` (and `ampbench compare`) on a synthetic run of N cells.

    python dev/bench_report.py 10000 100000          # report of each size
    python dev/bench_report.py 10000 --compare       # report --compare against a second run, and compare

A run of N cells is made from tests/data/synthetic_h100_device.json (speed cells with device time,
memory and convergence cells) by repeating its cells under new model names (`resnet50_c0012`), so
it is valid for ampbench.results and reads like a suite with very many models. The second run of
--compare has every speedup a little lower, so the comparison has rows of every verdict.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "synthetic_h100_device.json"


def synthetic_run(cells: int, scale: float = 1.0, source: Path = SOURCE) -> dict:
    """A run of `cells` cells: the source's cells again and again, copy k under models named `<model>_c<k>`;
    `scale` multiplies every speedup figure (and its interval)."""
    document = json.loads(source.read_text())
    cells_of = document["benchmarks"]
    benches = []
    for i in range(cells):
        copy_no, bench = divmod(i, len(cells_of))
        bench = copy.deepcopy(cells_of[bench])
        info = bench["extra_info"]
        model = f"{info['model']}_c{copy_no:04d}"
        bench["name"] = bench["name"].replace(f"[{info['model']}-", f"[{model}-")
        bench["fullname"] = bench["fullname"].replace(f"[{info['model']}-", f"[{model}-")
        info["model"] = model
        for key in ("speedup", "speedup_low", "speedup_high", "device_speedup", "device_speedup_low",
                    "device_speedup_high"):
            if isinstance(info.get(key), (int, float)):
                info[key] *= scale
        benches.append(bench)
    return dict(document, benchmarks=benches)


def timed(command: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, exit status, stderr) of one command, run with this checkout first on the
    path; the CPU seconds tell its cost apart from other work on a shared machine."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.returncode, done.stderr.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sizes", type=int, nargs="+", metavar="N", help="cells per run")
    parser.add_argument("--compare", action="store_true", help="also time report --compare and compare")
    parser.add_argument("--source", type=Path, default=SOURCE, metavar="RUN.json",
                        help=f"the run whose cells are repeated (default: {SOURCE.relative_to(ROOT)}; "
                             "tests/data/h100_speed_device.json for speed cells only)")
    args = parser.parse_args()
    ampbench = [sys.executable, "-m", "ampbench"]
    with tempfile.TemporaryDirectory(prefix="bench_report.") as tmp:
        for n in args.sizes:
            run, old = Path(tmp) / f"run{n}.json", Path(tmp) / f"old{n}.json"
            run.write_text(json.dumps(synthetic_run(n, source=args.source)))
            commands = {"report": [*ampbench, "report", str(run), "-o", f"{tmp}/r{n}"]}
            if args.compare:
                old.write_text(json.dumps(synthetic_run(n, scale=1.03, source=args.source)))
                commands["report --compare"] = [*ampbench, "report", str(run), "--compare", str(old),
                                                "-o", f"{tmp}/c{n}"]
                commands["compare"] = [*ampbench, "compare", str(old), str(run)]
            for name, command in commands.items():
                wall, cpu, status, err = timed(command)
                print(f"{name:17s} N={n:<7d} {wall:7.1f} s wall {cpu:7.1f} s CPU  exit {status}", flush=True)
                if status not in (0, 1):
                    print(err, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
