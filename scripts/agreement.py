"""Do independent runs of the speed tests agree? For every speed cell in all given runs: the spread of
its speedup (max/min - 1), and for every pair of runs whether their intervals overlap: the run's own
99% interval (speedup_low/high) and the interval across runs (speedup_across_low/high, where the
baseline had a between-run spread).

    python3 -m scripts.agreement run1.json run2.json [run3.json ...]

Exit status 0 when every pair's across-runs intervals overlap, 1 when one does not, 2 on bad input.
"""

from __future__ import annotations

import itertools
import sys

from ampbench.results import RunError, SpeedRecord, load_run


def _own(cell: SpeedRecord) -> tuple[float, float] | None:
    est = cell.estimate()
    return (est.low, est.high) if est is not None else None


def _overlap(a: tuple[float, float] | None, b: tuple[float, float] | None) -> bool | None:
    return None if a is None or b is None else a[0] <= b[1] and b[0] <= a[1]


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        runs = [load_run(p) for p in argv]
    except RunError as exc:
        print(f"agreement: {exc}", file=sys.stderr)
        return 2
    cells = [{c.test_id: c for c in run.of_kind(SpeedRecord) if c.speedup} for run in runs]
    common = [t for t in cells[0] if all(t in c for c in cells[1:])]
    if not common:
        print("agreement: no speed cell is in every run", file=sys.stderr)
        return 2
    intervals = {"own": _own, "across": SpeedRecord.across_runs}
    totals = {kind: [0, 0] for kind in intervals}
    print(f"{'test':42s} {'spread':>7s}  own-interval pairs  across-runs pairs  speedups")
    for test_id in common:
        row = [c[test_id] for c in cells]
        counts, disjoint = {}, False
        for kind, interval in intervals.items():
            known = [v for a, b in itertools.combinations(row, 2)
                     if (v := _overlap(interval(a), interval(b))) is not None]
            counts[kind] = f"{sum(known)}/{len(known)}" if known else "-"
            totals[kind][0] += sum(known)
            totals[kind][1] += len(known)
            disjoint = disjoint or (kind == "across" and not all(known))
        speedups = [c.speedup for c in row]
        print(f"{test_id:42s} {max(speedups) / min(speedups) - 1:7.1%}  {counts['own']:>18s}  {counts['across']:>17s}  "
              + " ".join(f"{s:.3f}" for s in speedups) + ("  DISJOINT" if disjoint else ""))
    spreads = sorted(max(c[t].speedup for c in cells) / min(c[t].speedup for c in cells) - 1 for t in common)
    print(f"\n{len(common)} cells in {len(runs)} runs; median spread {spreads[len(spreads) // 2]:.1%}")
    for kind, (agree, pairs) in totals.items():
        print(f"{kind} intervals overlap in {agree} of {pairs} cell pairs")
    across_agree, across_pairs = totals["across"]
    return 0 if across_pairs and across_agree == across_pairs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
