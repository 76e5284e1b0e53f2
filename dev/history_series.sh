#!/usr/bin/env bash
# A series of runs into one history on a GPU, in stages given in order, each run a pytest session of its own,
# by default against an empty baseline folder, so that every reference is learned from the history alone
# (BASELINE_DIR=baselines holds them against the committed files, their spread pooled in, as CI does):
#   dev/history_series.sh unchanged=4 slowed=4 accept=run-5 slowed=1 changes
# Stages:
#   unchanged=N   N runs of the speed cells as they are
#   slowed=N      N runs with extra GPU work (ampbench.slowdown, $SLOWDOWN) in the named cells; with
#                 UNTAGGED=1 the records are left untagged, as a real regression comes, so the history judges
#                 and learns from them as from any run (how to check it never learns a slowdown as noise)
#   accept=LABEL  accept the slowed cells' new level from the run labelled LABEL on (ampbench history accept)
#   changes       ampbench history changes, and history explain of each slowed cell
#   kernels       ampbench baselines export --kernels-only of the history into $OUT/baselines (copies of
#                 baselines/ whose entries take the kernel lists of their latest counted runs)
# Runs are labelled run-1, run-2, ... across invocations (the history's run count), so a series goes on
# from one invocation to the next: HISTORY (default $OUT/history.sqlite) is kept, or SEED=path/history.sqlite copied there first.
#   MODELS=mlp,gpt,lstm_lm PRECISIONS=amp_fp16,amp_bf16 SLOWDOWN=gpt:amp_fp16:0.007 UNTAGGED=1 dev/history_series.sh ...
# Each run's benchmark JSON and log go to $OUT; the last lines are one per run: label, exit status, seconds,
# and pytest's outcome line.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-run-out}; MODELS=${MODELS:-mlp,wide_resnet28_10,resnet50,lstm_lm,gpt}; PRECISIONS=${PRECISIONS:-}
SLOWDOWN=${SLOWDOWN:-gpt:amp_fp16:0.007}; UNTAGGED=${UNTAGGED:-0}; SEED=${SEED:-}
HISTORY=${HISTORY:-$OUT/history.sqlite}; BASELINE_DIR=${BASELINE_DIR:-$OUT/empty-baselines}
mkdir -p "$OUT" "$BASELINE_DIR" "$(dirname "$HISTORY")"
if [ -n "$SEED" ] && [ ! -e "$HISTORY" ]; then cp "$SEED" "$HISTORY" || exit 2; fi
export PYTHONUNBUFFERED=1
declare -a DONE=()

count_runs() {
  [ -e "$HISTORY" ] || { echo 0; return; }
  python3 -c "from ampbench.history.store import open_history; print(open_history('$HISTORY').counts()[0])"
}

run() {  # run KIND [pytest args...]: one session into the history, labelled by its number
  local kind=$1 n name start=$SECONDS; shift
  n=$(( $(count_runs) + 1 )); name="run-$n"
  python3 -m pytest perf/test_speed.py -p no:cacheprovider -q --benchmark-disable-gc --perf-models "$MODELS" \
    ${PRECISIONS:+--perf-precisions "$PRECISIONS"} --perf-baseline-dir "$BASELINE_DIR" --perf-history "$HISTORY" \
    --perf-label "$name" --benchmark-json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  DONE+=("$name ($kind): exit $rc in $((SECONDS - start)) s: $(grep -E '(passed|failed)' "$OUT/$name.log" | tail -1)")
  echo "${DONE[-1]}"
}

slowed_cells() {  # the test ids $SLOWDOWN names
  tr ',' '\n' <<< "$SLOWDOWN" | awk -F: 'NF == 3 {print "test_speed[" $1 "-" $2 "]"}'
}

for stage in "$@"; do
  case $stage in
    unchanged=*) for ((i = 0; i < ${stage#*=}; i++)); do run unchanged; done ;;
    slowed=*)
      extra=(-p ampbench.slowdown --perf-slowdown "$SLOWDOWN")
      [ "$UNTAGGED" = 1 ] && extra+=(--perf-slowdown-untagged)
      for ((i = 0; i < ${stage#*=}; i++)); do run slowed "${extra[@]}"; done ;;
    accept=*)
      label=${stage#*=}
      id=$(python3 -c "from ampbench.history.store import open_history
print(next(r.id for r in open_history('$HISTORY').runs() if r.label == '$label'))") || exit 2
      for cell in $(slowed_cells); do
        python3 -m ampbench history accept "$id" --cell "$cell" --reason "the slowdown from $label on is intended" \
          --history "$HISTORY"
      done ;;
    changes)
      python3 -m ampbench history changes --history "$HISTORY" | tee "$OUT/changes.txt"
      for cell in $(slowed_cells); do python3 -m ampbench history explain "$cell" --history "$HISTORY"; done \
        | tee "$OUT/explain.txt" ;;
    kernels)
      mkdir -p "$OUT/baselines" && cp baselines/*.json "$OUT/baselines/"
      python3 -m ampbench baselines export --kernels-only --history "$HISTORY" --baseline-dir "$OUT/baselines" ;;
    *) echo "unknown stage: $stage (see the top of $0)" >&2; exit 2 ;;
  esac
done
printf '%s\n' "${DONE[@]}"
