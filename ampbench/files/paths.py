"""Where ampbench's files lie unless an option says otherwise, relative to the folder a run or a command
starts from (pytest's rootdir for a run, the working folder for the ``ampbench`` command): the suite's
run, ``ampbench history`` and ``ampbench baselines export`` agree on them by reading them here."""

from __future__ import annotations

from pathlib import Path

BASELINE_DIR = Path("baselines")  # one <gpu-slug>.json per GPU model (--perf-baseline-dir, --baseline-dir)
HISTORY = Path(".ampbench") / "history.sqlite"  # the run history, an SQLite file (--perf-history, --history)
UNAPPENDED = Path(".ampbench") / "unappended"  # runs a failing history did not take, for `history import`
