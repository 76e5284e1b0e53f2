#!/usr/bin/env bash
# A series of runs into one history on a GPU: UNCHANGED runs of the speed cells as they are, then SLOWED
# runs with extra GPU work (ampbench.slowdown) in one mode, each a pytest session of its own, against an
# empty baseline folder so that every reference is learned from the history alone.
#   MODELS=mlp,gpt UNCHANGED=5 SLOWED=3 SLOWDOWN=mlp:amp_bf16:0.015,gpt:amp_bf16:0.015 dev/history_series.sh
# Writes $OUT/history.sqlite, one benchmark JSON and log per run, then prints each run's verdict line.
# A series longer than one sitting goes on from a saved history: SEED=path/history.sqlite is copied to
# $OUT first, and FIRST_UNCHANGED / FIRST_SLOWED number the new runs after the earlier ones.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-run-out}; MODELS=${MODELS:-mlp,gpt}; UNCHANGED=${UNCHANGED:-5}; SLOWED=${SLOWED:-3}
SLOWDOWN=${SLOWDOWN:-mlp:amp_bf16:0.015,gpt:amp_bf16:0.015}; PRECISIONS=${PRECISIONS:-}
FIRST_UNCHANGED=${FIRST_UNCHANGED:-1}; FIRST_SLOWED=${FIRST_SLOWED:-1}; SEED=${SEED:-}
mkdir -p "$OUT/empty-baselines"
if [ -n "$SEED" ]; then cp "$SEED" "$OUT/history.sqlite" || exit 2; fi
export PYTHONUNBUFFERED=1
run() {  # run NAME [pytest args...]
  local name=$1; shift
  python3 -m pytest perf/test_speed.py -p no:cacheprovider -q --benchmark-disable-gc --perf-models "$MODELS" \
    ${PRECISIONS:+--perf-precisions "$PRECISIONS"} --perf-baseline-dir "$OUT/empty-baselines" \
    --perf-history "$OUT/history.sqlite" --perf-label "$name" --benchmark-json "$OUT/$name.json" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name: exit $? in $((SECONDS - start)) s: $(grep -E '(passed|failed)' "$OUT/$name.log" | tail -1)"
}
for ((i = FIRST_UNCHANGED; i < FIRST_UNCHANGED + UNCHANGED; i++)); do start=$SECONDS; run "unchanged-$i"; done
for ((i = FIRST_SLOWED; i < FIRST_SLOWED + SLOWED; i++)); do
  start=$SECONDS; run "slowed-$i" -p ampbench.slowdown --perf-slowdown "$SLOWDOWN"
done
