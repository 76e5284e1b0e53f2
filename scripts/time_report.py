"""How long `ampbench report --compare` takes on a full-tier run (84 speed, 84 memory and the
convergence cells), on this machine: load, compare, render, write, as the CLI does.

    python3 -m scripts.time_report [REPEATS]
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ampbench.compare import compare_runs
from ampbench.report import build_report, load_run, write_report

FIXTURES = Path(__file__).parent.parent / "tests" / "data" / "make_fixtures.py"


def main(argv: list[str]) -> int:
    repeats = int(argv[0]) if argv else 5
    spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES)
    fixtures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "full.json"
        path.write_text(json.dumps(fixtures.full_tier_run()))
        times = []
        for i in range(repeats):
            t0 = time.perf_counter()
            run = load_run(path)
            write_report(Path(tmp) / f"report{i}", build_report(run, compare_runs(run, run)))
            times.append(time.perf_counter() - t0)
    print(f"full-tier report ({len(run.cells)} cells) with --compare: median {statistics.median(times):.2f} s, "
          f"max {max(times):.2f} s over {repeats} runs (target: under 10 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
