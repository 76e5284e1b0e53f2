#!/usr/bin/env bash
# Stages of a GPU run, run from the repo root on the GPU machine; JSON and one log go to $OUT.
#   scripts/gpu_run.sh env quick fidelity            # any stages, in order
#   scripts/gpu_run.sh record=resnet50,gpt memory-quick@150
# A stage may end in @SECONDS, a time limit for it alone, so a run under an overall time limit ends
# with every stage's output in hand. Stages:
#   env                 the GPU, driver, torch, CUDA, cuDNN
#   quick, quick2       speed, quick tier (quick2: the same again, to its own JSON)
#   agreement           scripts/agreement.py over $OUT/quick*.json: spread and interval overlap per test
#   quick-autotune      the quick tier with cuDNN's autotuning (--perf-cudnn-benchmark on)
#   quick-blocks=S      the quick tier with S-second timed blocks (--perf-block-seconds S)
#   slowdown[=M:P:F]    the quick tier with a slowdown F injected into model M's mode P (scripts/slowdown_plugin.py;
#                       default resnet50:bf16:0.05)
#   record=M1,M2[/P1,P2] speed of these models (in these modes, default all), recording baselines
#   cudnn               scripts/diag_cudnn.py: what cuDNN autotuning costs and buys
#   record-full         the full tier's speed baselines, every model in every mode, in one process
#   record-1/2/3        the full tier's speed baselines in three parts of four models
#   full                speed, full tier, no recording
#   fidelity            scripts/plain_loop.py: the harness against a plain loop, alternating in one process
#   fidelity=M:P,M:P    the same for these cells only (e.g. fidelity=gpt:amp_bf16,gpt:amp_fp16)
#   memory-quick, memory-quick-record, memory-full, memory-record (full tier, recording), memory=M1,M2 (recording)
#   pipeline            the input-pipeline test alone
#   convergence-quick, convergence (recording)
#   scaling             loss-scaling properties on CUDA
#   diag                scripts/diag_bn.py
#   all                 pytest perf/
# Logs of all stages go to one file, $OUT/run.log, so that $OUT holds few files; the table of every
# JSON is printed last, then one line per stage with its exit code and seconds.
set -uo pipefail
OUT=${OUT:-/tmp/ampbench-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOG="$OUT/run.log"
PYTEST=(python3 -m pytest -p no:cacheprovider -p scripts.progress_plugin -q -rfEw --benchmark-disable-gc --benchmark-sort=name)
declare -a SUMMARY=()
LIMIT=0

stage() {  # name, then the command; runs under the stage's @SECONDS limit when one was given
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name: $*" | tee -a "$LOG"
  if [ "$LIMIT" -gt 0 ]; then
    timeout "$LIMIT" "$@" 2>&1 | tee -a "$LOG" | grep -E '\[progress\]|passed|failed|error|Error|^fidelity|^practice|^cudnn' | tail -n 60
  else
    "$@" 2>&1 | tee -a "$LOG" | grep -E '\[progress\]|passed|failed|error|Error|^fidelity|^practice|^cudnn' | tail -n 60
  fi
  local rc=${PIPESTATUS[0]}
  SUMMARY+=("$name rc=$rc $((SECONDS - t0))s")
}

for arg in "$@"; do
  s=${arg%@*}
  LIMIT=0; [ "$s" != "$arg" ] && LIMIT=${arg##*@}
  case $s in
    env) stage env bash -c 'nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,memory.total --format=csv;
          nvidia-smi --query-gpu=uuid,temperature.gpu,clocks_throttle_reasons.active,utilization.gpu --format=csv;
          echo "cpus $(nproc); $(uptime)";
          python3 -c "import torch,torchvision;print(torch.__version__,torchvision.__version__,torch.version.cuda,torch.backends.cudnn.version())"' ;;
    quick) stage quick "${PYTEST[@]}" perf/test_speed.py --benchmark-json "$OUT/quick.json" ;;
    quick2) stage quick2 "${PYTEST[@]}" perf/test_speed.py --benchmark-json "$OUT/quick2.json" ;;
    agreement) stage agreement bash -c "python3 -m scripts.agreement $OUT/quick*.json | tee $OUT/agreement.txt" ;;
    quick-autotune) stage quick-autotune "${PYTEST[@]}" perf/test_speed.py --perf-cudnn-benchmark on \
                --benchmark-json "$OUT/quick-autotune.json" ;;
    quick-blocks=*) secs=${s#quick-blocks=}
              stage "quick-blocks-$secs" "${PYTEST[@]}" perf/test_speed.py --perf-block-seconds "$secs" \
                --benchmark-json "$OUT/quick-blocks-$secs.json" ;;
    slowdown|slowdown=*) target=resnet50:bf16:0.05; [ "$s" != slowdown ] && target=${s#slowdown=}
              stage "slowdown-${target//[:.]/-}" env AMPBENCH_SLOWDOWN="$target" "${PYTEST[@]}" perf/test_speed.py \
                -p scripts.slowdown_plugin --benchmark-json "$OUT/slowdown-${target//[:.]/-}.json" ;;
    record=*) cells=${s#record=}; models=${cells%%/*}; only=()
              [ "$cells" != "$models" ] && only=(--perf-precisions "${cells#*/}")
              stage "record-${models//,/-}" "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models "$models" "${only[@]}" --benchmark-json "$OUT/record-${models//,/-}.json" ;;
    record-full) stage record-full "${PYTEST[@]}" perf/test_speed.py --perf-tier full --perf-update-baselines \
                --benchmark-json "$OUT/record-full.json" ;;
    # the full tier recorded in three parts of four models, each short enough for a run limited to 10 minutes
    record-1) stage record-1 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models mlp,mnist_cnn,wide_resnet28_10,resnet18 --benchmark-json "$OUT/record-1.json" ;;
    record-2) stage record-2 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models resnet34,resnet50,resnet101,resnet152 --benchmark-json "$OUT/record-2.json" ;;
    record-3) stage record-3 "${PYTEST[@]}" perf/test_speed.py --perf-update-baselines \
                --perf-models dpn26,dpn92,lstm_lm,gpt --benchmark-json "$OUT/record-3.json" ;;
    full) stage full "${PYTEST[@]}" perf/test_speed.py --perf-tier full --benchmark-json "$OUT/full.json" ;;
    diag) stage diag python3 -m scripts.diag_bn ;;
    cudnn) for b in off on; do
             stage "cudnn-$b" python3 -m scripts.diag_cudnn $b resnet50:fp32,tf32,amp_fp16,amp_bf16 wide_resnet28_10:fp32,amp_bf16
           done ;;
    memory-quick) stage memory-quick "${PYTEST[@]}" perf/test_memory.py --benchmark-json "$OUT/memory.json" ;;
    memory-quick-record) stage memory-quick-record "${PYTEST[@]}" perf/test_memory.py --perf-update-baselines \
                --benchmark-json "$OUT/memory.json" ;;
    memory=*) models=${s#memory=}
              stage "memory-${models//,/-}" "${PYTEST[@]}" perf/test_memory.py --perf-update-baselines \
                --perf-models "$models" --benchmark-json "$OUT/memory-${models//,/-}.json" ;;
    pipeline) stage pipeline "${PYTEST[@]}" perf/test_input_pipeline.py --benchmark-json "$OUT/pipeline.json" ;;
    memory-full) stage memory-full "${PYTEST[@]}" perf/test_memory.py --perf-tier full --benchmark-json "$OUT/memory-full.json" ;;
    memory-record) stage memory-record "${PYTEST[@]}" perf/test_memory.py --perf-tier full --perf-update-baselines \
                --benchmark-json "$OUT/memory-full.json" ;;
    convergence-quick) stage convergence-quick "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                --benchmark-json "$OUT/convergence.json" ;;
    convergence) stage convergence "${PYTEST[@]}" perf/test_convergence.py perf/test_input_pipeline.py \
                --perf-update-baselines --benchmark-json "$OUT/convergence.json" ;;
    fidelity) stage fidelity python3 -m scripts.plain_loop ;;
    fidelity=*) cells=${s#fidelity=}
                stage "fidelity-${cells//[,:]/-}" python3 -m scripts.plain_loop ${cells//,/ } ;;
    scaling) stage scaling "${PYTEST[@]}" perf/test_loss_scaling.py --perf-device cuda ;;
    all) stage all "${PYTEST[@]}" perf/ --benchmark-json "$OUT/all.json" ;;
    *) echo "unknown stage $s"; exit 2 ;;
  esac
done
cp baselines/*.json "$OUT/" 2>/dev/null
for f in "$OUT"/*.json; do
  case $f in *nvidia*) ;; *) echo "--- $(basename "$f")"; python3 scripts/table.py "$f" 2>/dev/null | cut -c1-200 ;; esac
done
printf '%s\n' "${SUMMARY[@]}"
