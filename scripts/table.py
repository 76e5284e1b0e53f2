"""Print a short table of an ampbench benchmark JSON: one line per test, speed cells first.

    python3 -m scripts.table run.json [other.json]   # with a second file, the speedups side by side
"""

from __future__ import annotations

import sys

from ampbench.results import ConvergenceRecord, MemoryRecord, PipelineRecord, Record, SpeedRecord, load_run


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def _speed_line(e: SpeedRecord, other: Record | None) -> str:
    line = (f"{e.test_id:44s} {fmt(e.speedup)}x [{fmt(e.speedup_low)},{fmt(e.speedup_high)}] n={fmt(e.rounds, '<3d')}"
            f" step {fmt(e.step_ms, '.2f')}ms ref {fmt(e.step_ms_ref, '.2f')}ms mem {fmt(e.memory_ratio)}"
            f" tflops {fmt(e.tflops, '.0f')} {e.verdict}")
    if e.across_runs() is not None:
        line += f" across [{fmt(e.speedup_across_low)},{fmt(e.speedup_across_high)}]"
    if isinstance(other, SpeedRecord) and other.estimate() and e.estimate():
        agree = other.speedup_low <= e.speedup_high and e.speedup_low <= other.speedup_high
        line += (f" | run2 {fmt(other.speedup)}x [{fmt(other.speedup_low)},{fmt(other.speedup_high)}]"
                 f" diff {100 * (other.speedup / e.speedup - 1):+.2f}% {'overlap' if agree else 'DISJOINT'}")
    return line


def _figures(e: Record) -> dict:
    if isinstance(e, MemoryRecord):
        return {"memory": e.memory_ratio, "batch": e.max_batch, "batch/fp32": e.max_batch_ratio}
    if isinstance(e, ConvergenceRecord):
        return {"acc": e.accuracy, "fp32 acc": e.accuracy_ref}
    if isinstance(e, PipelineRecord):
        return {"input-bound": e.input_bound}
    return {}


def main(argv: list[str]) -> int:
    first = load_run(argv[0])
    second = {c.test_id: c for c in load_run(argv[1]).cells} if len(argv) > 1 else {}
    for e in first.cells:
        if isinstance(e, SpeedRecord):
            print(_speed_line(e, second.get(e.test_id)))
            continue
        shown = {**_figures(e), "verdict": e.verdict}
        print(f"{e.test_id:44s} " + " ".join(f"{k}={round(v, 4) if isinstance(v, float) else v}"
                                               for k, v in shown.items() if v is not None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
