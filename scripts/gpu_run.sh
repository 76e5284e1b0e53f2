#!/usr/bin/env bash
# Stages of a GPU session, run from the repo root on the GPU machine; JSON and logs go to $OUT.
#   scripts/gpu_run.sh env quick fidelity         # any stages, in order
# Stages: env, quick (speed, quick tier), quick2 (the same again), slowdown (quick tier with a 5%
# slowdown injected into resnet50 amp_bf16), record-1 / record-2 / record-3 (the full tier in three
# parts, recording baselines: each fits one device call), full (the full tier, no recording), fidelity,
# memory, memory-record, convergence, scaling (loss-scaling properties on CUDA), all (pytest perf/).
set -uo pipefail
OUT=${OUT:-/tmp/ampbench-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PYTEST=(python3 -m pytest -p no:cacheprovider -q -rfEw --benchmark-disable-gc --benchmark-sort=name)
declare -a SUMMARY=()

stage() {  # name, then the command
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*"
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 15 "$OUT/$name.log"
  SUMMARY+=("$name rc=$rc $((SECONDS - t0))s")
}

for s in "$@"; do
  case $s in
    env) stage env bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv;
          python3 -c "import torch,torchvision;print(torch.__version__,torchvision.__version__,torch.version.cuda,torch.backends.cudnn.version())"' ;;
    quick) stage quick "${PYTEST[@]}" perf/test_speed.py --benchmark-json "$OUT/quick.json" ;;
    quick2) stage quick2 "${PYTEST[@]}" perf/test_speed.py --benchmark-json "$OUT/quick2.json" ;;
    slowdown) stage slowdown env AMPBENCH_SLOWDOWN=resnet50:amp_bf16:0.05 "${PYTEST[@]}" perf/test_speed.py \
                -p scripts.slowdown_plugin --benchmark-json "$OUT/slowdown.json" ;;
    # the full tier recorded in three parts of four models, each well inside one 10-minute device call
    record-1) stage record-1 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models mlp,mnist_cnn,wide_resnet28_10,resnet18 --benchmark-json "$OUT/record-1.json" ;;
    record-2) stage record-2 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models resnet34,resnet50,resnet101,resnet152 --benchmark-json "$OUT/record-2.json" ;;
    record-3) stage record-3 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models dpn26,dpn92,lstm_lm,gpt --benchmark-json "$OUT/record-3.json" ;;
    full) stage full "${PYTEST[@]}" perf/test_speed.py --perf-tier full --benchmark-json "$OUT/full.json" ;;
    diag) stage diag timeout 120 python3 -m scripts.diag_bn ;;
    memory-quick) stage memory-quick timeout 150 "${PYTEST[@]}" perf/test_memory.py --benchmark-json "$OUT/memory.json" ;;
    convergence-quick) stage convergence-quick timeout 120 "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                --benchmark-json "$OUT/convergence.json" ;;
    fidelity) stage fidelity bash -c 'python3 -m scripts.plain_loop $(ls "$0"/*.json 2>/dev/null | grep -v nvidia)' "$OUT" ;;
    memory) stage memory "${PYTEST[@]}" perf/test_memory.py --benchmark-json "$OUT/memory.json" ;;
    memory-record) stage memory-record "${PYTEST[@]}" perf/test_memory.py --perf-tier full --perf-update-baselines \
                --benchmark-json "$OUT/memory-full.json" ;;
    convergence) stage convergence "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                --perf-update-baselines --benchmark-json "$OUT/convergence.json" ;;
    scaling) stage scaling "${PYTEST[@]}" perf/test_loss_scaling.py --perf-device cuda ;;
    all) stage all "${PYTEST[@]}" perf/ --benchmark-json "$OUT/all.json" ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
cp baselines/*.json "$OUT/" 2>/dev/null
for f in "$OUT"/*.json; do
  case $f in *nvidia*) ;; *) echo "--- $(basename "$f")"; python3 scripts/table.py "$f" 2>/dev/null | cut -c1-220 ;; esac
done
printf '%s\n' "${SUMMARY[@]}"
