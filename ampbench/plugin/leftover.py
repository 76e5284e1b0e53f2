"""Memory left over between cells: what each cell finds reserved when it starts, and what is let go when a cell
ends.

What can outlive a cell, read off the fixtures' scopes and caches:

- kept on purpose, and still kept: the fp32 side of the model being timed (``suite.speed._fp32_cache``,
  dropped at the next model) and a compiled versus side several cells are timed against
  (``speed.compiled.VersusSides``); the other caches hold figures, no tensors (``suite.memory._fp32_memories``,
  ``suite.convergence._results``);
- a failed cell's frames: pytest keeps the last failure's exception for post-mortem debugging
  (sys's last_value and last_traceback) until the next test's call, after that test's setup has built
  its sides. Those frames hold the failed cell's trainers, and a failing speed cell's fixtures the fp32
  side its cache has since dropped, so the next model's side was built beside the last one's;
- reference cycles of a failed step (its traceback) until the collector runs, and the allocator's cached
  blocks until they are emptied;
- cuBLAS's workspaces, one per handle and stream, kept for the life of the process: each graph capture runs
  on a stream of torch's pool. Under --perf-memory-limit they are given back too, and the next side primes
  its own again (``device.prime_libraries``) before it measures, so its figures count them as before.

So at each cell's teardown, after its fixtures' own: the post-mortem exception is dropped, the collector
runs, under a limit the cuBLAS workspaces go, and the allocator's cache is emptied. Nothing measured
changes: every peak is taken over what was allocated before its trainer, and every timing is of replays.
Each cell's entry says what was reserved and allocated when it started (``memory_at_start``), so a GPU run
shows what is left over.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ampbench.plugin.entries import cell_of, item_entry

LEFTOVER_KEY = "memory_at_start"  # the entry's key: bytes reserved and allocated when the cell started
_READING = pytest.StashKey[dict]()
_READINGS = pytest.StashKey[list]()  # (nodeid, reading) of each cell, in run order


def _cuda_device(config: pytest.Config) -> Any:
    from ampbench.plugin.session import SETTINGS_KEY

    settings = config.stash.get(SETTINGS_KEY, None)
    return settings.device if settings is not None and settings.device.type == "cuda" else None


def held_reading(device: Any) -> dict[str, int]:
    """What this process holds on `device` now: bytes reserved by the caching allocator and allocated."""
    import torch

    return {"reserved_bytes": int(torch.cuda.memory_reserved(device)),
            "allocated_bytes": int(torch.cuda.memory_allocated(device))}


def drop_post_mortem() -> None:
    """Forget the last failure's exception, which pytest keeps with its frames for a debugger; a debugger
    (--pdb) has had it by teardown."""
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)


def release_between_cells(device: Any, limited: bool) -> None:
    """What a cell leaves behind, let go (this module's docstring says what and why)."""
    from ampbench import device as devices

    drop_post_mortem()
    if limited and device.type == "cuda":
        import torch

        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
            devices.unprime(device)
    devices.release(device)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    device = _cuda_device(item.config)
    if device is not None and cell_of(item) is not None:
        item.stash[_READING] = held_reading(device)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield  # the cell's own fixtures first
    device = _cuda_device(item.config)
    if device is None or cell_of(item) is None:
        return
    from ampbench.plugin.session import SETTINGS_KEY

    release_between_cells(device, item.config.stash[SETTINGS_KEY].memory_limit_gib is not None)
    reading = item.stash.get(_READING, None)
    entry = item_entry(item)
    if reading is not None:
        item.config.stash.setdefault(_READINGS, []).append((item.nodeid, reading))
        if entry is not None:
            entry[LEFTOVER_KEY] = reading


def leftover_line(readings: list[tuple[str, dict[str, int]]]) -> str | None:
    """The summary's line: the most any cell found reserved when it started, and which."""
    if not readings:
        return None
    nodeid, most = max(readings, key=lambda r: r[1]["reserved_bytes"])
    return (f"ampbench: memory left over when a cell started: at most {most['reserved_bytes'] / 2**30:.2f} GiB "
            f"reserved ({most['allocated_bytes'] / 2**30:.2f} GiB allocated), before {nodeid.split('::')[-1]}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    line = leftover_line(config.stash.get(_READINGS, []))
    if line:
        terminalreporter.write_line(line)
