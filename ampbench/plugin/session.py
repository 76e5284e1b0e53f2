"""The session: at configure time (where ampbench acts: ``ampbench.plugin.acts``) the options
become one ``PerfSettings`` in ``config.stash``, every usage error found before the first cell (device,
baseline files, the loss scaler, the world size); cells are parametrized from it, the header and the
end of the terminal summary say when the run is the CPU smoke pass, and recorded baselines are written
as each test finishes.

The suite's hypothesis profiles, chosen by $HYPOTHESIS_PROFILE: dev (the default), ci (derandomized, the
default where $CI is set) and thorough; loaded at configure time, before any test module (and its
``@given``) is imported."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ampbench.files import paths
from ampbench.plugin import HOW, acts
from ampbench.plugin.options import tier_models, zoo
from ampbench.plugin.parametrize import cells_for, why_no_cells
from ampbench.settings import COMPILE_CHOICES, DEFAULT_COMPILE_AHEAD, TIERS, Nodes, PerfSettings

if TYPE_CHECKING:  # the stores load where a GPU run opens them
    from ampbench.baselines.file import BaselineFile
    from ampbench.baselines.source import BaselineSource

SETTINGS_KEY = pytest.StashKey[PerfSettings]()
SOURCE_KEY = pytest.StashKey[dict]()  # the lazily opened baseline source, under "source"
# the distributed cells' baseline source of N GPUs where the history judged them (``plugin.distributed``)
DISTRIBUTED_SOURCE_KEY = pytest.StashKey[object]()
LIMIT_NOTE_KEY = pytest.StashKey[object]()  # what --perf-memory-limit did, said once in the header
SMOKE_LINE = "CPU smoke pass: nothing is held against baselines"


def _resolve_device(opt):
    import torch

    from ampbench import device as devices

    try:
        device = devices.resolve(opt.perf_device)
    except RuntimeError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.perf_require_gpu and device.type != "cuda":
        why = ("--perf-device cpu" if opt.perf_device == "cpu"
               else f"no CUDA device is visible to torch {torch.__version__}")
        raise pytest.UsageError(f"--perf-require-gpu: {why}; refusing to run the CPU smoke pass instead")
    return device


def _check_baselines(directory: Path, update: bool, device) -> None:
    """Every baseline file in the folder, on every device, and where a recording will write, before
    the first cell: a bad file or a folder that cannot be written otherwise surfaces only after
    minutes of measuring, or never (off CUDA no file is read)."""
    from ampbench import device as devices
    from ampbench.baselines.file import BaselineError, validate_directory
    from ampbench.files.write import unwritable_reason

    try:
        validate_directory(directory)
    except BaselineError as exc:
        raise pytest.UsageError(f"ampbench: {exc}; fix or move the file (nothing was measured)") from None
    if not update:
        return
    if device.type != "cuda":
        raise pytest.UsageError(
            f"--perf-update-baselines: the CPU smoke pass records nothing (device {device}); run it on a GPU")
    path = directory / f"{devices.gpu_slug(devices.device_name(device))}.json"
    reason = unwritable_reason(path)
    if reason:
        raise pytest.UsageError(f"--perf-update-baselines: {reason}; nothing was measured")


def _check_scaler(spec: str, device) -> None:
    """A --loss-scaler that names no loss scaler, as a usage error naming the flag, the name and what a
    scaler must be (``loss_scaler.check_scaler_factory``): at the start, not as a collection error or a
    TypeError in each loss-scaling test."""
    from ampbench.loss_scaler import check_scaler_factory, load_scaler_factory

    try:
        check_scaler_factory(spec, load_scaler_factory(spec), device.type)
    except ValueError as exc:
        raise pytest.UsageError(f"--loss-scaler: {exc}") from None


def _settings(opt, device, baseline_dir: Path) -> PerfSettings:
    from ampbench.modes import MODES

    tier = TIERS[opt.perf_tier]
    return PerfSettings(
        device=device,
        models=opt.perf_models or tier_models(tier, cpu_smoke=device.type == "cpu"),
        precisions=opt.perf_precisions or tier.modes or tuple(MODES),
        tier=opt.perf_tier,
        baseline_dir=baseline_dir,
        update_baselines=opt.perf_update_baselines,
        tolerance=opt.perf_tolerance,
        strict=opt.perf_strict,
        min_rounds=opt.perf_rounds,
        memory_cap_gib=opt.perf_memory_cap,
        data_root=opt.perf_data_root,
        # more workers than cores only adds switching (and a warning from torch on small CI runners)
        loader_workers=opt.perf_loader_workers if opt.perf_loader_workers is not None else min(4, os.cpu_count() or 1),
        pin_memory=opt.perf_pin_memory == "on",
        loss_scaler=opt.perf_loss_scaler,
        block_seconds=opt.perf_block_seconds,
        cudnn_benchmark=opt.perf_cudnn_benchmark == "on",
        nvml=opt.perf_nvml == "on",
        gate=opt.perf_gate,
        compile=COMPILE_CHOICES[opt.perf_compile or tier.compile],
        compile_ahead=(opt.perf_compile_ahead if opt.perf_compile_ahead is not None
                       else DEFAULT_COMPILE_AHEAD if device.type == "cuda" else 0),
        nodes=_nodes(opt),
        memory_limit_gib=opt.perf_memory_limit,
        time_budget_s=opt.perf_time_budget,
        deadline=time.monotonic() + opt.perf_time_budget if opt.perf_time_budget is not None else None,
    )


def _check_memory_options(opt) -> None:
    """--perf-memory-cap and --perf-update-baselines against --perf-memory-limit: the search's budget lies
    inside the limit, and a limited run's figures (cuDNN's algorithms chosen under a workspace cap) are no
    card's baselines."""
    limit = opt.perf_memory_limit
    if limit is None:
        return
    if opt.perf_memory_cap is not None and opt.perf_memory_cap > limit:
        raise pytest.UsageError(f"--perf-memory-cap {opt.perf_memory_cap:g}: the largest-batch search's budget "
                                f"cannot exceed --perf-memory-limit {limit:g}")
    if opt.perf_update_baselines:
        raise pytest.UsageError("--perf-update-baselines with --perf-memory-limit: a limited run's figures are "
                                "not the card's; record without the limit")


def _apply_memory_limit(opt, device) -> str | None:
    """The limit set on the device before anything runs on it (cuDNN reads its workspace cap once); what the
    header says of it."""
    from ampbench.memory import limit

    try:
        return limit.apply(device, opt.perf_memory_limit)
    except limit.LimitError as exc:
        raise pytest.UsageError(str(exc)) from None


def _nodes(opt) -> Nodes:
    """The hosts of the distributed launches; a usage error naming the flag where the options disagree."""
    count, rank, endpoint = opt.perf_nnodes, opt.perf_node_rank, opt.perf_rdzv_endpoint
    if count == 1:
        given = [flag for flag, value in (("--perf-node-rank", rank), ("--perf-rdzv-endpoint", endpoint))
                 if value is not None]
        if given:
            raise pytest.UsageError(f"{' and '.join(given)}: only with --perf-nnodes 2 or more (one node launches "
                                    "with torchrun --standalone)")
        return Nodes()
    missing = [flag for flag, value in (("--perf-node-rank", rank), ("--perf-rdzv-endpoint", endpoint))
               if value is None]
    if missing:
        raise pytest.UsageError(f"--perf-nnodes {count}: needs {' and '.join(missing)} (the same endpoint on "
                                "every node, and each node's own rank)")
    if rank >= count:
        raise pytest.UsageError(f"--perf-node-rank {rank}: the ranks of {count} nodes are 0 to {count - 1}")
    return Nodes(count, rank, endpoint, opt.perf_rdzv_id)


PROFILES = ("dev", "ci", "thorough")  # the suite's hypothesis profiles (hypothesis's own "default" is there too)


def register_profiles() -> None:
    from hypothesis import HealthCheck, settings  # a second or more to import: only where ampbench acts

    settings.register_profile("dev", max_examples=50, deadline=None)
    settings.register_profile(
        "ci", max_examples=60, derandomize=True, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


def load_profiles() -> None:
    """Register the profiles and load the one $HYPOTHESIS_PROFILE names; a usage error listing them where
    it names none of them."""
    from hypothesis import settings
    from hypothesis.errors import InvalidArgument

    register_profiles()
    # CI runners set CI=true; there the run must be reproducible
    default = "ci" if os.environ.get("CI") else "dev"
    name = os.environ.get("HYPOTHESIS_PROFILE", default)
    try:  # asked first: hypothesis's load_profile makes an unknown name current before it refuses it
        settings.get_profile(name)
    except InvalidArgument:
        raise pytest.UsageError(f"HYPOTHESIS_PROFILE={name}: no such hypothesis profile; the profiles are "
                                f"{', '.join(PROFILES)} and hypothesis's own default (unset: dev, or ci where $CI "
                                "is set)") from None
    settings.load_profile(name)


def configure(config: pytest.Config) -> None:
    """The session's settings into ``config.stash``, or the usage error that stops the run unmeasured."""
    load_profiles()
    zoo()  # the zoo, then the project's own models: a broken entry point of theirs is a usage error
    opt = config.option
    device = _resolve_device(opt)
    baseline_dir = opt.perf_baseline_dir if opt.perf_baseline_dir is not None else config.rootpath / paths.BASELINE_DIR
    if not getattr(opt, "help", False):
        _check_memory_options(opt)
        _check_baselines(baseline_dir, opt.perf_update_baselines, device)
        _check_scaler(opt.perf_loss_scaler, device)
        config.stash[LIMIT_NOTE_KEY] = _apply_memory_limit(opt, device)
    config.stash[SETTINGS_KEY] = _settings(opt, device, baseline_dir)
    config.stash[SOURCE_KEY] = {}
    from ampbench.plugin import summary  # its records' types: only in a run where ampbench acts

    summary.register_summary(config, config.stash[SETTINGS_KEY])


# the markers of the suite's cell tests (ampbench.suite, perf/), registered in every run: a project
# that collects them under --strict-markers must not stop at them
MARKERS = (
    "cells(kind=None, tiered=False, modes_tiered=False): run this test once per cell (model x precision "
    "mode) of the run; kind= takes the models whose ModelSpec joins that kind of test (convergence, "
    "input_pipeline) instead of the tier's, tiered=True narrows them to the tier's, modes_tiered=True "
    "leaves the full-tier-only modes out of the quick tier (ampbench.plugin.parametrize)",
    "strategy(name): a distributed test's parallelism (ddp or fsdp2), whose comm variants it runs over",
    "gpu: needs a CUDA device; skipped with a reason elsewhere",
    "torchrun: the test starts torchrun launches, which every node of --perf-nnodes takes part in",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if acts(config):
        configure(config)


def perf_settings_of(config: pytest.Config) -> PerfSettings:
    """The session's settings; a usage error in a run where ampbench does not act."""
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        raise pytest.UsageError(f"ampbench: this run asks for ampbench's cells or settings; {HOW}")
    return settings


def _smoke_line(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.smoke:
        return None
    why = "--perf-device cpu" if config.option.perf_device == "cpu" else "no CUDA device visible"
    return f"ampbench: {SMOKE_LINE} ({why})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = [_smoke_line(config), config.stash.get(LIMIT_NOTE_KEY, None)]
    return [f"ampbench: {line}" if line.startswith("--") else line for line in lines if isinstance(line, str)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking `model_name` and `mode_name` run once per cell, model-major, ids `model-mode`; which
    cells, from the tier, the options and the test's ``cells`` marker: ``ampbench.plugin.parametrize``."""
    if not {"model_name", "mode_name"} <= set(metafunc.fixturenames) or _parametrizes_itself(metafunc):
        return
    marker = metafunc.definition.get_closest_marker("cells")
    opt = metafunc.config.option
    settings, keywords = perf_settings_of(metafunc.config), marker.kwargs if marker is not None else {}
    has_axis = "compiled_cell" in metafunc.fixturenames
    found = cells_for(settings, keywords, opt.perf_models, opt.perf_precisions, has_axis=has_axis)
    if not found.values:  # one skipped placeholder whose reason says why, where pytest would say "empty parameter set"
        why = why_no_cells(settings, keywords, opt.perf_models, opt.perf_precisions, has_axis)
        metafunc.parametrize(found.argnames,
                             [pytest.param(*(None,) * len(found.argnames), marks=pytest.mark.skip(why))],
                             ids=["no-cells"])
        return
    metafunc.parametrize(found.argnames, found.values, ids=found.ids)


def _parametrizes_itself(metafunc: pytest.Metafunc) -> bool:
    """Whether the test names its own cells with ``pytest.mark.parametrize("model_name, ...")``."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0] if marker.args else marker.kwargs.get("argnames", ())
        if "model_name" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A tier of compiled cells only runs nothing but cells (model and mode): every other test, and a cell
    test left without cells (its skipped placeholder), is deselected, not skipped one by one."""
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not TIERS[settings.tier].compiled_only:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (kept if isinstance(params.get("model_name"), str) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def baseline_source_of(config: pytest.Config) -> BaselineSource | None:
    """This GPU's baselines, opened once per session; None on the CPU (the smoke pass holds nothing
    against baselines). A malformed file ends the session with a message naming file and field, and
    is never overwritten."""
    cache = config.stash[SOURCE_KEY]
    if "source" not in cache:
        s = perf_settings_of(config)
        cache["source"] = None if s.device.type != "cuda" else _open_source(config, s)
    return cache["source"]


def open_baselines(directory: Path, gpu: str, slug: str) -> BaselineFile:
    """The ``BaselineFile`` of `slug` in `directory`; a malformed file ends the session with a message
    naming file and field (exit status 4), and is never overwritten."""
    from ampbench.baselines.file import BaselineError, BaselineFile

    try:
        return BaselineFile.open(directory, gpu, slug)
    except BaselineError as exc:
        pytest.exit(f"ampbench: {exc}; fix or move the file (nothing was written)", returncode=4)


def _open_source(config: pytest.Config, s: PerfSettings) -> BaselineSource:
    from ampbench import device as devices
    from ampbench.history.baseline_source import HistoryBaselines
    from ampbench.plugin.history import history_of

    name = devices.device_name(s.device)
    baseline_file = open_baselines(s.baseline_dir, name, devices.gpu_slug(name))
    history = history_of(config)
    # with a history, a speed cell's level and noise are learned from its runs on this GPU model, for this card
    return HistoryBaselines(baseline_file, history, s.tolerance,
                            card=devices.card_uuid(s.device)) if history is not None else baseline_file


@pytest.hookimpl(optionalhook=True)  # pytest-benchmark's hook: a run without its plugin knows no such hook
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is not None:
        from ampbench import device as devices

        machine_info["ampbench"] = {**devices.machine_info(settings.device), **run_limits(settings)}


def run_limits(settings: PerfSettings) -> dict:
    """What a limited run's JSON says of its limits (nothing where it ran unlimited): a run at 15 GiB is
    not read as the card's."""
    limits = {"memory_limit_gib": settings.memory_limit_gib, "time_budget_s": settings.time_budget_s}
    kept = {k: v for k, v in limits.items() if v is not None}
    return {"limits": kept} if kept else {}


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Write what a test recorded as soon as it is done: a session killed half-way through a long
    recording (a CI job's time limit, a lost runner) keeps every cell it finished."""
    source = item.config.stash.get(SOURCE_KEY, {}).get("source")
    if source is not None and source.pending and perf_settings_of(item.config).update_baselines:
        source.write()
        item.config.stash[SOURCE_KEY]["written"] = source.path


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if SETTINGS_KEY not in config.stash:
        return
    written = config.stash.get(SOURCE_KEY, {}).get("written")
    if written is not None:
        terminalreporter.write_line(f"ampbench: baselines written to {written}")
    from ampbench.history.baseline_source import HistoryBaselines
    from ampbench.plugin.history import write_learned

    source = config.stash.get(SOURCE_KEY, {}).get("source")
    if isinstance(source, HistoryBaselines):  # the history judged this run's speed cells
        write_learned(terminalreporter, source, config, "speed cells")
    distributed = config.stash.get(DISTRIBUTED_SOURCE_KEY, None)
    if isinstance(distributed, HistoryBaselines):
        write_learned(terminalreporter, distributed, config, "distributed cells")
    line = _smoke_line(config)
    if line:
        # said at the end too: a green CPU run must not read as a benchmark that passed
        terminalreporter.write_line(line, yellow=True, bold=True)
