#!/usr/bin/env bash
# The distributed cells as two nodes on one host, and the same cells on one node, into one history.
#   dev/two_nodes.sh runs=2                       # two unchanged runs over sockets (two agents, one GPU each)
#   dev/two_nodes.sh runs=3 slowed table          # three more, one with a 1% slowdown on node 1, the table
#   dev/two_nodes.sh nvlink table                 # the same cells on both GPUs of one node, then the table
#   WORLD=4 STRATEGIES="ddp fsdp2" dev/two_nodes.sh standalone=5 table   # every GPU of a node, DDP and FSDP2
# Stages, in the order given:
#   runs=N        N runs over sockets: node 0 and node 1 are two pytest processes, each the node of one torchrun
#                 agent owning GPU 0 or GPU 1 (CUDA_VISIBLE_DEVICES), meeting at 127.0.0.1; NCCL crosses a
#                 network transport between them: sockets over loopback, no peer-to-peer, no shared memory
#   slowed[=F]    one run over sockets with extra GPU work worth F (default 0.01) of each step of the slowed
#                 cells' modes on node 1's rank alone (-p ampbench.slowdown on node 1's pytest)
#   nvlink        one run of the same cells standalone on GPUs 0 and 1 (NVLink, the machine's NCCL settings)
#   standalone=N  N runs standalone on WORLD GPUs of one node (default: every visible GPU)
#   table         per cell: device step time and tolerance of the last unchanged run, the slowed run's
#                 verdicts, and device step times over sockets against NVLink
# Cells: CELLS (default gpt-amp_bf16 and resnet50-amp_fp16) under STRATEGIES (default ddp), every comm
# variant. Every run goes into $STATE/history.sqlite (series of "x2 on 2 nodes", "x2" and "x4" apart) against
# the empty baseline folder $STATE/baselines, so each cell's level and tolerance come from its runs alone.
# PYTEST_ARGS adds arguments to every pytest (PYTEST_ARGS="--perf-device cpu --perf-world-size 2" CELLS=mlp-amp_bf16
# SLOWDOWN_CELLS=mlp:amp_bf16 tries the script on the CPU).
# $STATE (default gpu-run-out/two-nodes) persists between invocations on one machine; each invocation copies
# the table, the history, the last runs' JSONs and a log to $OUT (default: $STATE/out). On another machine,
# SEED=path/history.sqlite goes on from a history copied from the first (the table then lacks earlier JSONs).
set -uo pipefail
cd "$(dirname "$0")/.."
STATE=${STATE:-gpu-run-out/two-nodes}; OUT=${OUT:-$STATE/out}
CELLS=${CELLS:-gpt-amp_bf16 resnet50-amp_fp16}; STRATEGIES=${STRATEGIES:-ddp}
SLOWDOWN_CELLS=${SLOWDOWN_CELLS:-gpt:amp_bf16 resnet50:amp_fp16}
mkdir -p "$STATE/baselines" "$STATE/runs" "$OUT"
# a series goes on on another machine from a history copied from the first: SEED=path/history.sqlite
if [ -n "${SEED:-}" ] && [ ! -f "$STATE/history.sqlite" ]; then cp "$SEED" "$STATE/history.sqlite" || exit 2; fi
LOG="$STATE/runs.log"
export PYTHONUNBUFFERED=1

for s in "$@"; do  # every stage checked before the first runs
  [[ $s =~ ^(runs=[0-9]+|slowed(=[0-9.]+)?|nvlink|standalone=[0-9]+|table)$ ]] \
    || { echo "unknown stage $s (the stages are listed at the top of $0)" >&2; exit 2; }
done

models=$(for c in $CELLS; do echo "${c%%-*}"; done | sort -u | paste -sd,)
modes=$(for c in $CELLS; do echo "${c#*-}"; done | sort -u | paste -sd,)
tests=$(for t in $STRATEGIES; do echo "test_${t}_speed"; done | paste -sd' ' | sed 's/ / or /g')
cells=$(for c in $CELLS; do echo "$c"; done | paste -sd' ' | sed 's/ / or /g')
PYTEST=(python3 -m pytest perf/test_distributed.py -p no:cacheprovider -q -rfE --benchmark-disable-gc
        --perf-models "$models" --perf-precisions "$modes" -k "($tests) and ($cells)"
        --perf-baseline-dir "$STATE/baselines" --perf-history "$STATE/history.sqlite" ${PYTEST_ARGS:-})
next_run() { echo $(( $(ls "$STATE/runs" | wc -l) + 1 )); }

# NCCL between the two agents over a network transport; the machine's other NCCL settings stay as they are
sockets_env=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
             NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)

two_nodes() {  # NAME [node 1's extra pytest arguments...]: one run of both agents over sockets
  local name=$1; shift
  local port=$((29500 + RANDOM % 2000)) n; n=$(next_run)
  local json="$STATE/runs/$(printf '%02d' "$n")-$name.json" t0=$SECONDS
  local nodes=(--perf-nnodes 2 --perf-rdzv-endpoint "127.0.0.1:$port" --perf-rdzv-id "two-nodes-$n" --perf-label "$name")
  echo "=== run $n: $name over sockets (node 1: ${*:-as node 0})" | tee -a "$LOG"
  env "${sockets_env[@]}" NCCL_DEBUG_FILE="$STATE/nccl-$n.%h.%p.log" CUDA_VISIBLE_DEVICES=1 \
    "${PYTEST[@]}" "${nodes[@]}" --perf-node-rank 1 "$@" > "$STATE/node1.log" 2>&1 &
  local follower=$!
  env "${sockets_env[@]}" NCCL_DEBUG_FILE="$STATE/nccl-$n.%h.%p.log" CUDA_VISIBLE_DEVICES=0 \
    "${PYTEST[@]}" "${nodes[@]}" --perf-node-rank 0 --benchmark-json "$json" > "$STATE/node0.log" 2>&1
  local rc=$?
  wait "$follower"; local rc1=$?
  cat "$STATE/node0.log" >> "$LOG"; echo "--- node 1" >> "$LOG"; cat "$STATE/node1.log" >> "$LOG"
  echo "run $n $name: node 0 exit $rc, node 1 exit $rc1, $((SECONDS - t0)) s: $(grep -E '(passed|failed)' "$STATE/node0.log" | tail -1)"
}

one_node() {  # NAME WORLD: one standalone run on WORLD GPUs (0 .. WORLD-1)
  local name=$1 world=$2 n; n=$(next_run)
  local json="$STATE/runs/$(printf '%02d' "$n")-$name.json" t0=$SECONDS
  echo "=== run $n: $name on one node, $world GPUs" | tee -a "$LOG"
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((world - 1))) "${PYTEST[@]}" --perf-label "$name" --benchmark-json "$json" \
    > "$STATE/node0.log" 2>&1
  local rc=$?
  cat "$STATE/node0.log" >> "$LOG"
  echo "run $n $name: exit $rc, $((SECONDS - t0)) s: $(grep -E '(passed|failed)' "$STATE/node0.log" | tail -1)"
}

for s in "$@"; do
  case $s in
    runs=*) for _ in $(seq "${s#runs=}"); do two_nodes sockets; done ;;
    slowed|slowed=*) f=0.01; [ "$s" != slowed ] && f=${s#slowed=}
                     spec=$(for c in $SLOWDOWN_CELLS; do echo "$c:$f"; done | paste -sd,)
                     two_nodes slowed -p ampbench.slowdown --perf-slowdown "$spec" ;;
    nvlink) one_node nvlink 2 ;;
    standalone=*) world=${WORLD:-$(nvidia-smi -L | wc -l)}
                  for _ in $(seq "${s#standalone=}"); do one_node "standalone-x$world" "$world"; done ;;
    table) python3 dev/dist_table.py "$STATE/runs" "$STATE"/nccl-*.log | tee "$STATE/table.txt" ;;
  esac
done

# what $OUT gets: the table, the history, the last JSON of each kind, the log
cp "$STATE/history.sqlite" "$LOG" "$OUT/" 2>/dev/null
[ -f "$STATE/table.txt" ] && cp "$STATE/table.txt" "$OUT/"
for kind in sockets slowed nvlink standalone; do
  last=$(ls "$STATE/runs/"*-"$kind"*.json 2>/dev/null | tail -1)
  [ -n "$last" ] && cp "$last" "$OUT/last-$kind.json"
done
ls "$OUT"
