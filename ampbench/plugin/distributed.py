"""The distributed cells (``--perf-world-size``, perf/test_distributed*.py): the ranks of a launch,
resolved at configure time, the baselines of N GPUs, and the nodes the launches span (``--perf-nnodes``,
``ampbench.distributed.nodes``). Node 0 runs the run's tests and starts every launch, and after its last
test that launches (the ``torchrun`` marker) the one that ends the others' following; every other node
runs no test, follows node 0's launches, and writes neither results nor history, so that node 0's are
the run's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ampbench.plugin import acts
from ampbench.plugin.options import follows
from ampbench.plugin.session import DISTRIBUTED_SOURCE_KEY, SETTINGS_KEY, open_baselines, perf_settings_of

if TYPE_CHECKING:  # the stores load where a GPU run opens them
    from ampbench.baselines.source import BaselineSource

WORLD_SIZE_KEY = pytest.StashKey[int]()


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
def distributed_baseline_source(pytestconfig: pytest.Config, perf_settings, perf_world_size) -> BaselineSource | None:
    """Baselines of N GPUs of this model, baselines/<gpu-slug>-x<N>.json (-x<N>-<M>nodes.json over M
    hosts, whose collectives cross a network), with each cell's speedups
    learned from its runs on N GPUs where a history is kept; None on the CPU. The tests write what they
    record themselves (the session's teardown hook writes only the 1-GPU baseline file)."""
    from ampbench import device as devices
    from ampbench.plugin.history import history_of
    from ampbench.results import cluster_name

    if perf_settings.device.type != "cuda":
        return None
    name, nodes = devices.device_name(perf_settings.device), perf_settings.nodes.count
    baseline_file = open_baselines(perf_settings.baseline_dir, cluster_name(name, perf_world_size, nodes),
                           devices.cluster_slug(name, perf_world_size, nodes))
    history = history_of(pytestconfig)
    if history is None:
        return baseline_file
    from ampbench.history.baseline_source import DISTRIBUTED_CELLS, HistoryBaselines

    # the run row's card is the first GPU's: a distributed series is filed by it too
    learned = HistoryBaselines(baseline_file, history, perf_settings.tolerance, cells=DISTRIBUTED_CELLS,
                               card=devices.card_uuid(perf_settings.device))
    pytestconfig.stash[DISTRIBUTED_SOURCE_KEY] = learned  # the end of the run says how far its cells have learned
    return learned


# -- the nodes ---------------------------------------------------------------------------------------

LAUNCHER_KEY = pytest.StashKey[object]()
# every launch's working directory: where ampbench and the model zoo import from (the checkout, or the
# installed packages' folder)
LAUNCH_ROOT = Path(__file__).resolve().parents[2]
LAST_KEY = pytest.StashKey[str]()  # node id of the last test that launches
MARKER = "torchrun"
NOTES_KEY = pytest.StashKey[list]()  # the lines a node says at the end: its following, node 0's last launch


def launcher_of(config: pytest.Config):
    """This pytest run's ``NodeLauncher``."""
    from ampbench.distributed.nodes import NodeLauncher

    if LAUNCHER_KEY not in config.stash:
        config.stash[LAUNCHER_KEY] = NodeLauncher(config.stash[SETTINGS_KEY].nodes, LAUNCH_ROOT)
    return config.stash[LAUNCHER_KEY]


def _nodes(config: pytest.Config):
    settings = config.stash.get(SETTINGS_KEY, None)
    return settings.nodes if settings is not None else None


# after ampbench.plugin.session has made the settings the world size reads, and after pytest-benchmark and
# junitxml have read their options
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if follows(config):
        _write_nothing(config)
    if acts(config):
        configure_world_size(config)


def _write_nothing(config: pytest.Config) -> None:
    """A following node's run writes neither JSON nor JUnit XML."""
    # node 0's files are the run's; on a shared file system a follower's empty ones would replace them
    benchmarks = config.pluginmanager.get_plugin("pytest-benchmark")  # its run object, as registered
    if benchmarks is not None:
        benchmarks.json = None
    from _pytest.junitxml import xml_key

    xml = config.stash.get(xml_key, None)
    if xml is not None:
        config.pluginmanager.unregister(xml)
        del config.stash[xml_key]


def pytest_report_header(config: pytest.Config) -> list[str]:
    nodes = _nodes(config)
    if nodes is None or nodes.standalone:
        return []
    role = ("runs the cells and writes the results" if nodes.leads
            else "runs no test of its own: its ranks take part in node 0's launches; node 0 holds the results")
    return [f"ampbench: {nodes.describe()}: {role}"]


def pytest_collection_finish(session: pytest.Session) -> None:
    launching = [item for item in session.items if item.get_closest_marker(MARKER)]
    if launching:
        session.config.stash[LAST_KEY] = launching[-1].nodeid


def _world_per_node(config: pytest.Config) -> int:
    return config.stash[SETTINGS_KEY].nodes.per_node(world_size_of(config))


def _end(config: pytest.Config) -> None:
    """Node 0's last launch, once, where the run has tests that launch."""
    nodes = _nodes(config)
    if nodes is None or nodes.standalone or not nodes.leads or LAST_KEY not in config.stash:
        return
    result = launcher_of(config).end(_world_per_node(config))
    if result is not None and not result.ok:
        config.stash.setdefault(NOTES_KEY, []).append(
            f"ampbench: the other nodes were not told that node 0's launches are over: {result.explain(1)}")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if item.config.stash.get(LAST_KEY, None) == item.nodeid:
        _end(item.config)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """A run stopped short of its last launching test (-x, an interrupt) still ends the following."""
    _end(session.config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """A follower's run: node 0's launches instead of tests."""
    config = session.config
    if not follows(config) or session.config.option.collectonly:
        return None
    from ampbench.distributed.nodes import follow

    nodes = config.stash[SETTINGS_KEY].nodes
    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"ampbench: node {nodes.rank}: {line}")

    if LAST_KEY not in config.stash:
        say("no test of this run launches: nothing to follow")
        return True
    say(f"following node 0's launches at {nodes.endpoint} with {_world_per_node(config)} rank(s); node 0 runs "
        "the tests and holds the results")
    # pytest's own factory, which its tmp_path plugin sets on the config; Config's type does not declare it
    base = config._tmp_path_factory.mktemp(f"node{nodes.rank}")  # type: ignore[attr-defined]
    following = follow(nodes, _world_per_node(config), LAUNCH_ROOT, base, say)
    lines = [f"ampbench: node {nodes.rank} of {nodes.count} ran its ranks in {len(following.launches)} of node 0's "
             "launches and reports no cells of its own: node 0 holds the results"]
    if following.failed:
        lines.append(f"ampbench: node {nodes.rank}: stopped following: {following.failed}")
    config.stash[NOTES_KEY] = lines
    if not following.ok:
        session.testsfailed = 1
    return True


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    for line in config.stash.get(NOTES_KEY, []):
        terminalreporter.write_line(line, bold=True)
