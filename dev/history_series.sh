#!/usr/bin/env bash
# A series of runs into one history on a GPU: UNCHANGED runs of the speed cells as they are, then SLOWED
# runs with extra GPU work (ampbench.slowdown) in one mode, each a pytest session of its own, against an
# empty baseline folder so that every reference is learned from the history alone.
#   MODELS=mlp,gpt UNCHANGED=5 SLOWED=3 SLOWDOWN=mlp:amp_bf16:0.015,gpt:amp_bf16:0.015 dev/history_series.sh
# Writes $OUT/history.sqlite, one benchmark JSON and log per run, then prints each run's verdict line.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-run-out}; MODELS=${MODELS:-mlp,gpt}; UNCHANGED=${UNCHANGED:-5}; SLOWED=${SLOWED:-3}
SLOWDOWN=${SLOWDOWN:-mlp:amp_bf16:0.015,gpt:amp_bf16:0.015}; PRECISIONS=${PRECISIONS:-}
mkdir -p "$OUT/empty-baselines"
export PYTHONUNBUFFERED=1
run() {  # run NAME [pytest args...]
  local name=$1; shift
  python3 -m pytest perf/test_speed.py -p no:cacheprovider -q --benchmark-disable-gc --perf-models "$MODELS" \
    ${PRECISIONS:+--perf-precisions "$PRECISIONS"} --perf-baseline-dir "$OUT/empty-baselines" \
    --perf-history "$OUT/history.sqlite" --perf-label "$name" --benchmark-json "$OUT/$name.json" "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(grep -E '(passed|failed)' "$OUT/$name.log" | tail -1)"
}
for i in $(seq "$UNCHANGED"); do run "unchanged-$i"; done
for i in $(seq "$SLOWED"); do run "slowed-$i" -p ampbench.slowdown --perf-slowdown "$SLOWDOWN"; done
