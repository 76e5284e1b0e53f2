"""Distributed cells (``--perf-world-size``, perf/test_distributed*.py): the ranks of a launch, resolved
at configure time, and the baselines of N GPUs."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ampbench.plugin import acts
from ampbench.plugin.session import DISTRIBUTED_STORE_KEY, open_baselines, perf_settings_of

if TYPE_CHECKING:  # the stores load where a GPU run opens them
    from ampbench.baselines.source import ReferenceSource

WORLD_SIZE_KEY = pytest.StashKey[int]()


@pytest.hookimpl(trylast=True)  # after ampbench.plugin.session has made the settings it reads
def pytest_configure(config: pytest.Config) -> None:
    if acts(config):
        configure_world_size(config)


def configure_world_size(config: pytest.Config) -> None:
    import torch

    from ampbench.distributed.variants import resolve_world_size

    settings = perf_settings_of(config)
    device = settings.device
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        config.stash[WORLD_SIZE_KEY] = resolve_world_size(config.option.perf_world_size, device, gpus, cpus,
                                                          settings.nodes.count)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def world_size_of(config: pytest.Config) -> int:
    """Ranks of a distributed launch, over every node."""
    return config.stash[WORLD_SIZE_KEY]


@pytest.fixture(scope="session")
def perf_world_size(pytestconfig: pytest.Config, perf_device) -> int:
    """Ranks of a distributed launch, over every node; skips the test where fewer than two can run."""
    import torch

    from ampbench.distributed.variants import world_size_skip_reason

    n = pytestconfig.stash[WORLD_SIZE_KEY]
    gpus = torch.cuda.device_count() if perf_device.type == "cuda" else 0
    reason = world_size_skip_reason(n, perf_device, gpus, perf_settings_of(pytestconfig).nodes.count)
    if reason:
        pytest.skip(reason)
    return n


@pytest.fixture(scope="session")
def distributed_baseline_store(pytestconfig: pytest.Config, perf_settings, perf_world_size) -> ReferenceSource | None:
    """Baselines of N GPUs of this model, baselines/<gpu-slug>-x<N>.json (-x<N>-<M>nodes.json over M
    hosts, whose collectives cross a network), with each cell's speedups
    learned from its runs on N GPUs where a history is kept; None on the CPU. The tests write what they
    record themselves (the session's teardown hook writes only the 1-GPU store)."""
    from ampbench import device as devices
    from ampbench.plugin.history import history_of
    from ampbench.results import cluster_name

    if perf_settings.device.type != "cuda":
        return None
    name, nodes = devices.device_name(perf_settings.device), perf_settings.nodes.count
    store = open_baselines(perf_settings.baseline_dir, cluster_name(name, perf_world_size, nodes),
                           devices.cluster_slug(name, perf_world_size, nodes))
    history = history_of(pytestconfig)
    if history is None:
        return store
    from ampbench.history.reference import DISTRIBUTED_CELLS, HistoryBaselines

    # the run row's card is the first GPU's: a distributed series is filed by it too
    learned = HistoryBaselines(store, history, perf_settings.tolerance, cells=DISTRIBUTED_CELLS,
                               card=devices.card_uuid(perf_settings.device))
    pytestconfig.stash[DISTRIBUTED_STORE_KEY] = learned  # the end of the run says how far its cells have learned
    return learned
