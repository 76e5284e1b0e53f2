#!/usr/bin/env bash
# Card admission on a GPU host: RUNS sessions of the speed cells on each of its cards (one CUDA_VISIBLE_DEVICES
# a session, the cards of a round at once), all into one history against the committed baseline files; then
# `ampbench history cards` over that history, and each session's card figures (the speed records' `card`).
#   RUNS=3 MODELS=mlp,gpt dev/cards_check.sh
# What it measures: the spread of a GPU model's cards in fp32 device time per step, and a card's run to run,
# against the constants of ampbench/history/cards.py (SPREAD_FLOOR, OUTLIER_Z; docs/design.md, "Card admission").
# Everything goes to $OUT/cards (OUT default gpu-run-out): history.sqlite, one benchmark JSON and log per
# session, cards.txt (the listing) and card-figures.txt (per session and cell: the card's figures).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-run-out}/cards; RUNS=${RUNS:-3}; MODELS=${MODELS:-mlp,wide_resnet28_10,resnet50,lstm_lm,gpt}
HISTORY=$OUT/history.sqlite
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
CARDS=$(python3 -c "import torch; print(' '.join(map(str, range(torch.cuda.device_count()))))")
[ -n "$CARDS" ] || { echo "cards_check: no CUDA device" >&2; exit 2; }

session() {  # session NAME CARD: the speed cells on one card, into the history
  local name=$1 card=$2
  CUDA_VISIBLE_DEVICES=$card python3 -m pytest perf/test_speed.py -p no:cacheprovider -q --perf-models "$MODELS" \
    --perf-history "$HISTORY" --perf-label "$name" --benchmark-json "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(grep -E '(passed|failed)' "$OUT/$name.log" | tail -1)"
}

for run in $(seq 1 "$RUNS"); do
  for card in $CARDS; do
    session "run-$run-gpu-$card" "$card" &
  done
  wait
done
python3 -m ampbench history cards --history "$HISTORY" | tee "$OUT/cards.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/card-figures.txt"
import sys
from pathlib import Path

from ampbench.results import SpeedRecord, load_run

for path in sorted(Path(sys.argv[1]).glob("run-*.json")):
    for cell in load_run(path).of_kind(SpeedRecord):
        c = cell.card
        print(f"{path.stem} {cell.test_id} uuid={c.uuid} step_ms={c.step_ms} level_ms={c.level_ms} cards={c.cards} "
              f"off={c.off} z={c.z} spread={c.spread} outlier={c.outlier} source={c.source} unchecked={c.unchecked}")
PY
