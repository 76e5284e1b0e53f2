"""What `ampbench history changes` prints of one change: the runs around it, what differs between them
(label, suite revision, software, card), and the kernels whose time moved most between its two
segments. Pure: the caller reads the runs and kernel lists from the store.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from ampbench.history.changes import Change
from ampbench.history.rows import RunFacts
from ampbench.kernel_diff import kernel_changes
from ampbench.printable import plural
from ampbench.stats import median

# the software layers in the order a reader looks for them; others a run records follow, sorted
SOFTWARE_ORDER = ("torch", "cuda", "cudnn", "driver", "triton", "torchao")
_TENFOLD = math.log(10)
_LARGEST_LN = math.log(sys.float_info.max)


def segment_kernels(per_run: Sequence[Sequence[Mapping[str, Any]] | None]) -> list[dict]:
    """One kernel summary for the runs of a segment: each kernel's median ms per step over the runs that
    list it, where at least half of the runs with a list do (each run lists its top kernels only, so a
    kernel near the cut is in some lists and not others), largest first."""
    lists = [k for k in per_run if k]
    times: dict[str, list[float]] = {}
    for kernels in lists:
        for k in kernels:
            if isinstance(k, Mapping) and isinstance(k.get("name"), str) and isinstance(k.get("ms"), (int, float)):
                times.setdefault(k["name"], []).append(float(k["ms"]))
    kept = [{"name": name, "ms": median(ms)} for name, ms in times.items() if 2 * len(ms) >= len(lists)]
    return sorted(kept, key=lambda k: -k["ms"])


def shown_change(step: float) -> str:
    """A move in ln units as a reader takes it: '+1.50%' within ten times either way (the ln step, as the
    tolerances are given), beyond that the factor it is ('x1e+307', 'x1/2.5e+04'), not '+70746%'."""
    if abs(step) <= _TENFOLD:
        return f"{step:+.2%}"
    factor = math.exp(min(abs(step), _LARGEST_LN))
    return f"x{factor:.2g}" if step > 0 else f"x1/{factor:.2g}"


def _shown(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def differences(before: RunFacts, after: RunFacts) -> list[str]:
    """'name old -> new' for each thing the two runs record differently: label, suite revision, each
    software layer, and the card (by UUID, where both runs name one)."""
    pairs = [("label", before.label, after.label), ("suite revision", before.suite_revision, after.suite_revision)]
    old, new = before.software or {}, after.software or {}
    keys = [k for k in SOFTWARE_ORDER if k in old or k in new] + sorted((set(old) | set(new)) - set(SOFTWARE_ORDER))
    pairs += [(key, old.get(key), new.get(key)) for key in keys]
    cards = getattr(before, "card_uuid", None), getattr(after, "card_uuid", None)
    if all(cards):
        pairs.append(("card", *cards))
    return [f"{name} {_shown(a)} -> {_shown(b)}" for name, a, b in pairs if _shown(a) != _shown(b)]


def _run_line(role: str, run: RunFacts, index: int) -> str:
    facts = [f"run {run.id}", run.when[:16].replace("T", " ")]
    if run.label:
        facts.append(f"label {run.label}")
    if run.suite_revision:
        facts.append(f"suite {run.suite_revision}")
    return f"  {role}: #{index + 1} " + ", ".join(facts)


def describe_change(change: Change, before: RunFacts, after: RunFacts,
                    kernels_before: Sequence[Mapping[str, Any]] | None = None,
                    kernels_after: Sequence[Mapping[str, Any]] | None = None, top: int = 5) -> list[str]:
    """The lines of one change: what moved and where, the runs around it, what differs between them, and
    the kernels of the two segments (``segment_kernels``) that moved most (``kernel_diff.kernel_changes``)."""
    if (before.id, after.id) != (change.run_before.run_id, change.run_after.run_id):
        raise ValueError(f"runs {before.id} and {after.id} are not the runs around the change "
                         f"({change.run_before.run_id} and {change.run_after.run_id})")
    series = change.series
    accepted = " (accepted)" if change.accepted else ""
    lines = [f"{series.test_id} {series.figure} on {series.gpu}: {change.level_before:.4g} -> "
             f"{change.level_after:.4g} ({shown_change(change.step)}) from run #{change.index + 1} of "
             f"{len(series.points)}, "
             f"{plural(len(change.before), 'run')} before and {len(change.after)} after{accepted}",
             _run_line("before", before, change.index - 1), _run_line("after", after, change.index)]
    differ = differences(before, after)
    lines.append("  differs: " + "; ".join(differ) if differ else
                 "  differs: nothing the history records (label, suite revision, software and card alike)")
    kernels = kernel_changes(list(kernels_before or []), list(kernels_after or []), top, "the runs before")
    lines.append(f"  {kernels}" if kernels else "  kernels: " + (
        "no kernel moved between the segments" if kernels_before and kernels_after
        else "no kernel summary on both sides"))
    return lines
