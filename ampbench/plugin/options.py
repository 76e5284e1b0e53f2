"""The ``--perf-*`` options (the "perf" group of ``pytest --help``), each with a validator whose error
names its flag. Declaring them imports no torch: the two help texts that list models read the model
registry only where ``--help`` shows them."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from ampbench.modes import MODES
from ampbench.settings import (
    COMPILE_CHOICES,
    DEFAULT_BLOCK_SECONDS,
    DEFAULT_COMPILE_AHEAD,
    DEFAULT_MIN_ROUNDS,
    DEFAULT_TOLERANCE,
    GATES,
    TIERS,
    Tier,
    device_validator,
    directory_validator,
    endpoint_validator,
    names_validator,
    number_validator,
    rdzv_id_validator,
    scaler_validator,
    tier_help,
)

GROUP = ("perf", "ampbench: mixed-precision training performance")


def zoo() -> ModuleType:
    """``ampbench.models`` with the project's own models; a usage error naming each broken entry point
    of theirs, whatever the run names (checked where --perf-models is parsed, before anything else)."""
    from ampbench import models

    try:
        models.check_entry_points()
    except models.ModelEntryPointError as exc:
        raise pytest.UsageError(f"ampbench: {exc}") from None
    return models


def _model_names() -> list[str]:
    return list(zoo().REGISTRY)


def tier_models(tier: Tier, cpu_smoke: bool) -> tuple[str, ...]:
    """The models `tier` runs, in registry order; the CPU smoke pass's default selection only on the CPU."""
    models = zoo()
    eligible = models.model_names("full" if tier.models is not None else tier.name, cpu_smoke=cpu_smoke)
    return tuple(m for m in eligible if tier.models is None or m in tier.models)


def _model_help(detail: bool) -> tuple[str, str]:
    """--perf-models' and --perf-tier's help; without `detail` the models they list are left out (the
    registry imports torch, and the help is read only by ``--help``)."""
    if not detail:
        return ("comma-separated models to test (default: every model of the tier)",
                "which cells run: quick, full or compile (default: quick)")
    models = zoo()

    smoke = models.model_names("full", cpu_smoke=True)
    left_out = [name for name in models.model_names("full") if name not in smoke]
    return ("comma-separated models to test; a model the CPU smoke pass leaves out runs there when named "
            f"(default: every model of the tier; on the CPU less {', '.join(left_out)})",
            tier_help(TIERS, models.model_names, MODES))


def _help_shown(pluginmanager: Any) -> bool:
    config = pluginmanager.get_plugin("pytestconfig") if pluginmanager is not None else None
    return config is None or bool(getattr(config.known_args_namespace, "help", False))


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    add_options(parser.getgroup(*GROUP), detail=_help_shown(pluginmanager))


def add_options(group: Any, detail: bool = True) -> None:
    """Every --perf-* option on `group` (a pytest option group, or anything with its ``addoption``), in the
    order --help lists them."""
    _add_selection(group, detail)
    _add_judging(group)
    _add_memory_and_inputs(group)
    _add_distributed(group)


def _add_selection(group: Any, detail: bool) -> None:
    """What runs, on which device, and the baseline files it is held against."""
    models_help, tier_help_text = _model_help(detail)
    group.addoption("--perf-device", metavar="DEVICE", default="auto", type=device_validator(),
                    help="device to train on: auto, cpu, cuda or cuda:N; cpu runs the smoke pass on tiny shapes "
                         "(default: auto, CUDA if present)")
    group.addoption("--perf-require-gpu", action="store_true", default=False,
                    help="fail at start-up, instead of running the CPU smoke pass, when torch sees no CUDA device "
                         "(default: off)")
    group.addoption("--perf-models", metavar="NAMES", default=None, type=names_validator(_model_names, "model"),
                    help=models_help)
    group.addoption("--perf-precisions", metavar="NAMES", default=None,
                    type=names_validator(lambda: list(MODES), "precision mode"),
                    help=f"comma-separated precision modes to test, of {', '.join(MODES)} (default: all)")
    # choices are taken in any case (type=str.lower): the metavars show them in capitals
    group.addoption("--perf-tier", metavar="QUICK|FULL|COMPILE", default="quick", type=str.lower, choices=tuple(TIERS),
                    help=tier_help_text)
    # None: baselines/ under pytest's rootdir, known at configure time
    group.addoption("--perf-baseline-dir", metavar="DIR", default=None,
                    type=directory_validator(must_exist=False),
                    help="folder of per-GPU baseline files <gpu-slug>.json (default: baselines/ under the rootdir)")
    group.addoption("--perf-update-baselines", action="store_true", default=False,
                    help="record this run's figures into the GPU's baseline file, merging with what is there; a usage "
                         "error on the CPU (default: off)")


def _add_judging(group: Any) -> None:
    """How a speed cell is timed and judged."""
    group.addoption("--perf-tolerance", metavar="FRACTION", default=DEFAULT_TOLERANCE,
                    type=number_validator(float, 0.0, 0.9, low_open=True),
                    help="smallest relative speedup drop that fails a test; noisier cells get more (default: "
                         f"{DEFAULT_TOLERANCE})")
    group.addoption("--perf-strict", action="store_true", default=False,
                    help="fail, rather than warn, when a speed verdict stays inconclusive (default: off)")
    group.addoption("--perf-gate", metavar="DEVICE|WALL|BOTH", default="device", type=str.lower, choices=tuple(GATES),
                    help="which speedup fails a speed cell: device (GPU time per step, host overhead excluded), wall "
                         "(eager wall-clock time on this host) or both (default: device)")
    group.addoption("--perf-compile", metavar="OFF|ON|BOTH", default=None, type=str.lower,
                    choices=tuple(COMPILE_CHOICES),
                    help="speed cells of torch.compile'd training: off (eager only), on (compiled only: the "
                         "fp8 modes and each mode against compiled fp32 and against itself eager, ids ending "
                         "-compiled) or both (default: off; on in the compile tier)")
    group.addoption("--perf-compile-ahead", metavar="N", default=None, type=number_validator(int, 0, 64),
                    help="compiled sides compiled at once in processes of their own before the first timed cell, each "
                         "cold into the run's own Inductor cache, which the cells then read; 0 compiles each in its "
                         f"cell with the caches off (default: {DEFAULT_COMPILE_AHEAD} on CUDA, 0 on the CPU)")
    group.addoption("--perf-rounds", metavar="N", default=DEFAULT_MIN_ROUNDS,
                    type=number_validator(int, 5, 1000),
                    help="interleaved rounds before the first look at a judged speedup (more follow while its "
                         "interval straddles its line); a speedup without a baseline and a recording take at least 8, "
                         f"the fewest for a 99%% interval (default: {DEFAULT_MIN_ROUNDS})")
    group.addoption("--perf-block-seconds", metavar="SECONDS", default=DEFAULT_BLOCK_SECONDS,
                    type=number_validator(float, 0.0, 10.0, low_open=True),
                    help="target length of each side's timed block in a speed round on CUDA; a block holds whole "
                         f"steps, at least one (default: {DEFAULT_BLOCK_SECONDS})")
    group.addoption("--perf-time-budget", metavar="SECONDS", default=None,
                    type=number_validator(float, 0.0, low_open=True),
                    help="seconds the whole run may take, from its start: once spent no cell begins, a speed cell "
                         "whose fewest rounds no longer fit is not run (skipped; failed under --perf-strict), and one "
                         "that runs out of time takes "
                         "fewer rounds, its verdict then inconclusive, never a pass (default: none)")
    group.addoption("--perf-cudnn-benchmark", metavar="ON|OFF", default="off", type=str.lower, choices=("on", "off"),
                    help="cuDNN autotuning in the speed tests: on finds the fastest algorithm per shape at 10-25 s per "
                         "convnet and dtype on an H100, off uses cuDNN's heuristics as PyTorch does by default; "
                         "baselines record which (default: off)")
    group.addoption("--perf-nvml", metavar="ON|OFF", default="on", type=str.lower, choices=("on", "off"),
                    help="read the card's SM and memory clocks, throttle reasons, temperature, power and energy "
                         "counter from NVML (nvidia-ml-py, the nvml extra) at each device-time block's start and "
                         "end, outside its timed region; a regression in rounds under unsteady clocks must then "
                         "hold in cycle space too (default: on)")


def _add_memory_and_inputs(group: Any) -> None:
    """The memory search's budget, the input pipeline's data and loader, the loss scaler under test."""
    group.addoption("--perf-memory-cap", metavar="GIB", default=None,
                    type=number_validator(float, 0.0, low_open=True),
                    help="GPU memory the largest-batch search (full tier) may use, in GiB, on top of what the session "
                         "already holds: a budget of that search only, no more than --perf-memory-limit (default: 90%% "
                         "of the card's total memory, or of --perf-memory-limit, at most 24 GiB, or 95%% of its free "
                         "memory where less is free)")
    group.addoption("--perf-memory-limit", metavar="GIB", default=None,
                    type=number_validator(float, 0.0, low_open=True),
                    help="run the whole suite as if the card had this much memory, in GiB: caps the CUDA caching "
                         "allocator (per-process memory fraction) and cuDNN's convolution workspace; a cell whose "
                         "batch does not fit is skipped saying what it needs. For a shared card, or to try a 16 or "
                         "24 GB card's memory on a larger one; no more than the card has; a limited run records no "
                         "baselines and appends to no history unless --perf-history names one; on the CPU recorded "
                         "but without effect (default: none, the whole card)")
    group.addoption("--perf-data-root", metavar="DIR", default=None,
                    type=directory_validator(must_exist=True),
                    help="folder holding CIFAR-10 (cifar-10-batches-py, python pickles) for the input-pipeline test "
                         "(default: none; scikit-learn's digits as 3x32x32 images)")
    group.addoption("--perf-loader-workers", metavar="N", default=None,
                    type=number_validator(int, 0, 256),
                    help="DataLoader worker processes for the input-pipeline tests (default: 4, or the CPU count if "
                         "lower)")
    group.addoption("--perf-pin-memory", metavar="ON|OFF", default="on", type=str.lower, choices=("on", "off"),
                    help="DataLoader pin_memory for the input-pipeline tests (default: on)")
    group.addoption("--perf-loss-scaler", "--loss-scaler", dest="perf_loss_scaler", metavar="MODULE:CALLABLE",
                    default="torch.amp:GradScaler", type=scaler_validator(),
                    help="loss scaler the loss-scaling properties test; called with GradScaler's keyword arguments "
                         "(default: torch.amp:GradScaler)")


def _add_distributed(group: Any) -> None:
    """The distributed tests' ranks and the hosts they span."""
    group.addoption("--perf-world-size", metavar="N", default=None,
                    type=number_validator(int, 1, 1024),
                    help="ranks of the distributed tests in all, one GPU each (NCCL), or CPU processes (gloo) on "
                         "the CPU; a multiple of --perf-nnodes, each node running its share (default: every visible "
                         "GPU of each node, or 2 CPU processes without GPUs)")
    group.addoption("--perf-nnodes", metavar="N", default=1, type=number_validator(int, 1, 1024),
                    help="hosts the distributed tests span, through torchrun's c10d rendezvous: every node runs the "
                         "same pytest command with its own --perf-node-rank; node 0 runs the cells and writes the "
                         "results, the others run their ranks of node 0's launches (default: 1, torchrun --standalone)")
    group.addoption("--perf-node-rank", metavar="R", default=None, type=number_validator(int, 0, 1023),
                    help="this node's rank, 0 to --perf-nnodes - 1; node 0 hosts the rendezvous at "
                         "--perf-rdzv-endpoint and holds the results (default: none; needed with --perf-nnodes 2 or "
                         "more)")
    group.addoption("--perf-rdzv-endpoint", metavar="HOST:PORT", default=None, type=endpoint_validator(),
                    help="node 0's address and a free port, the same on every node (default: none; needed with "
                         "--perf-nnodes 2 or more)")
    group.addoption("--perf-rdzv-id", metavar="ID", default="ampbench", type=rdzv_id_validator(),
                    help="the run's rendezvous id, the same on every node; runs sharing an endpoint need their own, "
                         "e.g. the job's id (default: ampbench)")


def follows(config: pytest.Config) -> bool:
    """Whether this node only follows node 0's launches (its rank is above 0)."""
    # read off the options, which only a --perf-* argument sets: ampbench acts wherever they are
    rank = getattr(config.option, "perf_node_rank", None)
    return bool(rank) and getattr(config.option, "perf_nnodes", 1) > 1
