"""Merge baseline files of one GPU recorded by separate runs, entry by entry, the latest recording winning.

    python3 -m scripts.merge_baselines baselines/nvidia-h100-80gb-hbm3.json OUT1/nvidia-....json OUT2/...

The first file is the one written (atomically); each run starts from the committed file,
so two runs' files each hold the other's old entries: per test id, the entry with the latest
``recorded`` stamp is kept.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ampbench.baselines import load_document, write_atomic


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    docs = [load_document(Path(p)) for p in argv]
    gpus = {d["gpu"] for d in docs}
    if len(gpus) != 1:
        print(f"merge_baselines: files of different GPUs: {sorted(gpus)}", file=sys.stderr)
        return 1
    entries: dict[str, dict] = {}
    for doc in docs:
        for test_id, entry in doc["entries"].items():
            if test_id not in entries or entry["recorded"] > entries[test_id]["recorded"]:
                entries[test_id] = entry
    merged = dict(docs[0], entries=dict(sorted(entries.items())))
    write_atomic(Path(argv[0]), merged)
    print(f"{argv[0]}: {len(entries)} entries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
