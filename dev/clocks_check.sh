#!/usr/bin/env bash
# The card's clocks and energy per timed block (docs/design.md, "Clocks and energy"), on a GPU machine with
# nvidia-ml-py (pip install -e '.[nvml]'). Everything goes to $OUT (default: clocks-check-out/):
#   1. the quick speed tier with the reads on, off, and on again (nvml-on.json, nvml-off.json, nvml-on2.json):
#      each cell's device figures with and without the reads, and `ampbench compare` of off against each on;
#   2. the throttling experiment (loaded.json): the quick tier again, reads on, while a second process runs
#      bf16 matmuls during the mode's timed blocks only (dev/clock_phases.py: its pytest plugin marks the
#      blocks, its loader follows the marks); the cards' clocks and power limits are never changed;
#   3. a table per cell of every run (clocks_table.json, and printed): device speedup and verdict, each
#      side's step time, the rounds flagged, each side's clocks and throttles, the energy ratio to fp32.
#   bash dev/clocks_check.sh
#   OUT=/tmp/clk PYTEST_ARGS="--perf-models gpt,resnet50" bash dev/clocks_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-clocks-check-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# shellcheck disable=SC2206  # PYTEST_ARGS is split into words on purpose
PYTEST=(python3 -m pytest -p no:cacheprovider -q -rfEw perf/test_speed.py --perf-tier quick --perf-require-gpu
        ${PYTEST_ARGS:-})
declare -a SUMMARY=()

if ! python3 -c "import pynvml" 2>/dev/null; then
  echo "nvidia-ml-py is not installed: pip install -e '.[nvml]'" >&2
  exit 2
fi
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$OUT/nvidia-smi-before.txt" 2>&1 || true

run() {  # name, then extra pytest arguments: $OUT/<name>.json and <name>.log
  local name=$1; shift
  local t0=$SECONDS
  "${PYTEST[@]}" "$@" --benchmark-json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  local rc=$?
  SUMMARY+=("$name rc=$rc $((SECONDS - t0))s")
  grep -A40 "ampbench summary" "$OUT/$name.log" | head -60
}

# 1. the reads on and off, in A/B/A order
run nvml-on --perf-nvml on
run nvml-off --perf-nvml off
run nvml-on2 --perf-nvml on
for on in nvml-on nvml-on2; do
  python3 -m ampbench compare "$OUT/nvml-off.json" "$OUT/$on.json" --markdown "$OUT/compare-off-$on.md" \
    > "$OUT/compare-off-$on.txt" 2>&1
  SUMMARY+=("compare off -> $on rc=$?")
done

# 2. the loader during the mode's blocks only
PHASE=$(mktemp -p "$( [ -d /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")" ampbench-phase.XXXXXX)
python3 dev/clock_phases.py load --phase-file "$PHASE" > "$OUT/loader.log" 2>&1 &
LOADER=$!
sleep 5  # the loader's CUDA context and first matmuls, before the first timed block
SAVED_PYTHONPATH=${PYTHONPATH:-}
export AMPBENCH_DEV_PHASE_FILE="$PHASE" PYTHONPATH="$PWD/dev${SAVED_PYTHONPATH:+:$SAVED_PYTHONPATH}"
run loaded -p clock_phases --perf-nvml on
unset AMPBENCH_DEV_PHASE_FILE
export PYTHONPATH="$SAVED_PYTHONPATH"
touch "$PHASE.stop"
wait "$LOADER"
SUMMARY+=("loader rc=$? $(tail -n 1 "$OUT/loader.log")")
rm -f "$PHASE" "$PHASE.stop"
nvidia-smi -q -d CLOCK,PERFORMANCE,POWER,TEMPERATURE > "$OUT/nvidia-smi-after.txt" 2>&1 || true

# 3. the table
python3 dev/clock_phases.py table "$OUT"/nvml-on.json "$OUT"/nvml-off.json "$OUT"/nvml-on2.json "$OUT"/loaded.json \
  --json "$OUT/clocks_table.json" | tee "$OUT/clocks_table.txt"
printf '%s\n' "${SUMMARY[@]}"
