"""Print a short table of an ampbench benchmark JSON: one line per test, speed cells first.

    python3 scripts/table.py run.json [other.json]   # with a second file, the speedups side by side
"""

from __future__ import annotations

import json
import sys


def rows(path: str) -> dict[str, dict]:
    with open(path) as f:
        data = json.load(f)
    return {b["name"]: b.get("extra_info", {}) for b in data["benchmarks"]}


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def main(argv: list[str]) -> int:
    first = rows(argv[0])
    second = rows(argv[1]) if len(argv) > 1 else {}
    for name, e in first.items():
        kind = e.get("kind")
        if kind == "speed":
            line = (f"{name:44s} {fmt(e['speedup'])}x [{fmt(e['speedup_low'])},{fmt(e['speedup_high'])}] n={e['rounds']:<3d}"
                    f" step {fmt(e['step_ms'], '.2f')}ms ref {fmt(e['step_ms_ref'], '.2f')}ms mem {fmt(e.get('memory_ratio'))}"
                    f" tflops {fmt(e.get('tflops'), '.0f')} {e['verdict']}")
            if e.get("speedup_across_low") is not None:
                line += f" across [{fmt(e['speedup_across_low'])},{fmt(e['speedup_across_high'])}]"
            other = second.get(name)
            if other:
                agree = other["speedup_low"] <= e["speedup_high"] and e["speedup_low"] <= other["speedup_high"]
                line += (f" | run2 {fmt(other['speedup'])}x [{fmt(other['speedup_low'])},{fmt(other['speedup_high'])}]"
                         f" diff {100 * (other['speedup'] / e['speedup'] - 1):+.2f}% {'overlap' if agree else 'DISJOINT'}")
        else:
            keys = [k for k in ("memory_ratio", "max_batch", "max_batch_ratio", "accuracy", "accuracy_ref", "input_bound", "verdict") if k in e]
            line = f"{name:44s} " + " ".join(f"{k}={e[k] if not isinstance(e[k], float) else round(e[k], 4)}" for k in keys)
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
