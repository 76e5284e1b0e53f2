#!/usr/bin/env bash
# The main job, pytest perf/, under --perf-memory-limit 15, 22 and 38 (a T4's, an L4's or A10G's, an A100
# 40GB's usable memory) and without it, on a GPU machine: one benchmark JSON, JUnit XML and log per limit
# into $OUT (default: memory-limit-out/ in the repository), then a table of passes, skips, failures and
# errors per limit, each skip's reason under a limit, and the memory each run's cells found left over when they
# started (the entries' memory_at_start).
#   bash dev/memory_limit_check.sh
#   LIMITS="15 none" PYTEST_ARGS="--perf-models resnet50,gpt" bash dev/memory_limit_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-memory-limit-out}
LIMITS=${LIMITS:-15 22 38 none}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# shellcheck disable=SC2206  # PYTEST_ARGS is split into words on purpose
EXTRA=(${PYTEST_ARGS:-})

for limit in $LIMITS; do
  args=()
  [ "$limit" != none ] && args=(--perf-memory-limit "$limit")
  t0=$SECONDS
  echo "=== limit $limit: pytest perf/ ${args[*]} ${EXTRA[*]}"
  python3 -m pytest perf/ -p no:cacheprovider -rfEs --perf-require-gpu "${args[@]}" "${EXTRA[@]}" \
    --benchmark-json "$OUT/limit-$limit.json" --junitxml "$OUT/limit-$limit.xml" > "$OUT/limit-$limit.log" 2>&1
  echo "limit $limit: exit $? in $((SECONDS - t0)) s; $(tail -n 1 "$OUT/limit-$limit.log")"
done

python3 - "$OUT" $LIMITS <<'EOF'
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

out, limits = Path(sys.argv[1]), sys.argv[2:]
GIB = 2**30
print(f"\n{'limit':>6}  {'passed':>6}  {'skipped':>7}  {'failed':>6}  {'errors':>6}  {'left over at a cell start, most (GiB)':>40}")
details = []
for limit in limits:
    counts = {"passed": 0, "skipped": 0, "failed": 0, "errors": 0}
    skips = []
    xml = out / f"limit-{limit}.xml"
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            kinds = [child.tag for child in case]
            if "error" in kinds:
                counts["errors"] += 1
            elif "failure" in kinds:
                counts["failed"] += 1
            elif "skipped" in kinds:
                counts["skipped"] += 1
                skips.append((case.get("name"), case.find("skipped").get("message", "")))
            else:
                counts["passed"] += 1
    held = []
    doc = out / f"limit-{limit}.json"
    if doc.exists():
        data = json.loads(doc.read_text())
        for entry in data.get("benchmarks", []) + data.get("ampbench_untimed", []):
            reading = (entry.get("extra_info") or {}).get("memory_at_start")
            if reading:
                held.append((reading["reserved_bytes"] / GIB, reading["allocated_bytes"] / GIB, entry.get("name")))
    most = max(held) if held else None
    most_text = f"{most[0]:.2f} ({most[1]:.2f} allocated) before {most[2]}" if most else "-"
    print(f"{limit:>6}  {counts['passed']:>6}  {counts['skipped']:>7}  {counts['failed']:>6}  {counts['errors']:>6}  {most_text}")
    details.append((limit, skips, held))
for limit, skips, held in details:
    print(f"\n--- limit {limit}: skips ({len(skips)})")
    for name, message in skips:
        print(f"  {name}: {message[:300]}")
    print(f"--- limit {limit}: left over when each cell started (GiB reserved, allocated)")
    for reserved, allocated, name in held:
        print(f"  {reserved:6.2f} {allocated:6.2f}  {name}")
EOF
