"""What the dashboards see of a change between two runs: `ampbench export`'s github and bmf figures of
OLD and NEW, each checked against its consumer's schema (tests/data/consumers/), read the way
github-action-benchmark and Bencher read them, and beside them what the same tools read of
pytest-benchmark's own entries (one side's step time).

    python dev/dashboard_check.py old.json new.json --slowed gpt:amp_fp16,gpt:fp16_master [--alert-threshold 1.005]

Lists, per reader, the cells that moved beyond tolerance: github-action-benchmark's rule (previous value
over current value above the threshold; here each cell's own tolerance from NEW, and the one
--alert-threshold the action takes), Bencher's metric against the previous one, and the pytest-benchmark
entries' ops. With --slowed, exits 1 unless both exports flag exactly the slowed cells.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# this checkout's package, not an installed copy of another checkout's
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ampbench.export import bmf, gated_figures, github  # noqa: E402
from ampbench.results import load_run  # noqa: E402

SCHEMAS = Path(__file__).resolve().parents[1] / "tests" / "data" / "consumers"


def _check(document, name: str) -> None:
    try:
        import jsonschema
    except ImportError:
        print(f"  (jsonschema not installed: {name} not checked)")
        return
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(document))
    print(f"  {name}: {'fits' if not errors else f'{len(errors)} problems, first: {errors[0].message}'}")


def _cell(name: str) -> str:
    return name.split(" ")[0]


def _github(after, gh_old: list, gh_new: list, alert_threshold: float) -> set[str]:
    """The cells github-action-benchmark flags beyond each one's own tolerance (printed with those beyond
    --alert-threshold)."""
    # each github entry is named "<test id> <what>", <what> the figure's ratio where bigger is better
    tolerance = {f"{f.test_id} {f.relative[0] if f.relative else f.label}": f.tolerance for f in after.figures}
    prev = {e["name"]: e["value"] for e in gh_old}
    own, single = set(), set()
    print("\ngithub-action-benchmark (customBiggerIsBetter): previous / current")
    for e in gh_new:
        if e["name"] not in prev:
            continue
        ratio = prev[e["name"]] / e["value"]
        tol = tolerance.get(e["name"])
        if tol is None or e["name"].endswith("'s"):  # a memory or accuracy ratio: held in points or absolute terms
            continue
        beyond = ratio > 1 + tol
        own |= {_cell(e["name"])} if beyond else set()
        single |= {_cell(e["name"])} if ratio > alert_threshold else set()
        if beyond or ratio > alert_threshold:
            print(f"  {e['name']}: {ratio:.4f} (tolerance {tol:.2%})")
    print(f"  beyond own tolerance: {sorted(own)}\n  beyond --alert-threshold {alert_threshold}: {sorted(single)}")
    return own


def _bencher(after, bmf_old: dict, bmf_new: dict) -> set[str]:
    """The cells whose Bencher metric fell beyond their tolerance."""
    bencher = set()
    print("\nBencher (bmf): current metric against previous")
    for bench, measures in bmf_new.items():
        for measure, metric in measures.items():
            old = bmf_old.get(bench, {}).get(measure)
            f = next((f for f in after.figures if f.test_id == bench and f.measure == measure), None)
            if old is None or f is None or f.tolerance is None or not f.bigger_is_better or f.unit != "x":
                continue
            change = metric["value"] / old["value"] - 1
            if change < -f.tolerance:
                bencher.add(bench)
                print(f"  {bench} {measure}: {change:+.2%} (tolerance {f.tolerance:.2%}, "
                      f"interval {metric.get('lower_value', 0):.4f}-{metric.get('upper_value', 0):.4f})")
    print(f"  beyond tolerance: {sorted(bencher)}")
    return bencher


def _pytest_benchmark(old: Path, new: Path) -> None:
    """What the dashboards read of pytest-benchmark's own entries: one side's step time."""
    print("\npytest-benchmark's entries (tool: pytest, python_pytest): one side's step time, ops change")
    ops = {b["fullname"]: b["stats"]["ops"] for b in json.loads(old.read_text())["benchmarks"] if "stats" in b}
    for b in json.loads(new.read_text())["benchmarks"]:
        if b.get("fullname") in ops and "stats" in b:
            change = b["stats"]["ops"] / ops[b["fullname"]] - 1
            if abs(change) > 0.004:
                print(f"  {b['name']}: {change:+.2%}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--slowed", default="",
                   help="model:mode,... (speed cells) or test ids of the cells slowed on purpose")
    p.add_argument("--alert-threshold", type=float, default=1.005, help="github-action-benchmark's, as a ratio")
    args = p.parse_args()
    before, after = gated_figures(load_run(args.old)), gated_figures(load_run(args.new))
    gh_old, gh_new, bmf_old, bmf_new = github(before), github(after), bmf(before), bmf(after)
    print("schemas:")
    for doc, name in ((gh_new, "github_custom"), (bmf_new, "bencher_bmf")):
        _check(doc, name)
    for path in (args.old, args.new):
        raw = json.loads(path.read_text())
        _check(raw, "github_pytest"), _check(raw, "bencher_pytest")

    own = _github(after, gh_old, gh_new, args.alert_threshold)
    bencher = _bencher(after, bmf_old, bmf_new)
    _pytest_benchmark(args.old, args.new)

    if not args.slowed:
        return 0
    slowed = {c if "[" in c else f"test_speed[{c.replace(':', '-')}]" for c in args.slowed.split(",")}
    ok = own == slowed and bencher == slowed
    print(f"\n{'OK' if ok else 'MISMATCH'}: slowed {sorted(slowed)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
