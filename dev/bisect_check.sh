#!/usr/bin/env bash
# `ampbench bisect` on a GPU against a planted stall: a clone of this checkout gets ten commits on top,
# the sixth of which adds `-p ampbench.slowdown --perf-slowdown CELL:FRACTION` to pytest's addopts (a 1%
# stall of gpt amp_fp16 by default); the bisect between the clone's base and its tenth commit must name
# the sixth, its kernel, in at most four steps and twenty minutes. Prints the bisect's progress, then each
# step, the time and whether the target was met (exit status 1 where not).
# The time: each step is paired with the good side, two runs a pair; a good step takes one pair, a bad one
# two, and the bad side two first: 14-18 runs for this bisect (3-4 steps), where a step held to a level
# measured once took 8 (3 at the good side, 1 at the bad, 1 a step). 1200 s keeps each run the 65-85 s
# that 600 s gave it then.
#   dev/bisect_check.sh
#   CELL=resnet50:amp_bf16 FRACTION=0.02 OUT=/tmp/bisect dev/bisect_check.sh
#   CELL=mlp:bf16 FRACTION=20 BISECT_ARGS="--pytest-args '--perf-device cpu' --tolerance 0.5" dev/bisect_check.sh
# (BISECT_ARGS: more arguments for `ampbench bisect`; the last line tries the mechanics on the CPU)
# The record of every step is written to $OUT/bisect.json, the bisect's output to $OUT/bisect.log
# (default OUT: bisect-check-out/ in the checkout).
# Where one command may run only so long: LIMIT=540 ends the bisect after 540 s (SIGTERM: the steps taken are
# written to the record), and RESUME=1 with the same OUT goes on from them (`ampbench bisect --resume`); the
# ten commits are made with fixed dates, so a checkout copied again gives the same commits. The target's time
# is then the steps' own seconds, summed over the calls.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CELL=${CELL:-gpt:amp_fp16}
FRACTION=${FRACTION:-0.01}
PYTHON=${PYTHON:-python}
OUT=${OUT:-$ROOT/bisect-check-out}
MAX_STEPS=${MAX_STEPS:-4}
MAX_SECONDS=${MAX_SECONDS:-1200}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# the checkout as it is, uncommitted files included (ignored ones left out), as the base commit of a
# history of its own
mkdir "$WORK/repo"
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
    | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - | tar -C "$WORK/repo" -xf -
else  # a copy of the files without git's folder
  tar -C "$ROOT" --exclude=.git --exclude=.venv --exclude=__pycache__ --exclude=bisect-check-out -cf - . \
    | tar -C "$WORK/repo" -xf -
fi
cd "$WORK/repo"
grep -q '^addopts = "-ra"$' pyproject.toml || { echo "pyproject.toml: no line addopts = \"-ra\" to plant the stall in" >&2; exit 2; }
git init -q -b main
git config user.email bisect-check@example.com
git config user.name bisect-check
# fixed dates: the same files make the same commits in every call, which --resume needs
export GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" GIT_COMMITTER_DATE="2000-01-01T00:00:00Z"
git add -A && git commit -q -m "base: the checkout under test"
for i in $(seq 1 10); do
  echo "change $i" >> BISECT_CHECK.txt
  message="change $i"
  if [ "$i" = 6 ]; then
    sed -i "s/^addopts = \"-ra\"$/addopts = \"-ra -p ampbench.slowdown --perf-slowdown ${CELL}:${FRACTION}\"/" pyproject.toml
    message="change $i: ${CELL} stalled by ${FRACTION} of its step"
  fi
  git add -A && git commit -q -m "$message"
done
PLANTED=$(git rev-parse HEAD~4)
echo "bisect_check: ten commits on the checkout in $WORK/repo; planted: $PLANTED ($(git log -1 --format=%s "$PLANTED"))"

eval "extra=(${BISECT_ARGS:-})"
[ "${RESUME:-0}" = 1 ] && extra+=(--resume)
limit=()
[ "${LIMIT:-0}" -gt 0 ] && limit=(timeout -s TERM "$LIMIT")
start=$(date +%s)
PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" "${limit[@]}" "$PYTHON" -m ampbench bisect "$CELL" \
  --repo "$WORK/repo" --good HEAD~10 --bad HEAD --record "$OUT/bisect.json" "${extra[@]}" 2>&1 \
  | tee -a "$OUT/bisect.log" || true
seconds=$(( $(date +%s) - start ))
if "$PYTHON" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("interrupted") else 1)' \
    "$OUT/bisect.json" 2>/dev/null; then
  echo "bisect_check: cut short after $seconds s; go on with RESUME=1 and the same OUT ($OUT)"
  exit 3
fi

"$PYTHON" - "$OUT/bisect.json" "$PLANTED" "$seconds" "$MAX_STEPS" "$MAX_SECONDS" <<'EOF'
import json, sys
path, planted, seconds, max_steps, max_seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
try:
    record = json.load(open(path))
except OSError:
    sys.exit(f"bisect_check: no record at {path}: the bisect stopped early (see its log)")
nan = float("nan")
for step in record["steps"]:  # each cell: head over the good side after its pairs
    cells = "; ".join(f"{c} {f.get('ratio', nan):.4f}x [{f.get('ratio_low', nan):.4f}, {f.get('ratio_high', nan):.4f}] "
                      f"after {f.get('pairs', 0)} pairs, {f['verdict']}" for c, f in step["cells"].items())
    print(f"bisect_check: {step['kind']} {step['step']}: {step['commit'][:12]} {step['subject']!r}: {cells} -> "
          f"{step['answer']} ({step['seconds']:.0f} s)")
steps = sum(1 for s in record["steps"] if s["kind"] == "step")
seconds = max(seconds, round(sum(s.get("seconds", 0) for s in record["steps"])))  # over the calls, where resumed
found = (record.get("first_bad") or {}).get("commit")
met = found == planted and steps <= max_steps and seconds <= max_seconds
print(f"bisect_check: named {found or 'no commit'} (planted {planted}) in {steps} bisect steps and {seconds} s "
      f"(target: the planted commit, at most {max_steps} steps and {max_seconds} s): {'met' if met else 'NOT met'}")
sys.exit(0 if met else 1)
EOF
