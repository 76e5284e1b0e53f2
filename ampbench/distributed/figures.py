"""A distributed cell's figures from its ranks' JSON documents (``rank{R}.json`` of
``ampbench.distributed.speed_worker``): pure arithmetic, no torch.distributed.

Two clocks per round and side. The wall-clock block ends when the slowest rank's does (a DDP step ends
when its last rank's does), so a round's wall time is the slowest rank's. The device time is a held
block of CUDA-graph replays of each rank's step ("graph", ``graphed``), or where a step could not be
captured the profiler's busy time of a block of eager steps on each rank's GPU (the union of every
kernel, memcpy and memset, NCCL's included; "kernels"), per step; a round's device time is the rank's
that waited least (``per_round_min``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from ampbench.speed.hostload import is_host_bound
from ampbench.stats import SpeedupEstimate, estimate_speedup, median
from ampbench.verdict import Verdict

# where some rank could not capture a side's step with its collectives as a CUDA graph (the ranks' reasons follow)
GRAPH_FALLBACK = ("a step with its collectives was not captured as a CUDA graph on every rank: busy time of "
                  "profiled eager steps")
# gloo ranks work on the host: no kernels, no device time apart from the wall clock's
NO_DEVICE = "gloo ranks on the CPU run no kernels: no device time"


@dataclass(frozen=True)
class DistFigures:
    speedup: SpeedupEstimate  # the mode over the fp32 side, both under the same parallelism
    efficiency: SpeedupEstimate | None  # N-GPU samples/s / (N x 1-GPU samples/s), per round
    throughput_per_gpu: float  # samples/s per GPU of the mode (median round)
    throughput_per_gpu_ref: float
    comm_share: float | None  # mean over ranks
    comm_overlap: float | None
    world_size: int
    idle_share: float | None = None  # the most idle rank's share of the mode's profiled steps with no kernel
    device: SpeedupEstimate | None = None  # the speedup in device time (``per_round_min``); None off CUDA
    device_method: str = "wall"  # "graph": held replays; "kernels": the profiler's busy time; "wall": none
    device_fallback: str | None = None  # why not a CUDA graph's replay (or, off CUDA, why no device time)
    device_step_s: float | None = None  # the mode's device time per step (median round)
    device_step_s_ref: float | None = None
    # the scaling efficiency in device time: 1-GPU graph replays over the N-GPU ones (``device_efficiency``)
    device_efficiency: SpeedupEstimate | None = None

    @property
    def host_bound(self) -> bool:
        """Whether the GPU of some rank sat idle, waiting for its host, long enough to call the mode's
        step host-bound (``hostload.is_host_bound``)."""
        return self.idle_share is not None and is_host_bound(self.idle_share)


def host_bound_verdict(verdict: Verdict, host_bound: bool) -> Verdict:
    """A wall-clock figure's verdict. Where the mode's step is host-bound, a wall-clock drop below the
    line is inconclusive, not a regression: the GPU had idle time to absorb more work, and the host that
    launches the steps sets the pace (docs/design.md, "Device time, wall time, and the gate"). As in the
    single-GPU suite, where a wall-only drop is a ``HostOverhead`` warning, a slower host is reported,
    never failed. Device time replayed as graphs leaves the host out and is judged as it is; the profiler's
    busy time does not, and is softened too (``judging.leaves_host_out``)."""
    return Verdict.INCONCLUSIVE if host_bound and verdict is Verdict.REGRESSION else verdict


def _rounds(docs: Sequence[dict], key: str) -> list[tuple[float, ...]]:
    """Per round, every rank's figure under `key`."""
    rounds = {len(d[key]) for d in docs}
    if len(rounds) != 1:
        raise ValueError(f"ranks timed different numbers of rounds for {key}: {sorted(rounds)}")
    return list(zip(*(d[key] for d in docs)))


def per_round_max(docs: Sequence[dict], key: str) -> list[float]:
    """Per round, the slowest rank's step time: a DDP step ends when its last rank's does."""
    return [max(ts) for ts in _rounds(docs, key)]


def per_round_min(docs: Sequence[dict], key: str) -> list[float]:
    """Per round, the least busy rank's device time per step. A rank's device time counts its NCCL kernels
    whole, and an NCCL kernel runs from its launch until every peer has joined: a rank whose host
    launched the collective early spins in it, busy, while a slower host's peer catches up. The rank
    whose GPU waited least in its collectives is the one whose own host was slowest to reach them, and
    its busy time is the step's work without any host's waiting in it: the least of the ranks'. (The
    ranks do the same work, each on its own batch, so no rank's time is short for having less to do.)
    Held graph replays leave only the start of a block to wait on, the ranks' skew past the barrier,
    and the rank whose block began last waited least."""
    return [min(ts) for ts in _rounds(docs, key)]


def _rank_figures(docs: Sequence[dict], key: str) -> list[float]:
    """The ranks' finite figures under `key` (none off CUDA, where there are no kernels to read)."""
    return [v for d in docs if isinstance(v := d.get(key), (int, float)) and math.isfinite(v)]


def mean_over_ranks(docs: Sequence[dict], key: str) -> float | None:
    vs = _rank_figures(docs, key)
    return sum(vs) / len(vs) if vs else None


def max_over_ranks(docs: Sequence[dict], key: str) -> float | None:
    return max(_rank_figures(docs, key), default=None)


def device_figures(docs: Sequence[dict], confidence: float) -> dict:
    """The device-time fields of ``DistFigures``: the speedup of the per-round device times
    (``per_round_min``, paired rounds as ``estimate_speedup`` takes them) where every rank timed them,
    and how they were measured."""
    methods = [d.get("device_method", "wall") for d in docs]
    if len(set(methods)) != 1:
        raise ValueError(f"ranks measured device time differently: {methods}")
    method = methods[0]
    fallback = docs[0].get("device_fallback", NO_DEVICE if method == "wall" else None)
    out = {"device_method": method, "device_fallback": fallback}
    if method == "wall" or not all(d.get("device_ref_times") and d.get("device_mode_times") for d in docs):
        return out
    ref, mode = per_round_min(docs, "device_ref_times"), per_round_min(docs, "device_mode_times")
    return {**out, "device": estimate_speedup(ref, mode, confidence), "device_step_s": median(mode),
            "device_step_s_ref": median(ref), "device_efficiency": device_efficiency(docs, method, mode, confidence)}


def device_efficiency(docs: Sequence[dict], method: str,
                      mode: list[float], confidence: float) -> SpeedupEstimate | None:
    """The scaling efficiency in device time, per round the 1-GPU side's graph replays (rank 0's, between
    the rounds) over the N-GPU mode's (``per_round_min``): t_1 / t_N, as the wall-clock efficiency. Only
    where the N-GPU side was replayed as a graph too: a graph against the profiler's busy time would
    compare two clocks."""
    single = next((d["single_device_times"] for d in docs if d.get("single_device_times")), None)
    if method != "graph" or not single or len(single) != len(mode):
        return None
    return estimate_speedup(single, mode, confidence)


def merge_ranks(docs: Sequence[dict], confidence: float) -> DistFigures:
    """Figures of one cell from every rank's document (``rank{R}.json``)."""
    if not docs:
        raise ValueError("no rank documents")
    world = docs[0]["world_size"]
    if sorted(d["rank"] for d in docs) != list(range(world)):
        raise ValueError(f"rank documents of ranks {sorted(d['rank'] for d in docs)}, world size {world}")
    batch = docs[0]["batch_size"]
    ref, mode = per_round_max(docs, "ref_times"), per_round_max(docs, "mode_times")
    speedup = estimate_speedup(ref, mode, confidence)
    single = next((d["single_times"] for d in docs if d.get("single_times")), None)
    # per-rank batches are the same on one GPU and on N (weak scaling), so per round
    # (N B / t_N) / (N B / t_1) = t_1 / t_N
    efficiency = estimate_speedup(single, mode, confidence) if single else None
    return DistFigures(
        speedup=speedup, efficiency=efficiency,
        throughput_per_gpu=batch / median(mode), throughput_per_gpu_ref=batch / median(ref),
        comm_share=mean_over_ranks(docs, "comm_share"),
        comm_overlap=mean_over_ranks(docs, "comm_overlap"),
        world_size=world,
        idle_share=max_over_ranks(docs, "idle_share"),
        **device_figures(docs, confidence),
    )
