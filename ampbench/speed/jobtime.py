"""The main job's time, modelled from each speed cell's step times (`estimate`), and the time budget
(``--perf-time-budget``) that bounds it.

A speed cell spends its time in steps of its two sides, and how many steps is fixed by the policy
(``sides.policy_for``), not by the card: each side it builds takes a first step, a warm-up of at least
`warmup_steps` and `warmup_seconds`, a probe, a peak step, the capture's steps, a profiled block and the
idle check's held block; each round takes one timed block per side, of about `block_seconds` but never
less than one step; the judged device-time ratio takes its first look's rounds (5 against a baseline, 8
without one), the reported wall-clock ratio its own (4 or 6) in half-length blocks, and a step after
them checks that the mode trained. That is a cell's fewest seconds. At most, each set of rounds goes on
to `extend_to` rounds or `decide_seconds`, and a regression takes a confirming set as long.

On a card k times slower, every step is k times longer, but a block stays one step at least: once a
side's step is longer than `block_seconds`, its blocks, and so its rounds, grow with k. The model takes
this run's measured step times and k (`slowdown`); the figures it gives on another card are a model, not
a measurement.

The budget never turns a verdict into a pass: a cell whose fewest rounds no longer fit is not run
(skipped, saying so), and a judged ratio whose looks run out of time stops undecided, inconclusive
(``sequential.decide``, ``gate.judge.judge``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

from ampbench.gate.looks import REPORTED_FIRST_LOOK
from ampbench.speed.devicetime import SIDE_STREAM_WARMUP
from ampbench.speed.held import PROFILED_HOLD_S
from ampbench.speed.sides import FIXED_MIN_ROUNDS, LOOK_CONFIDENCE, PROFILE_STEPS, SpeedPolicy
from ampbench.speed.timing import PROBE_STEPS, steps_per_block
from ampbench.stats import min_rounds as fewest_rounds

BUDGET_FLAG = "--perf-time-budget"


@dataclass(frozen=True)
class CellSteps:
    """One speed cell's step times in seconds: its fp32 side's and its mode's (device time), and whether it
    builds its fp32 side (the first cell of its model does; the others reuse it)."""

    name: str
    fp32_step_s: float
    mode_step_s: float
    builds_fp32: bool = True
    judged: bool = True  # held against a baseline (5 rounds at the first look), else 8 rounds at least


@dataclass(frozen=True)
class CellTime:
    name: str
    fewest_s: float  # every phase at its fewest rounds
    most_s: float  # every set of rounds extended to its limit, and a confirming set


@dataclass(frozen=True)
class JobTime:
    cells: tuple[CellTime, ...]
    slowdown: float

    @property
    def fewest_s(self) -> float:
        return sum(c.fewest_s for c in self.cells)

    @property
    def most_s(self) -> float:
        return sum(c.most_s for c in self.cells)


def block_s(step_s: float, block_seconds: float) -> float:
    """One timed block of a side: whole steps, at least one, about `block_seconds` long."""
    return steps_per_block(step_s, block_seconds) * step_s


def prepare_s(step_s: float, policy: SpeedPolicy) -> float:
    """A side's preparation in steps: its first step, the warm-up and its probe, the peak step, the capture
    (side-stream steps, the captured step, the first replay), a profiled block and the idle check's held
    block. Building the model and compiling are left out: they follow the host, not the card."""
    warm = max(policy.warmup_steps * step_s, policy.warmup_seconds)
    probe = steps_per_block(step_s, 0.1, max_steps=PROBE_STEPS) * step_s
    capture = (SIDE_STREAM_WARMUP + 2) * step_s
    profile = steps_per_block(step_s, policy.block_seconds, max_steps=PROFILE_STEPS) * step_s
    idle = block_s(step_s, policy.block_seconds) + PROFILED_HOLD_S
    return step_s + warm + probe + step_s + capture + profile + idle


def rounds_s(fewest: int, fp32_s: float, mode_s: float, block_seconds: float) -> float:
    return fewest * (block_s(fp32_s, block_seconds) + block_s(mode_s, block_seconds))


def cell_time(cell: CellSteps, policy: SpeedPolicy, slowdown: float = 1.0) -> CellTime:
    """`cell`'s fewest and most seconds under `policy`, its step times `slowdown` times longer."""
    f, m = cell.fp32_step_s * slowdown, cell.mode_step_s * slowdown
    prep = prepare_s(m, policy) + (prepare_s(f, policy) if cell.builds_fp32 else 0.0)
    first = policy.first_look if cell.judged else max(policy.first_look, FIXED_MIN_ROUNDS)
    look = REPORTED_FIRST_LOOK if cell.judged else fewest_rounds(LOOK_CONFIDENCE)
    half = policy.block_seconds * policy.look_block_share
    device = rounds_s(first, f, m, policy.block_seconds)
    wall = rounds_s(look, f, m, half)
    fewest = prep + device + wall + m
    # each judged set runs to its limit of rounds or of seconds, whichever comes first; a regression
    # takes a confirming set alike
    one_set = min(rounds_s(policy.extend_to, f, m, policy.block_seconds), device + policy.decide_seconds)
    most = prep + 2 * one_set + rounds_s(fewest_rounds(LOOK_CONFIDENCE), f, m, half) + m
    return CellTime(cell.name, fewest, max(fewest, most))


def estimate(cells: Sequence[CellSteps], policy: SpeedPolicy, slowdown: float = 1.0) -> JobTime:
    """The speed cells' time in the main job, each from its step times, on a card `slowdown` times slower
    than the one they were measured on (1: this one)."""
    if not math.isfinite(slowdown) or slowdown <= 0:
        raise ValueError(f"a slowdown must be a positive number, got {slowdown}")
    return JobTime(tuple(cell_time(c, policy, slowdown) for c in cells), slowdown)


def remaining_s(deadline: float | None) -> float:
    """Seconds left of the run's budget (``PerfSettings.deadline``); infinite without one."""
    return math.inf if deadline is None else deadline - time.monotonic()


def out_of_budget(cell: CellSteps, policy: SpeedPolicy, deadline: float | None) -> str | None:
    """Why `cell` is not run: its fewest rounds (its sides being prepared already or not) take longer than
    the budget has left; None where they fit or there is no budget."""
    left = remaining_s(deadline)
    if math.isinf(left):
        return None
    need = cell_time(cell, policy).fewest_s
    if need <= left:
        return None
    return (f"{cell.name} not run: {BUDGET_FLAG} has {max(0.0, left):.1f} s left and the cell's fewest rounds take "
            f"about {need:.1f} s (not a pass: no verdict)")


# The slowdown the summary models the speed cells on: a T4-class card against an H100, the figure the
# quick tier's time is planned for (docs/design.md); an assumption until a slow card measures it.
SLOW_CARD = 15.0


def cells_of_records(records: Sequence[object]) -> list[CellSteps]:
    """The speed cells of a run's records, in run order, each with its device-time step times (the first of
    a model builds its fp32 side); a cell without them (an error, the CPU's wall clock only) is left out."""
    from ampbench.results import SpeedRecord
    from ampbench.results.ratios import DEVICE
    from ampbench.results.schema import FP32_SIDE, MODE_SIDE

    cells, built = [], set()
    for r in records:
        if not isinstance(r, SpeedRecord):
            continue
        ratio = r.ratio(DEVICE)
        mode, over = ratio.sides.get(MODE_SIDE), ratio.sides.get(FP32_SIDE)
        if mode is None or over is None or not mode.step_ms or not over.step_ms:
            continue
        cells.append(CellSteps(f"{r.model} {r.mode}", over.step_ms / 1e3, mode.step_ms / 1e3,
                               builds_fp32=r.model not in built, judged=ratio.baseline_speedup is not None))
        built.add(r.model)
    return cells


def summary_line(records: Sequence[object], policy: SpeedPolicy, slowdown: float = SLOW_CARD) -> str | None:
    """The run summary's line: the speed cells' modelled seconds on this card and on one `slowdown` times
    slower, from their own step times; None where no cell has them."""
    cells = cells_of_records(records)
    if not cells:
        return None
    here, slow = estimate(cells, policy), estimate(cells, policy, slowdown)
    return (f"ampbench: time model of the {len(cells)} speed cells' steps (ampbench.speed.jobtime): "
            f"{here.fewest_s:.0f} s at their fewest rounds here ({here.most_s:.0f} s at most); on a card "
            f"{slowdown:g}x slower {slow.fewest_s:.0f} s ({slow.most_s:.0f} s at most), modelled, not measured; "
            "model builds and compiles left out")
