"""ampbench's pytest face: the --perf-* options, session fixtures, hypothesis profiles and the
pytest-benchmark hooks. The harness itself lives in ``ampbench/`` and does not import pytest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings as hypothesis_settings

import models
from ampbench import device as devices
from ampbench.baselines.store import BaselineError, BaselineStore, unwritable_reason, validate_directory
from ampbench.plugin.parametrize import cells_for
from ampbench.speed.sides import DEFAULT_BLOCK_SECONDS, DEFAULT_MIN_ROUNDS
from ampbench.plugin import summary
from ampbench.results import Record
from ampbench.loss_scaler import load_scaler_factory
from ampbench.verdict import DEFAULT_TOLERANCE
from ampbench.modes import MODES, compiled, get_mode
from ampbench.settings import (
    COMPILE_CHOICES,
    GATES,
    TIERS,
    PerfSettings,
    Tier,
    device_validator,
    directory_validator,
    names_validator,
    tier_help,
    number_validator,
    scaler_validator,
)

# that the run keeps its results (output paths, options that lose them); the progress line; the run
# history (--perf-history, --perf-label, each run appended at the session's end)
pytest_plugins = ("ampbench.plugin.checks", "ampbench.plugin.progress", "ampbench.history.plugin")
SETTINGS_KEY = pytest.StashKey[PerfSettings]()
STORE_KEY = pytest.StashKey[dict]()  # lazily opened BaselineStore, under "store"
ROOT = Path(__file__).parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "ampbench: mixed-precision training performance")
    group.addoption("--perf-device", metavar="DEVICE", default="auto", type=device_validator(),
                    help="device to train on: auto, cpu, cuda or cuda:N; cpu runs the smoke pass on tiny shapes (default: auto, CUDA if present)")
    group.addoption("--perf-require-gpu", action="store_true", default=False,
                    help="fail at start-up, instead of running the CPU smoke pass, when torch sees no CUDA device (default: off)")
    group.addoption("--perf-models", metavar="NAMES", default=None,
                    type=names_validator(lambda: list(models.REGISTRY), "model"),
                    help="comma-separated models to test; a model the CPU smoke pass leaves out runs there when named "
                         f"(default: every model of the tier; on the CPU less {', '.join(_left_out_of_smoke())})")
    group.addoption("--perf-precisions", metavar="NAMES", default=None,
                    type=names_validator(lambda: list(MODES), "precision mode"),
                    help=f"comma-separated precision modes to test, of {', '.join(MODES)} (default: all)")
    # choices are taken in any case (type=str.lower): the metavars show them in capitals
    group.addoption("--perf-tier", metavar="QUICK|FULL|COMPILE", default="quick", type=str.lower, choices=tuple(TIERS),
                    help=tier_help(TIERS, models.model_names, MODES))
    group.addoption("--perf-baseline-dir", metavar="DIR", default=str(ROOT / "baselines"),
                    type=directory_validator(must_exist=False),
                    help="folder of per-GPU baseline files <gpu-slug>.json (default: baselines/ of the repo)")
    group.addoption("--perf-update-baselines", action="store_true", default=False,
                    help="record this run's figures into the GPU's baseline file, merging with what is there; a usage error on the CPU (default: off)")
    group.addoption("--perf-tolerance", metavar="FRACTION", default=DEFAULT_TOLERANCE,
                    type=number_validator(float, 0.0, 0.9, low_open=True),
                    help=f"smallest relative speedup drop that fails a test; noisier cells get more (default: {DEFAULT_TOLERANCE})")
    group.addoption("--perf-strict", action="store_true", default=False,
                    help="fail, rather than warn, when a speed verdict stays inconclusive (default: off)")
    group.addoption("--perf-gate", metavar="DEVICE|WALL|BOTH", default="device", type=str.lower, choices=tuple(GATES),
                    help="which speedup fails a speed cell: device (GPU time per step, host overhead excluded), wall (eager wall-clock time on this host) or both (default: device)")
    group.addoption("--perf-compile", metavar="OFF|ON|BOTH", default=None, type=str.lower, choices=tuple(COMPILE_CHOICES),
                    help="speed cells of torch.compile'd training: off (eager only), on (compiled only: the "
                         "fp8 modes and each mode against compiled fp32 and against itself eager, ids ending "
                         "-compiled) or both (default: off; on in the compile tier)")
    group.addoption("--perf-rounds", metavar="N", default=DEFAULT_MIN_ROUNDS,
                    type=number_validator(int, 8, 1000),
                    help=f"interleaved rounds before the first look at a speedup's interval; 8 is the fewest for a 99%% interval (default: {DEFAULT_MIN_ROUNDS})")
    group.addoption("--perf-block-seconds", metavar="SECONDS", default=DEFAULT_BLOCK_SECONDS,
                    type=number_validator(float, 0.0, 10.0, low_open=True),
                    help=f"target length of each side's timed block in a speed round on CUDA; a block holds whole steps, at least one (default: {DEFAULT_BLOCK_SECONDS})")
    group.addoption("--perf-cudnn-benchmark", metavar="ON|OFF", default="off", type=str.lower, choices=("on", "off"),
                    help="cuDNN autotuning in the speed tests: on finds the fastest algorithm per shape at 10-25 s per convnet and dtype on an H100, off uses cuDNN's heuristics as PyTorch does by default; baselines record which (default: off)")
    group.addoption("--perf-memory-cap", metavar="GIB", default=None,
                    type=number_validator(float, 0.0, low_open=True),
                    help="GPU memory the largest-batch search (full tier) may use, in GiB, on top of what the session already holds (default: 90%% of the card's total memory, at most 24 GiB, or 95%% of its free memory where less is free)")
    group.addoption("--perf-data-root", metavar="DIR", default=None,
                    type=directory_validator(must_exist=True),
                    help="folder holding CIFAR-10 (cifar-10-batches-py, python pickles) for the input-pipeline test (default: none; scikit-learn's digits as 3x32x32 images)")
    group.addoption("--perf-loader-workers", metavar="N", default=None,
                    type=number_validator(int, 0, 256),
                    help="DataLoader worker processes for the input-pipeline tests (default: 4, or the CPU count if lower)")
    group.addoption("--perf-pin-memory", metavar="ON|OFF", default="on", type=str.lower, choices=("on", "off"),
                    help="DataLoader pin_memory for the input-pipeline tests (default: on)")
    group.addoption("--perf-loss-scaler", "--loss-scaler", dest="perf_loss_scaler", metavar="MODULE:CALLABLE",
                    default="torch.amp:GradScaler", type=scaler_validator(),
                    help="loss scaler the loss-scaling properties test; called with GradScaler's keyword arguments (default: torch.amp:GradScaler)")
    _add_world_size_option(group)


def tier_models(tier: Tier, cpu_smoke: bool) -> tuple[str, ...]:
    """The models `tier` runs, in registry order; the CPU smoke pass's default selection only on the CPU."""
    eligible = models.model_names("full" if tier.models is not None else tier.name, cpu_smoke=cpu_smoke)
    return tuple(m for m in eligible if tier.models is None or m in tier.models)


def _left_out_of_smoke() -> list[str]:
    return [name for name in models.model_names("full") if name not in models.model_names("full", cpu_smoke=True)]


def _register_hypothesis_profiles() -> None:
    hypothesis_settings.register_profile("dev", max_examples=50, deadline=None)
    hypothesis_settings.register_profile(
        "ci", max_examples=60, derandomize=True, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    hypothesis_settings.register_profile(
        "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    # CI runners set CI=true; there the run must be reproducible
    default = "ci" if os.environ.get("CI") else "dev"
    hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


def _resolve_device(opt) -> torch.device:
    try:
        device = devices.resolve(opt.perf_device)
    except RuntimeError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.perf_require_gpu and device.type != "cuda":
        why = ("--perf-device cpu" if opt.perf_device == "cpu"
               else f"no CUDA device is visible to torch {torch.__version__}")
        raise pytest.UsageError(f"--perf-require-gpu: {why}; refusing to run the CPU smoke pass instead")
    return device


def _check_baselines(opt, device) -> None:
    """Every baseline file in the folder, on every device, and where a recording will write, before
    the first cell: a bad file or a folder that cannot be written otherwise surfaces only after
    minutes of measuring, or never (off CUDA no file is read)."""
    try:
        validate_directory(opt.perf_baseline_dir)
    except BaselineError as exc:
        raise pytest.UsageError(f"ampbench: {exc}; fix or move the file (nothing was measured)") from None
    if not opt.perf_update_baselines:
        return
    if device.type != "cuda":
        raise pytest.UsageError(
            f"--perf-update-baselines: the CPU smoke pass records nothing (device {device}); run it on a GPU")
    path = Path(opt.perf_baseline_dir) / f"{devices.gpu_slug(devices.device_name(device))}.json"
    reason = unwritable_reason(path)
    if reason:
        raise pytest.UsageError(f"--perf-update-baselines: {reason}; nothing was measured")


def pytest_configure(config: pytest.Config) -> None:
    _register_hypothesis_profiles()
    opt = config.option
    device = _resolve_device(opt)
    if not getattr(opt, "help", False):
        _check_baselines(opt, device)
        try:  # at the start: where the loss-scaling tests are collected, a bad scaler is a collection error
            load_scaler_factory(opt.perf_loss_scaler)
        except ValueError as exc:
            raise pytest.UsageError(f"--loss-scaler: {exc}") from None
    tier = TIERS[opt.perf_tier]
    compile_choice = COMPILE_CHOICES[opt.perf_compile or tier.compile]
    config.stash[SETTINGS_KEY] = PerfSettings(
        device=device,
        models=opt.perf_models or tier_models(tier, cpu_smoke=device.type == "cpu"),
        precisions=opt.perf_precisions or tier.modes or tuple(MODES),
        tier=opt.perf_tier,
        baseline_dir=opt.perf_baseline_dir,
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
        gate=opt.perf_gate,
        compile=compile_choice,
    )
    if True in compile_choice:
        # a compiled cell's first step is its compile time, measured cold: Inductor's caches would
        # otherwise make it a cache read on every run after the first on the runner
        import torch._dynamo.config as dynamo_config
        import torch._inductor.config as inductor_config

        inductor_config.force_disable_caches = True
        # every mode of a model compiles the same forward under other guards (dtypes, autocast): past
        # dynamo's default limit of 8 graphs per function it would run the rest eager, without a word
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
        dynamo_config.accumulated_recompile_limit = max(dynamo_config.accumulated_recompile_limit, 1024)
    config.stash[STORE_KEY] = {}
    _configure_world_size(config)
    summary.register(config)


SMOKE_LINE = "CPU smoke pass: nothing is held against baselines"


def _smoke_line(config: pytest.Config) -> str | None:
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None or not settings.smoke:
        return None
    why = "--perf-device cpu" if config.option.perf_device == "cpu" else "no CUDA device visible"
    return f"ampbench: {SMOKE_LINE} ({why})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    line = _smoke_line(config)
    return [line] if line else []


def perf_settings_of(config: pytest.Config) -> PerfSettings:
    return config.stash[SETTINGS_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking `model_name` and `mode_name` run once per cell, model-major, ids `model-mode`; which
    cells, from the tier, the options and the test's ``cells`` marker: ``ampbench.plugin.parametrize``."""
    if not {"model_name", "mode_name"} <= set(metafunc.fixturenames):
        return
    marker = metafunc.definition.get_closest_marker("cells")
    opt = metafunc.config.option
    found = cells_for(perf_settings_of(metafunc.config), marker.kwargs if marker is not None else {},
                      opt.perf_models, opt.perf_precisions, has_axis="compiled_cell" in metafunc.fixturenames)
    metafunc.parametrize(found.argnames, found.values, ids=found.ids)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A tier of compiled cells only runs nothing but cells (model and mode): every other test, and a cell
    test left without cells (pytest's empty parameter set), is deselected, not skipped one by one."""
    if not TIERS[perf_settings_of(config).tier].compiled_only:
        return
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        (kept if isinstance(params.get("model_name"), str) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def perf_settings(pytestconfig: pytest.Config) -> PerfSettings:
    return perf_settings_of(pytestconfig)


@pytest.fixture(scope="session")
def perf_device(perf_settings: PerfSettings):
    devices.configure_backends(perf_settings.device, perf_settings.cudnn_benchmark)
    devices.freeze_survivors()
    return perf_settings.device


@pytest.fixture
def fail_on_oom(perf_device):
    """``fail_on_oom(fn, what, batch)``: fn(), or this test's failure naming `what`, its batch and the
    peak memory when the device runs out, after the failed work's memory is released."""

    def run(fn, what: str, batch: int):
        result, oom = devices.catch_oom(fn)
        if oom:  # outside the handler: a failure raised inside it would keep the failed frames alive
            devices.release(perf_device)
            pytest.fail(f"{what}: out of memory at batch {batch}: {oom}", pytrace=False)
        return result

    return run


@pytest.fixture
def record_result(request: pytest.FixtureRequest, benchmark):
    """``record_result(record)``: a cell's record into its benchmark's extra_info (what --benchmark-json
    keeps) and to the terminal summary; ``identity=True`` writes only what is set, before the cell
    measures, so that a cell failing later is still recognisable in the JSON."""

    def write(record: Record, *, identity: bool = False) -> None:
        benchmark.extra_info.update(record.to_info(only_set=identity))
        if not identity:
            summary.keep(request.config, request.node.nodeid, record)

    return write


@pytest.fixture
def mode(request: pytest.FixtureRequest, mode_name: str, model_spec, perf_device, perf_settings):
    """The precision mode of this cell, compiled where the cell is (the compile axis of test_speed), or
    a skip saying what the device lacks (or, for fp8, that the model has no Linear layer to convert)."""
    m = get_mode(mode_name)
    if getattr(request.node, "callspec", None) is not None and request.node.callspec.params.get("compiled_cell"):
        m = compiled(m)
    reason = devices.cell_unsupported_reason(m, perf_device, model_spec, model_spec.config_for(perf_settings.smoke))
    if reason:
        pytest.skip(reason)
    return m


@pytest.fixture
def model_spec(model_name: str):
    return models.get_model(model_name)


def baseline_store_of(config: pytest.Config) -> BaselineStore | None:
    """This GPU's baselines, opened once per session; None on the CPU (the smoke pass holds nothing
    against baselines). A malformed file ends the session with a message naming file and field, and
    is never overwritten."""
    cache = config.stash[STORE_KEY]
    if "store" not in cache:
        s = perf_settings_of(config)
        if s.device.type != "cuda":
            cache["store"] = None
        else:
            name = devices.device_name(s.device)
            try:
                store = BaselineStore.open(s.baseline_dir, name, devices.gpu_slug(name))
            except BaselineError as exc:
                pytest.exit(f"ampbench: {exc}; fix or move the file (nothing was written)", returncode=4)
            from ampbench.history.plugin import history_of  # registered by pytest_plugins: imported by pytest first
            from ampbench.history.reference import HistoryBaselines

            history = history_of(config)
            # with a history, a speed cell's level and noise are learned from its runs on this GPU model
            cache["store"] = HistoryBaselines(store, history, s.tolerance) if history is not None else store
    return cache["store"]


@pytest.fixture(scope="session")
def baseline_store(pytestconfig: pytest.Config) -> BaselineStore | None:
    return baseline_store_of(pytestconfig)


@pytest.fixture(scope="session")
def software(perf_device) -> dict:
    """What a baseline was recorded on, stored beside its figures."""
    info = devices.machine_info(perf_device)
    keep = ("torch", "cuda", "cudnn", "driver", "device", "capability", "inductor", "triton", "torchao")
    return {k: info[k] for k in keep if k in info}


@pytest.fixture(scope="session")
def peak_tflops(perf_device):
    """Measured matmul peak per dtype name, each measured once per session on first use."""
    cache: dict[str, float] = {}

    def get(dtype_name: str) -> float | None:
        if perf_device.type != "cuda":
            return None
        if dtype_name not in cache:
            cache[dtype_name] = devices.measure_peak_tflops(perf_device, dtype_name)
        return cache[dtype_name]

    return get


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["ampbench"] = devices.machine_info(perf_settings_of(config).device)


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Write what a test recorded as soon as it is done: a session killed half-way through a long
    recording (a CI job's time limit, a lost runner) keeps every cell it finished."""
    store = item.config.stash.get(STORE_KEY, {}).get("store")
    if store is not None and store.pending and perf_settings_of(item.config).update_baselines:
        store.write()
        item.config.stash[STORE_KEY]["written"] = store.path


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    written = config.stash.get(STORE_KEY, {}).get("written")
    if written is not None:
        terminalreporter.write_line(f"ampbench: baselines written to {written}")
    from ampbench.history.reference import HistoryBaselines  # imported once pytest has registered the history plugin

    store = config.stash.get(STORE_KEY, {}).get("store")
    if isinstance(store, HistoryBaselines):  # the history judged this run's speed cells
        _write_learned(terminalreporter, store, config)
    line = _smoke_line(config)
    if line:
        # said at the end too: a green CPU run must not read as a benchmark that passed
        terminalreporter.write_line(line, yellow=True, bold=True)


def _write_learned(terminalreporter, store, config: pytest.Config) -> None:
    """How far each speed cell's device tolerance has been learned from the history, this run's cells."""
    ran = {t for t in (r.test_id or nodeid.split("::")[-1] for nodeid, r in config.stash.get(summary.RECORDS_KEY, []))
           if t.startswith("test_speed[")}
    states = {t: line for t, line in store.states().items() if t in ran}
    learned, cells = store.learned_share()
    if not cells:
        others = sorted({r.gpu for r in store.history.runs() if not r.smoke} - {store.store.gpu})
        held = f" (it holds runs of {', '.join(others)}, never used for this one)" if others else ""
        terminalreporter.write_line(f"ampbench history: no earlier run of {store.store.gpu}{held}: this run's "
                                    "speed cells are learning")
        return
    terminalreporter.write_line(f"ampbench history: device tolerance learned and at most 1% in {learned} of {cells} "
                                "speed cells of this GPU model; this run's cells:")
    for test_id in sorted(ran):
        terminalreporter.write_line(f"  {test_id}: {states.get(test_id, 'learning: this run sets the level')}")


# -- distributed cells (--perf-world-size): perf/test_distributed*.py ------------------------------

WORLD_SIZE_KEY = pytest.StashKey[int]()


def _add_world_size_option(group) -> None:
    group.addoption("--perf-world-size", metavar="N", default=None,
                    type=number_validator(int, 1, 1024),
                    help="ranks of the distributed tests, one GPU each (NCCL), or CPU processes (gloo) on the "
                         "CPU (default: every visible GPU, or 2 CPU processes without GPUs)")


def _configure_world_size(config: pytest.Config) -> None:
    from ampbench.distributed.variants import resolve_world_size

    import torch

    device = perf_settings_of(config).device
    gpus = torch.cuda.device_count() if device.type == "cuda" else 0
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        config.stash[WORLD_SIZE_KEY] = resolve_world_size(config.option.perf_world_size, device, gpus, cpus)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.fixture(scope="session")
def perf_world_size(pytestconfig: pytest.Config, perf_device) -> int:
    """Ranks of a distributed launch; skips the test where fewer than two can run."""
    from ampbench.distributed.variants import world_size_skip_reason

    import torch

    n = pytestconfig.stash[WORLD_SIZE_KEY]
    gpus = torch.cuda.device_count() if perf_device.type == "cuda" else 0
    reason = world_size_skip_reason(n, perf_device, gpus)
    if reason:
        pytest.skip(reason)
    return n


@pytest.fixture(scope="session")
def distributed_baseline_store(pytestconfig: pytest.Config, perf_settings, perf_world_size) -> BaselineStore | None:
    """Baselines of N GPUs of this model, baselines/<gpu-slug>-x<N>.json; None on the CPU. The tests
    write what they record themselves (the session's teardown hook writes only the 1-GPU store)."""
    if perf_settings.device.type != "cuda":
        return None
    name = devices.device_name(perf_settings.device)
    try:
        return BaselineStore.open(perf_settings.baseline_dir, f"{name} x{perf_world_size}",
                                  devices.cluster_slug(name, perf_world_size))
    except BaselineError as exc:
        pytest.exit(f"ampbench: {exc}; fix or move the file (nothing was written)", returncode=4)
