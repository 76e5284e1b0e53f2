"""The fixtures a cell test takes: the session's settings and device, its model and precision mode,
the baselines, what the software is, the matmul peak, and the helpers that record a cell's result and
turn an out-of-memory into the test's failure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NoReturn

import pytest

from ampbench.plugin.session import baseline_source_of, perf_settings_of
from ampbench.settings import PerfSettings

if TYPE_CHECKING:  # the records, and the summary that keeps them, load where a cell runs
    from ampbench.baselines.source import BaselineSource
    from ampbench.results import Record


@pytest.fixture(scope="session")
def perf_settings(pytestconfig: pytest.Config) -> PerfSettings:
    return perf_settings_of(pytestconfig)


@pytest.fixture(scope="session")
def perf_device(perf_settings: PerfSettings):
    from ampbench import device as devices

    devices.configure_backends(perf_settings.device, perf_settings.cudnn_benchmark)
    devices.freeze_survivors()
    return perf_settings.device


@pytest.fixture
def fail_on_oom(request: pytest.FixtureRequest, perf_device, perf_settings, baseline_source):
    """``fail_on_oom(fn, what, batch)``: fn(), or this test's out-of-memory outcome (``out_of_memory``)
    naming `what`, its batch and the peak memory when the device runs out, after the failed work's memory
    is released."""
    from ampbench import device as devices

    def run(fn, what: str, batch: int):
        result, oom = devices.catch_oom(fn)
        if oom:  # outside the handler: a failure raised inside it would keep the failed frames alive
            devices.release(perf_device)
            entry = baseline_source.entry(request.node.name) if baseline_source is not None else None
            out_of_memory(f"{what}: out of memory at batch {batch}: {oom}", perf_settings.memory_limit_gib,
                          card_where_unrecorded(entry, perf_device))
        return result

    return run


def card_where_unrecorded(entry: object | None, device) -> float | None:
    """`out_of_memory`'s `card_gib`: the card's memory where this GPU's baseline has no `entry` for the cell,
    None where it has one (the cell fit this GPU before)."""
    from ampbench.device import card_memory_gib

    return card_memory_gib(device) if entry is None else None


def out_of_memory(failure: str, limit_gib: float | None, card_gib: float | None = None) -> NoReturn:
    """The one outcome of a cell that ran out of memory, whichever fixture or cell it ran in. Under
    --perf-memory-limit running out is the limit's doing, not the cell's: the cell is skipped with what it
    needed and the limit. Without one, on a card of `card_gib` where no baseline of this GPU has the cell
    (a card smaller than those the suite was recorded on, a T4's 16 GB), it is the card's size: skipped
    the same way. Where this GPU's baseline has it, the cell fit before, and running out fails it with
    `failure` (model, side, batch, peak)."""
    if limit_gib is not None:
        pytest.skip(f"{failure}; it needs more than the limit of {limit_gib:.2f} GiB")
    if card_gib is not None:
        pytest.skip(f"{failure}; it needs more than this card's {card_gib:.2f} GiB, and no baseline of "
                    f"this GPU has it")
    pytest.fail(failure, pytrace=False)


@pytest.fixture
def fits_in_memory(request: pytest.FixtureRequest, perf_settings, perf_device, baseline_source, model_spec,
                   mode) -> Callable[[], None]:
    """``fits_in_memory()``: skip this speed, memory or convergence cell where its batch does not fit
    --perf-memory-limit (without one, the card): its need from this GPU's recorded peaks, else, under a
    limit, from a probe of each eager side (``memory.fit``, ``plugin.fitting``). Called before the cell
    builds anything and once nothing of another model is held (a probe beside the last model's kept side
    would run out for that side's sake)."""

    def check() -> None:
        from ampbench.plugin.fitting import cell_misfit

        why = cell_misfit(request.node.name, request.node.originalname, perf_settings, perf_device,
                          baseline_source, model_spec, mode)
        if why:
            pytest.skip(why)

    return check


@pytest.fixture
def record_result(request: pytest.FixtureRequest):
    """``record_result(record)``: a cell's record into its entry (what --benchmark-json keeps: its
    benchmark's extra_info where the cell times steps, else an entry of its own) and to the terminal
    summary; ``identity=True`` writes only what is set, before the cell measures, so that a cell failing
    later is still recognisable in the JSON."""

    from ampbench.plugin import entries, summary

    info = entries.cell_entry(request)

    def write(record: Record, *, identity: bool = False) -> None:
        info.update(record.to_info(only_set=identity))
        if not identity:
            summary.keep_record(request.config, request.node.nodeid, record)

    return write


@pytest.fixture
def mode(request: pytest.FixtureRequest, mode_name: str, model_spec, perf_device, perf_settings):
    """The precision mode of this cell, compiled where the cell is (the compile axis of test_speed), or
    a skip saying what the device lacks (or, for fp8, that the model has no Linear layer to convert)."""
    from ampbench import device as devices
    from ampbench.modes import compiled, get_mode

    m = get_mode(mode_name)
    if getattr(request.node, "callspec", None) is not None and request.node.callspec.params.get("compiled_cell"):
        m = compiled(m)
    reason = devices.cell_unsupported_reason(m, perf_device, model_spec, model_spec.config_for(perf_settings.smoke))
    if reason:
        pytest.skip(reason)
    return m


@pytest.fixture
def model_spec(model_name: str):
    from ampbench import models

    return models.get_model(model_name)


@pytest.fixture(scope="session")
def baseline_source(pytestconfig: pytest.Config) -> BaselineSource | None:
    return baseline_source_of(pytestconfig)


@pytest.fixture(scope="session")
def software(perf_device) -> dict:
    """What a baseline was recorded on, stored beside its figures."""
    from ampbench import device as devices

    info = devices.machine_info(perf_device)
    keep = ("torch", "cuda", "cudnn", "driver", "device", "capability", "inductor", "triton", "torchao")
    return {k: info[k] for k in keep if k in info}


@pytest.fixture(scope="session")
def peak_tflops(perf_device, perf_settings):
    """Measured matmul peak per dtype name, each measured once per session on first use. Its matrices are
    made while a speed cell's sides are alive: under --perf-memory-limit a peak that does not fit beside
    them is not measured (None: the record leaves its TFLOP/s share out), rather than failing the cell."""
    from ampbench import device as devices

    cache: dict[str, float | None] = {}

    def get(dtype_name: str) -> float | None:
        if perf_device.type != "cuda":
            return None
        if dtype_name not in cache:
            if perf_settings.memory_limit_gib is None:
                cache[dtype_name] = devices.measure_peak_tflops(perf_device, dtype_name)
            else:
                cache[dtype_name], _ = devices.catch_oom(lambda: devices.measure_peak_tflops(perf_device, dtype_name))
                devices.release(perf_device)
        return cache[dtype_name]

    return get
