"""Memory: the peak of one training step per precision mode with a breakdown of where it goes, the
largest batch each mode fits under a memory cap, and its throughput there.

The largest-batch search (``find_largest_batch``) is pure logic over a ``measure(batch) -> peak bytes``
function that raises ``torch.OutOfMemoryError`` when a batch does not fit, so it is tested on the CPU
against fake steps; ``measure_memory`` wires it to real training steps on a CUDA device. The quick tier
measures the default batch only (``measure_memory(search=False)``): the search is most of the memory
cells' time.

How the search spends its steps (each real step at a large batch costs up to a few seconds):

0. Where this GPU's baseline holds a largest batch found under the same cap and allocator settings,
   the search starts there, on the baseline's grid: P is that batch and step 1 is skipped. Unchanged,
   the cell is settled by the two confirming steps of 2; changed, the bracket of 3 takes over from
   them. The answer is confirmed by real steps either way; the start only saves the steps spent
   looking: most of the memory tests' time (docs/design.md, "Where the constants come from").
1. Two measured sizes: the model's default batch (measured anyway for the peak figure) and half-way
   to where a line through it and the fixed memory (weights, optimizer state) puts the largest batch.
   A line through those lands near the cap; a second size at twice a small default batch did not
   (lstm_lm's line through batches 20 and 40 overshot by 25-400%, because its smallest batches carry
   a workspace that larger ones amortise).
2. The line predicts the largest batch P under the cap. One step at P + g (must not fit), then one at
   P (must fit): the prediction is confirmed in two steps, and the trainer is left warm at P for timing.
3. A miss is corrected inside the bracket [largest fit, smallest failure]: first with the line refitted
   through the largest fits, then by galloping down from a failure (never past the bracket's middle),
   then by bisection. Every step lies strictly inside the bracket, so the search always ends, in a few
   steps when the miss is small.

Batches are searched on a grid of step g, a power of two of about 1/64 of the predicted batch (1 below
128): "the next size up" is P + g. A resolution finer than ~1.5% would cost more steps than it tells.

cuDNN benchmark mode is off for memory cells: autotuning at every new batch size would try algorithms
whose workspaces make the peak depend on timing, and cost seconds per size. So the throughput at the
largest batch is with cuDNN's heuristic algorithms, on both sides of its ratio.

The cap is a budget on top of what the process holds when a cell starts, enforced by the caching
allocator (``set_per_process_memory_fraction``) during the search and lifted afterwards, so results
compare across GPUs of different sizes and other tests get the whole card. The default is 90% of the
card, at most 24 GiB. The steps timed at the largest batch run with the cap lifted: under it, cuDNN's
workspace requests make the allocator flush its cache at every convolution.
The search's own last step at that batch is their warm-up (it chose the algorithms and cached the
blocks), so no extra step is spent unless the search ended on a failure.

OOM is an expected event: after each one every reference to the failed step is dropped outside the
``except`` block, the trainer's gradients and loss-scaler bookkeeping are reset, ``gc.collect()`` runs
and the allocator's cache is emptied, so the next step starts from the state the last good one left.

The modules, by job: `search` is the largest-batch search (pure logic, tested on the CPU); `breakdown`
says where a step's memory goes; `probe` is the device side (the cap, real steps and their
out-of-memory recovery, ``measure_memory``); `recovery` shows that recovery on its own; `judging` turns a cell's figures
into a verdict against its baseline.
The names below are re-exported for ``from ampbench.memory import ...``.
"""

from ampbench.device import is_out_of_memory
from ampbench.memory.breakdown import Breakdown, resident_bytes
from ampbench.memory.judging import (
    BASELINE_FIGURES,
    CAP_MATCH,
    DEFAULT_BATCH_FIGURES,
    NOT_SEARCHED,
    SEARCH_FIGURES,
    MemoryJudgement,
    allocator_config,
    baseline_figures,
    judge,
    memory_figures,
    memory_record,
    same_budget,
    search_start,
    searched,
    summary,
)
from ampbench.memory.probe import (
    DEFAULT_CAP_CEILING,
    DEFAULT_CAP_FRACTION,
    FREE_SHARE,
    MAX_BATCH_FACTOR,
    MAX_TIMED_ROUNDS,
    MAX_WARMUP_STEPS,
    NO_CUDA_REASON,
    STEPS_PER_PROBE,
    TIMED_SECONDS,
    CellMemory,
    MemoryMeasurementError,
    batch_limit,
    cap_bytes_for,
    default_cap_bytes,
    measure_memory,
    nominal_cap_bytes,
    nominal_cap_for,
    process_memory_limit,
    step_breakdown,
    warm_up_optimizer,
)
from ampbench.memory.recovery import OomRecovery, demonstrate_oom_recovery
from ampbench.memory.search import (
    BATCH_RESOLUTION,
    FIRST_PEAK_TRUST,
    GIB,
    LINE_SPACING,
    CapTooSmall,
    Probe,
    SearchError,
    SearchResult,
    find_largest_batch,
    gib,
    granule,
    try_step,
)

__all__ = [
    "BASELINE_FIGURES", "BATCH_RESOLUTION", "CAP_MATCH", "DEFAULT_BATCH_FIGURES", "DEFAULT_CAP_CEILING",
    "DEFAULT_CAP_FRACTION", "FIRST_PEAK_TRUST", "FREE_SHARE", "GIB", "LINE_SPACING", "MAX_BATCH_FACTOR",
    "MAX_TIMED_ROUNDS", "MAX_WARMUP_STEPS", "NOT_SEARCHED", "NO_CUDA_REASON", "STEPS_PER_PROBE", "SEARCH_FIGURES",
    "TIMED_SECONDS", "Breakdown", "CapTooSmall",
    "CellMemory", "MemoryJudgement", "MemoryMeasurementError", "OomRecovery", "Probe", "SearchError",
    "SearchResult", "allocator_config", "baseline_figures", "batch_limit", "cap_bytes_for", "default_cap_bytes",
    "demonstrate_oom_recovery", "memory_figures", "find_largest_batch", "gib", "granule", "resident_bytes",
    "is_out_of_memory", "judge", "measure_memory", "memory_record", "nominal_cap_bytes", "nominal_cap_for",
    "process_memory_limit", "same_budget", "search_start", "searched", "step_breakdown", "summary", "try_step",
    "warm_up_optimizer",
]
