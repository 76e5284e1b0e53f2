#!/usr/bin/env bash
# Stages of a run of the suite on a GPU machine, in the order given. Each stage's benchmark JSON and one
# log of all stages (run.log) go to $OUT (default: gpu-run-out/ in the repository); at the end, each
# JSON's report is written next to it and the head of its summary printed, then one line per stage
# with its exit status and seconds.
#   dev/gpu_run.sh env quick fidelity
#   OUT=/tmp/h100 dev/gpu_run.sh record=resnet50,gpt memory-quick
#   PYTEST_ARGS="--perf-models mlp,gpt" dev/gpu_run.sh slowdown=gpt:amp_bf16:0.01   # extra pytest arguments
# Stages:
#   env                   the GPU, driver, clocks, torch, CUDA, cuDNN, CPU count and load
#   quick, quick2         speed, quick tier (quick2: the same again into its own JSON, e.g. for ampbench spread)
#   quick-busy            the quick tier with 2 x CPU-count busy-loop processes running: a host under load
#   quick-autotune        the quick tier with cuDNN's autotuning (--perf-cudnn-benchmark on)
#   quick-blocks=S        the quick tier with S-second timed blocks (--perf-block-seconds S)
#   slowdown[=M:P:F]      the quick tier with extra work worth F of each step injected into model M's mode P
#                         (-p ampbench.slowdown; default resnet50:amp_bf16:0.05): its cell should fail
#   record=M1,M2[/P1,P2]  speed of these models (in these modes, default all), recording baselines
#   record-full           speed, full tier, recording baselines
#   full                  speed, full tier, no recording
#   memory-quick, memory-full           memory and the largest batch, quick or full tier
#   memory-quick-record, memory-record  the same, recording baselines
#   memory=M1,M2          memory of these models, recording baselines
#   pipeline              the input-pipeline test alone
#   convergence-quick     convergence and the input pipeline, quick tier
#   convergence           the same, recording baselines
#   scaling               loss-scaling properties on CUDA
#   fidelity[=M:P,...]    ampbench fidelity: the harness against a plain loop (default cells, or these)
#   compile               pytest perf/ --perf-tier compile (compiled and fp8 cells; fp8 needs torchao)
#   compile-record        the same, recording baselines
#   distributed           the distributed cells and the loss-scaling-across-ranks properties, every GPU
#   distributed-record    the distributed cells, recording baselines (baselines/<gpu-slug>-x<N>.json)
#   all                   pytest perf/
# A stage that records writes into baselines/ of this checkout; at the end every baseline file is copied
# to $OUT/baselines/, to be brought back and merged (ampbench baselines merge) where the checkout is kept.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-run-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/run.log"
# shellcheck disable=SC2206  # PYTEST_ARGS is split into words on purpose
PYTEST=(python3 -m pytest -p no:cacheprovider -v -rfEw --benchmark-disable-gc --benchmark-sort=name ${PYTEST_ARGS:-})
AMPBENCH=(python3 -m ampbench)
declare -a SUMMARY=()

stage() {  # name, then the command: its output goes to the log, its verdict lines to the terminal
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG" | grep -E 'PASSED|FAILED|ERROR|SKIPPED|XFAIL|passed|failed|error|^fidelity|^practice' | tail -n 60
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$name rc=$rc $((SECONDS - t0))s")
}

speed() {  # name, then extra pytest arguments: perf/test_speed.py into $OUT/<name>.json
  local name=$1; shift
  stage "$name" "${PYTEST[@]}" perf/test_speed.py "$@" --benchmark-json "$OUT/$name.json"
}

STAGES='^(env|quick|quick2|quick-busy|quick-autotune|quick-blocks=.+|slowdown(=.+)?|record=.+|record-full|full|memory-quick|memory-full|memory-quick-record|memory-record|memory=.+|pipeline|convergence-quick|convergence|scaling|fidelity(=.+)?|compile|compile-record|distributed|distributed-record|all)$'
for s in "$@"; do  # every stage checked before the first runs
  [[ $s =~ $STAGES ]] || { echo "unknown stage $s (the stages are listed at the top of $0)" >&2; exit 2; }
done

for s in "$@"; do
  case $s in
    env) stage env bash -c 'nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total,temperature.gpu --format=csv;
          echo "cpus $(nproc); $(uptime)";
          python3 -c "import torch,torchvision;print(torch.__version__,torchvision.__version__,torch.version.cuda,torch.backends.cudnn.version())"' ;;
    quick|quick2) speed "$s" ;;
    quick-busy) pids=(); for _ in $(seq $((2 * $(nproc)))); do (while :; do :; done) & pids+=($!); done
                speed quick-busy; kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null ;;
    quick-autotune) speed quick-autotune --perf-cudnn-benchmark on ;;
    quick-blocks=*) secs=${s#quick-blocks=}; speed "quick-blocks-$secs" --perf-block-seconds "$secs" ;;
    slowdown|slowdown=*) target=resnet50:amp_bf16:0.05; [ "$s" != slowdown ] && target=${s#slowdown=}
              speed "slowdown-${target//[:.,]/-}" -p ampbench.slowdown --perf-slowdown "$target" ;;
    record=*) cells=${s#record=}; models=${cells%%/*}; only=()
              [ "$cells" != "$models" ] && only=(--perf-precisions "${cells#*/}")
              speed "record-${models//,/-}" --perf-update-baselines --perf-models "$models" "${only[@]}" ;;
    record-full) speed record-full --perf-tier full --perf-update-baselines ;;
    full) speed full --perf-tier full ;;
    memory-quick) stage "$s" "${PYTEST[@]}" perf/test_memory.py --benchmark-json "$OUT/$s.json" ;;
    memory-quick-record) stage "$s" "${PYTEST[@]}" perf/test_memory.py --perf-update-baselines --benchmark-json "$OUT/$s.json" ;;
    memory-full) stage "$s" "${PYTEST[@]}" perf/test_memory.py --perf-tier full --benchmark-json "$OUT/$s.json" ;;
    memory-record) stage "$s" "${PYTEST[@]}" perf/test_memory.py --perf-tier full --perf-update-baselines \
                     --benchmark-json "$OUT/$s.json" ;;
    memory=*) models=${s#memory=}
              stage "memory-${models//,/-}" "${PYTEST[@]}" perf/test_memory.py --perf-update-baselines \
                --perf-models "$models" --benchmark-json "$OUT/memory-${models//,/-}.json" ;;
    pipeline) stage pipeline "${PYTEST[@]}" perf/test_input_pipeline.py --benchmark-json "$OUT/pipeline.json" ;;
    convergence-quick) stage "$s" "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                         --benchmark-json "$OUT/$s.json" ;;
    convergence) stage convergence "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                   --perf-update-baselines --benchmark-json "$OUT/convergence.json" ;;
    scaling) stage scaling "${PYTEST[@]}" perf/test_loss_scaling.py perf/test_loss_scaling_training.py --perf-device cuda ;;
    fidelity) stage fidelity "${AMPBENCH[@]}" fidelity ;;
    fidelity=*) cells=${s#fidelity=}; stage "fidelity-${cells//[,:]/-}" "${AMPBENCH[@]}" fidelity ${cells//,/ } ;;
    compile) stage compile "${PYTEST[@]}" perf/ --perf-tier compile --benchmark-json "$OUT/compile.json" ;;
    compile-record) stage "$s" "${PYTEST[@]}" perf/ --perf-tier compile --perf-update-baselines \
                      --benchmark-json "$OUT/$s.json" ;;
    distributed) stage "$s" "${PYTEST[@]}" perf/test_distributed.py perf/test_distributed_scaling.py \
                   --benchmark-json "$OUT/$s.json" ;;
    distributed-record) stage "$s" "${PYTEST[@]}" perf/test_distributed.py --perf-update-baselines \
                          --benchmark-json "$OUT/$s.json" ;;
    all) stage all "${PYTEST[@]}" perf/ --benchmark-json "$OUT/all.json" ;;
  esac
done
for f in "$OUT"/*.json; do
  [ -e "$f" ] || continue
  report="$OUT/report-$(basename "$f" .json)"
  echo "--- $(basename "$f")"
  if "${AMPBENCH[@]}" report "$f" -o "$report" >>"$LOG" 2>&1; then
    sed '/<details>/,$d' "$report/summary.md"  # the verdict counts and the speedup matrix
  else
    echo "(no report: see $LOG)"
  fi
done
if compgen -G "baselines/*.json" >/dev/null; then
  mkdir -p "$OUT/baselines" && cp baselines/*.json "$OUT/baselines/"
fi
printf '%s\n' "${SUMMARY[@]}"
