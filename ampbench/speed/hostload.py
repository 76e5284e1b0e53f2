"""How far an eager step waits on the host that launches it: the share of its wall time in which
the device sat idle, and whether that makes the step host-bound. One rule for the single-GPU cells and
the distributed ranks alike."""

from __future__ import annotations

from dataclasses import dataclass

# A step whose device sat idle for more than this share of its wall time waits on the host.
HOST_BOUND_IDLE_SHARE = 0.10


@dataclass(frozen=True)
class HostLoad:
    """How far one side's eager step waits on the host that launches it."""

    busy_ms: float  # device-busy time per step (the profiler's union of kernel intervals)
    wall_ms: float  # wall time per eager step
    overhead_ms: float  # wall minus busy: time per step the device waited for the host
    idle_share: float  # overhead / wall
    host_bound: bool  # idle_share above HOST_BOUND_IDLE_SHARE


def is_host_bound(idle_share: float) -> bool:
    """Whether a step whose device sat idle for `idle_share` of it waits on its host."""
    return idle_share > HOST_BOUND_IDLE_SHARE


def host_load(busy_seconds: float, wall_seconds: float) -> HostLoad:
    overhead = max(0.0, wall_seconds - busy_seconds)
    share = overhead / wall_seconds if wall_seconds > 0 else 0.0
    return HostLoad(busy_seconds * 1e3, wall_seconds * 1e3, overhead * 1e3, share, is_host_bound(share))
