#!/usr/bin/env bash
# `ampbench ab` on a GPU, in one call: an A/A comparison (base and head the same code) or a sensitivity
# check (head = base plus planted stalls), on a repository of its own made from this checkout.
#   WHAT=aa dev/ab_check.sh                       # A/A: every cell should pass (or be inconclusive)
#   WHAT=sens dev/ab_check.sh                     # the planted cells regress, the unplanted controls pass
#   WHAT=sens PLANT=gpt:amp_fp16:0.005 CELLS="gpt:amp_fp16 gpt:amp_bf16" dev/ab_check.sh
#   AB_ARGS="--max-pairs 4" dev/ab_check.sh       # more arguments for `ampbench ab`
# PLANT (WHAT=sens): CELL:FRACTION,... for `ampbench.slowdown` (`--perf-slowdown`), put into pytest's
# addopts at the head commit. The default plants 0.5% in gpt amp_fp16 and 1% in lstm_lm amp_fp16 (each
# should be a regression: twice the speedup's tolerance of 0.25% and more), 0.3% in mlp amp_fp16 (just past
# the speedup's tolerance, within the step time's 0.5%: its speedup may be inconclusive, never a pass), and 2%
# in wide_resnet28_10's fp32 side and amp_bf16 (both sides slowed alike: its speedup should pass while its step
# time regresses); gpt amp_bf16 and lstm_lm amp_bf16 are unplanted controls that should pass.
# Each pytest run gets --perf-require-gpu (off with GPU=0, to try the mechanics on the CPU with
# `PYTEST_ARGS="--perf-device cpu"`). The A/B run JSON is $OUT/ab.json, the command's output $OUT/ab.log
# (default OUT: ab-check-out/ in the checkout); the table printed last says, per cell and figure, the
# change, its interval, the pairs and the verdict, then whether each planted or control cell met its
# expectation (exit status 1 where one did not).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WHAT=${WHAT:-aa}
CELLS=${CELLS:-gpt:amp_fp16 gpt:amp_bf16 lstm_lm:amp_fp16 lstm_lm:amp_bf16 mlp:amp_fp16 wide_resnet28_10:amp_bf16}
PLANT=${PLANT:-gpt:amp_fp16:0.005,lstm_lm:amp_fp16:0.01,mlp:amp_fp16:0.003,wide_resnet28_10:fp32:0.02,wide_resnet28_10:amp_bf16:0.02}
PYTHON=${PYTHON:-python}
OUT=${OUT:-$ROOT/ab-check-out}
case $WHAT in aa|sens) ;; *) echo "WHAT must be aa or sens, not '$WHAT'" >&2; exit 2 ;; esac
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# the checkout as it is, uncommitted files included (ignored ones left out), as the base commit
mkdir "$WORK/repo"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - | tar -C "$WORK/repo" -xf -
cd "$WORK/repo"
grep -q '^addopts = "-ra"$' pyproject.toml || { echo "pyproject.toml: no line addopts = \"-ra\" to plant in" >&2; exit 2; }
git init -q -b main
git config user.email ab-check@example.com
git config user.name ab-check
git add -A && git commit -q -m "base: the checkout under test"
if [ "$WHAT" = sens ]; then
  sed -i "s/^addopts = \"-ra\"$/addopts = \"-ra -p ampbench.slowdown --perf-slowdown ${PLANT}\"/" pyproject.toml
  message="head: stalls planted ($PLANT)"
else
  echo "an unchanged head" >> AB_CHECK.txt
  message="head: no change to the code"
fi
git add -A && git commit -q -m "$message"
echo "ab_check: $WHAT on $(git rev-parse --short HEAD~1)..$(git rev-parse --short HEAD) in $WORK/repo: $message"

pytest_args="${PYTEST_ARGS:-}"
[ "${GPU:-1}" = 1 ] && pytest_args="--perf-require-gpu $pytest_args"
eval "extra=(${AB_ARGS:-})"
read -r -a cells <<< "$CELLS"
start=$(date +%s)
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m ampbench ab --repo "$WORK/repo" --base HEAD~1 \
  --head HEAD --pytest-args="$pytest_args" -o "$OUT/ab.json" "${extra[@]}" "${cells[@]}" 2>&1 \
  | tee "$OUT/ab.log" || true
seconds=$(( $(date +%s) - start ))

"$PYTHON" - "$OUT/ab.json" "$WHAT" "$PLANT" "$seconds" <<'EOF'
import json, sys
path, what, plant, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
try:
    benchmarks = json.load(open(path))["benchmarks"]
except OSError:
    sys.exit(f"ab_check: no A/B run at {path}: the comparison stopped early (see its log)")
# the planted fraction of each model:mode (a stalled fp32 side slows every mode's ratio over it alike)
planted = {c.rsplit(":", 1)[0]: float(c.rsplit(":", 1)[1]) for c in plant.split(",")} if what == "sens" else {}
failed = []
for b in benchmarks:
    e = b["extra_info"]
    cell = f"{e['model']}:{e['mode']}"
    for name, f in (e.get("figures") or {}).items():
        print(f"ab_check: {b['name']:40s} {name:12s} {f.get('change') or 0:+.3%} "
              f"[{f.get('change_low') or 0:+.3%}, {f.get('change_high') or 0:+.3%}] "
              f"tol {f.get('tolerance') or 0:.2%} after {f.get('pairs')} pairs: {f.get('verdict')}")
    if not b["name"].startswith("test_speed"):
        continue
    verdicts = {n: f.get("verdict") for n, f in (e.get("figures") or {}).items()}
    fraction = planted.get(cell, 0.0)
    if what == "aa" or (fraction == 0.0 and f"{e['model']}:fp32" not in planted):
        expect, ok = "no regression, no improvement", all(v in ("pass", "inconclusive") for v in verdicts.values())
    elif f"{e['model']}:fp32" in planted:  # both sides slowed alike: the ratio holds, the step time does not
        expect = "a regression of its step time, none of its speedup"
        ok = verdicts.get("step_time") == "regression" and verdicts.get("speedup") in ("pass", "inconclusive")
    elif fraction >= 0.005:  # twice the speedup's tolerance: the cell regresses (its speedup, or its step too)
        expect, ok = "a regression", e.get("verdict") == "regression"
    else:  # beyond the speedup's tolerance, within the step time's: the speedup never passes
        expect = "no pass of its speedup, no improvement"
        ok = verdicts.get("speedup") in ("regression", "inconclusive") and "improved" not in verdicts.values()
    print(f"ab_check: {cell} (planted {fraction:.1%}) expected {expect}: {'met' if ok else 'NOT met'} {verdicts}")
    failed += [] if ok else [cell]
pairs = sum(b["extra_info"].get("pairs") or 0 for b in benchmarks)
print(f"ab_check: {what}: {len(benchmarks)} cells, {pairs} pairs in all, {seconds} s; "
      + ("every expectation met" if not failed else f"NOT met: {', '.join(failed)}"))
sys.exit(1 if failed else 0)
EOF
