"""Mixed precision past one GPU: each precision mode under DDP and FSDP2, per communication variant,
timed against the fp32 side under the same parallelism, and held against the baselines of this
GPU model in this count (``baselines/<gpu-slug>-x<N>.json``). This repository's perf/test_distributed.py
collects these tests; ``from ampbench.suite import *`` does not (a project's own models need no ranks).

This pytest process stays one process: cells run in torchrun launches (``ampbench.distributed.speed_worker``), one
launch per model and mode carrying every selected comm variant of it, so the process group starts once
per mode rather than once per cell. A launch that fails or outlives its time limit is killed with every
rank it started, and each of its cells fails with the failing rank's last lines.

Scaling efficiency is N-GPU samples/s over N x the same mode's samples/s on one GPU, the 1-GPU side
timed by rank 0 inside the same launch, between the distributed rounds, rather than by a separate
1-process launch: its blocks then interleave with the N-GPU blocks, so clock and thermal drift fall
on both sides and each round gives one paired ratio (hence an interval, from ``estimate_speedup``),
and no second launch start (~10-20 s with NCCL) is paid per cell. The 1-GPU side is a plain
``Trainer``, not DDP over one rank, so the efficiency includes all of DDP's or FSDP2's overheads.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from ampbench import models
from ampbench.baselines.entries import DistributedEntry
from ampbench.baselines.source import BaselineSource
from ampbench.baselines.spread import INJECTED_KEY
from ampbench.device import cell_unsupported_reason
from ampbench.distributed import judging
from ampbench.distributed.figures import DistFigures, max_over_ranks, mean_over_ranks, merge_ranks
from ampbench.distributed.launch import LaunchResult
from ampbench.distributed.speed_worker import failed_comm
from ampbench.distributed.variants import STRATEGIES, default_cells, get_comm, variants_for
from ampbench.modes import get_mode
from ampbench.plugin import session, summary
from ampbench.plugin.distributed import launcher_of
from ampbench.results import DistributedRecord
from ampbench.results.ratios import DIST_DEVICE, DIST_WALL
from ampbench.results.schema import FP32_SIDE, MODE_SIDE
from ampbench.results.timed import DeviceQueue, DistributedSide
from ampbench.speed import sides
from ampbench.suite.outcome import STEP_TIMES, conclude, record_step_times
from ampbench.verdict import Verdict, combined

pytestmark = pytest.mark.torchrun
# seconds a launch may take: a start (torch import, rendezvous, NCCL init) plus each cell's build,
# warm-up, rounds and profile
LAUNCH_SECONDS = {"cpu": (60.0, 30.0), "cuda": (180.0, 120.0)}


class InconclusiveDistributedSpeed(UserWarning):
    """A distributed speed verdict whose interval straddles the regression line."""


def _cells(config: pytest.Config, strategy: str) -> list[tuple[str, str, str]]:
    s = session.perf_settings_of(config)
    default_models, default_modes = default_cells(s.device, s.tier)
    model_names = config.option.perf_models or default_models
    mode_names = config.option.perf_precisions or default_modes
    return [(m, p, v.name) for m in model_names for p in mode_names for v in variants_for(get_mode(p), strategy)]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("strategy")
    if "dist_cell" not in metafunc.fixturenames or marker is None:
        return
    cells = _cells(metafunc.config, marker.args[0])
    metafunc.parametrize("dist_cell", cells, ids=["-".join(c) for c in cells])


def _launch(config: pytest.Config, settings, nproc: int, model: str, mode: str, comms: list[str],
            out: Path) -> LaunchResult:
    base, per_cell = LAUNCH_SECONDS[settings.device.type]
    limit = base + per_cell * len(comms)
    # a recording times its first batch in as many rounds as the single-GPU suite's (12, not 8): that
    # batch's interval sets the recorded noise, and 8 rounds' 99% interval is [min, max]
    policy = sides.policy_for(settings.device, settings.min_rounds, settings.tolerance,
                              recording=settings.update_baselines)
    # a collective may wait half the launch's limit: a rank stuck in one then fails with NCCL's watchdog
    # naming the collective, and torchrun names it, before the launch is killed with every rank's last
    # lines and no cause (at the worker's default of 300 s, a one-variant launch's 300 s limit came first)
    args = ["--model", model, "--mode", mode, "--comm", ",".join(comms), "--out", str(out),
            "--rounds", str(policy.rounds.min_rounds), "--block-seconds", str(settings.block_seconds),
            "--collective-timeout", str(limit / 2),
            "--device", settings.device.type, *(["--cudnn-benchmark"] if settings.cudnn_benchmark else [])]
    return launcher_of(config).run("ampbench.distributed.speed_worker", args, settings.nodes.per_node(nproc), limit,
                                   out, what=f"{model} {mode} {','.join(comms)}")


@pytest.fixture(scope="session")
def _launches() -> dict:
    """(model, mode) -> (LaunchResult, output folder) of the launch that ran its cells."""
    return {}


def _group_comms(session: pytest.Session, model: str, mode: str) -> list[str]:
    """Comm variants of every selected cell of this model and mode, in collection order."""
    comms = []
    for item in session.items:
        cell = (callspec := getattr(item, "callspec", None)) and callspec.params.get("dist_cell")
        if cell and cell[:2] == (model, mode) and cell[2] not in comms:
            comms.append(cell[2])
    return comms


def _rank_docs(out: Path, comm: str, nproc: int) -> list[dict] | None:
    paths = [out / comm / f"rank{r}.json" for r in range(nproc)]
    return [json.loads(p.read_text()) for p in paths] if all(p.exists() for p in paths) else None


def _speed_cell(request, benchmark, record_result, dist_cell, perf_settings, perf_device, perf_world_size,
                distributed_baseline_source, software, _launches) -> None:
    model, mode_name, comm = dist_cell
    spec = models.get_model(model)
    reason = cell_unsupported_reason(get_mode(mode_name), perf_device, spec, spec.config_for(perf_settings.smoke))
    if reason:
        pytest.skip(reason)
    settings, nproc, source = perf_settings, perf_world_size, distributed_baseline_source
    test_id = f"{request.node.originalname}[{model}-{mode_name}-{comm}]"
    nodes = settings.nodes.count
    what = f"{model} {mode_name} {comm} (x{nproc}" + (f" on {nodes} nodes)" if nodes > 1 else ")")
    identity = DistributedRecord(test_id=test_id, model=model, mode=mode_name, device=str(perf_device), comm=comm,
                                 world_size=nproc, nodes=nodes)
    record_result(identity, identity=True)

    result, docs = _cell_launch(request, _launches, settings, nproc, model, mode_name, comm)
    def fail(message: str) -> None:
        # the JSON keeps why, for readers of --benchmark-json who never see the terminal
        record_result(replace(identity, message=message))
        pytest.fail(message, pytrace=False)

    if docs is None:
        fail(f"{what}: no result from every rank; torchrun launch {result.explain(settings.nodes.per_node(nproc))}")
    unsupported = next((d["unsupported"] for d in docs if d.get("unsupported")), None)
    if unsupported:
        pytest.skip(f"{what}: {unsupported}")

    confidence = 0.99
    figs = merge_ranks(docs, confidence)
    entry = source.entry(test_id) if source is not None else None
    baseline = entry if isinstance(entry, DistributedEntry) else None
    checks = judging.cell_checks(baseline, figs, model, f"{mode_name} {comm} x{nproc}",
                                 lambda kind: source.reference(test_id, kind, settings.tolerance)
                                 if source is not None else None)
    gates = judging.gates_of(settings.gate, checks, figs)
    verdicts = judging.verdicts_of(figs, checks)
    confirmation = None
    if Verdict.REGRESSION in judging.gated_verdicts(verdicts, gates):
        confirmation = _confirmation(request, settings, nproc, dist_cell, fail, what, confidence)
        verdicts = judging.confirmed_by_launch(verdicts, checks, confirmation)
    verdicts, together = judging.apply_group_rule(verdicts, checks, figs)
    verdict = combined(judging.gated_verdicts(verdicts, gates))
    message = judging.cell_message(what, figs, checks, verdicts, confirmation, gpu=perf_device.type == "cuda",
                                   note=STRATEGIES[get_comm(comm).strategy].host_bound_note)
    message += f"; {together}" if together else ""

    problems = _problems(docs)
    record = _record(identity, figs, docs, settings, result, verdict=verdict, message=message, gated=list(gates),
                     ratios=judging.ratio_figures(figs, checks, verdicts, docs))
    record_result(record)
    _tag_injected(request, benchmark, docs)  # on the record just kept, which the run history appends
    # pytest-benchmark's figures: the mode's time per step in each round, on the device where measured
    mode_round_ms = (record.ratio(DIST_DEVICE).side(MODE_SIDE).round_ms
                     or record.ratio(DIST_WALL).side(MODE_SIDE).round_ms or ())
    record_step_times(benchmark, [ms / 1e3 for ms in mode_round_ms])
    if settings.update_baselines and source is not None and not problems:
        _record_entry(source, test_id, figs, docs, settings, software, previous=baseline)

    conclude(verdict, problems, what, message, strict=settings.strict, kind="distributed speed",
             inconclusive=InconclusiveDistributedSpeed)
    if source is not None and not source.exists and not settings.update_baselines:
        warnings.warn(UserWarning(f"no baseline file {source.path}; {message}. Record one with "
                                  f"`pytest perf/test_distributed.py --perf-update-baselines`"))


def _confirmation(request, settings, nproc: int, dist_cell: tuple[str, str, str], fail, what: str,
                  confidence: float) -> DistFigures:
    """The figures of a second, independent launch of the cell: as in the 1-GPU suite, a regression stands
    only when it agrees; `fail` ends the test where that launch fails."""
    model, mode_name, comm = dist_cell
    again, again_docs = _launch_again(request, settings, nproc, model, mode_name, comm)
    if again_docs is None:
        fail(f"{what}: confirming launch failed: {again.explain(settings.nodes.per_node(nproc))}")
    return merge_ranks(again_docs, confidence)


def _shared_launch(request, launches: dict, settings, nproc: int, model: str, mode_name: str, comm: str):
    """(launch result, output folder) of the one launch that times every comm variant of (model, mode):
    made by the first of its cells, reused by the others."""
    key = (model, mode_name)
    if key not in launches:
        out = request.getfixturevalue("tmp_path_factory").mktemp(f"dist-{model}-{mode_name}")
        comms = _group_comms(request.session, model, mode_name) or [comm]
        launches[key] = (_launch(request.config, settings, nproc, model, mode_name, comms, out), out)
    return launches[key]


def _cell_launch(request, launches: dict, settings, nproc: int, model: str, mode_name: str, comm: str):
    """(launch result, rank documents or None) of this cell's variant: from the launch it shares with its
    siblings, or, where that launch ended before this variant was done (another variant's crash, a
    hang, a failed start), from a launch of its own, so that no variant's failure is blamed on another."""
    result, out = _shared_launch(request, launches, settings, nproc, model, mode_name, comm)
    docs = _rank_docs(out, comm, nproc)
    if docs is None and not result.ok and failed_comm(result.output) != comm:
        result, docs = _launch_again(request, settings, nproc, model, mode_name, comm)
    return result, docs


def _launch_again(request, settings, nproc: int, model: str, mode_name: str, comm: str):
    """(launch result, rank documents or None) of a second, independent launch of one comm variant."""
    out = request.getfixturevalue("tmp_path_factory").mktemp(f"dist-{model}-{mode_name}-{comm}-again")
    again = _launch(request.config, settings, nproc, model, mode_name, [comm], out)
    return again, _rank_docs(out, comm, nproc)


def _tag_injected(request, benchmark, docs: list[dict]) -> None:
    """Name a slowdown that some rank's steps carried (``ampbench.slowdown`` on any node) in the cell's
    extra_info and kept record, as that plugin does for a slowdown of this process's own."""
    how = next((d["injected_slowdown"] for d in docs if d.get("injected_slowdown") is not None), None)
    if how is not None:
        benchmark.extra_info[INJECTED_KEY] = how
        summary.annotate(request.config, request.node.nodeid, **{INJECTED_KEY: how})


def _problems(docs: list[dict]) -> list[str]:
    """Why the ranks did not really train: no step moved the weights, or their loss scales parted or broke."""
    scales = [d.get("loss_scale") for d in docs]
    problems = []
    if not all(d["weights_moved"] for d in docs):
        problems.append("no optimizer step changed the weights on some rank (every step skipped?)")
    if len(set(scales)) > 1:
        problems.append(f"ranks ended with different loss scales {scales}")
    if any(s is not None and not (math.isfinite(s) and s > 0) for s in scales):
        problems.append(f"loss scale {scales} after the timed run; expected finite and positive")
    return problems


def _record(identity: DistributedRecord, figs: DistFigures, docs: list[dict], settings, result: LaunchResult,
            **concluded) -> DistributedRecord:
    """The cell's record: the launch's figures merged over its ranks, and what the cell concluded (its
    ratios among it)."""
    nproc = len(docs)
    mode = DistributedSide(throughput=figs.throughput_per_gpu * nproc, throughput_per_gpu=figs.throughput_per_gpu,
                           comm_share=figs.comm_share, comm_overlap=figs.comm_overlap, idle_share=figs.idle_share,
                           host_bound=figs.host_bound, steps_per_block=docs[0]["mode_steps"])
    # the ranks' worker documents name fp32's figures as their own protocol does (``speed_worker``)
    fp32 = DistributedSide(throughput_per_gpu=figs.throughput_per_gpu_ref,
                           comm_share=mean_over_ranks(docs, "comm_share_ref"),
                           comm_overlap=mean_over_ranks(docs, "comm_overlap_ref"),
                           idle_share=max_over_ranks(docs, "idle_share_ref"), steps_per_block=docs[0]["ref_steps"])
    return replace(
        identity, batch_size_per_gpu=docs[0]["batch_size"], sides={MODE_SIDE: mode, FP32_SIDE: fp32},
        device_queue=DeviceQueue(text=docs[0].get("device_queue")), recording=settings.update_baselines,
        weights_moved=all(d["weights_moved"] for d in docs), loss_scale=docs[0].get("loss_scale"),
        backend=docs[0]["backend"],
        strategy=docs[0]["strategy"], block_seconds=settings.block_seconds, cudnn_benchmark=settings.cudnn_benchmark,
        launch_s=result.seconds, **concluded)


def _record_entry(source: BaselineSource, test_id: str, figs: DistFigures, docs: list[dict], settings, software: dict,
                     previous: DistributedEntry | None) -> None:
    """Record the cell's entry and write the file at once: a session cut short keeps every cell it finished.
    Its ratios' figures are each row's (``judging.recorded_ratios``); a re-recording measured alike keeps
    the device time's learned spread of `previous`, the entry the cell was judged against."""
    measured_with = {"block_seconds": settings.block_seconds, "cudnn_benchmark": settings.cudnn_benchmark}
    rows = judging.recorded_ratios(figs, settings.tolerance, previous, measured_with)
    # the figures keep the places entries have always given them, so a re-recorded file differs only in
    # its values: the wall-clock speedup's first, the scaling efficiency's after throughput, every other
    # row's after the cell's own figures
    wall, scaling = rows.pop(judging.SPEEDUP), rows.pop(judging.EFFICIENCY)
    source.record(test_id, {
        **wall, "throughput_per_gpu": figs.throughput_per_gpu, "throughput_per_gpu_ref": figs.throughput_per_gpu_ref,
        **scaling, "comm_share": figs.comm_share, "comm_overlap": figs.comm_overlap, "idle_share": figs.idle_share,
        "world_size": len(docs),
        "batch_size": docs[0]["batch_size"], "block_seconds": settings.block_seconds,
        "cudnn_benchmark": settings.cudnn_benchmark,
        **{key: value for row in rows.values() for key, value in row.items()},
    }, software)
    source.write()


def _strategy_test(strategy: str, doc: str):
    """The distributed speed test of one strategy (its cells: ``pytest_generate_tests``)."""

    @pytest.mark.strategy(strategy)
    @pytest.mark.benchmark(group="distributed", **STEP_TIMES)
    def test(request, benchmark, record_result, dist_cell, perf_settings, perf_device, perf_world_size,
             distributed_baseline_source, software, _launches):
        _speed_cell(request, benchmark, record_result, dist_cell, perf_settings, perf_device, perf_world_size,
                    distributed_baseline_source, software, _launches)

    test.__doc__ = doc
    return test


test_ddp_speed = _strategy_test("ddp",
                                "A mode under DDP with this comm variant against fp32 under DDP with fp32 all-reduce.")
test_fsdp2_speed = _strategy_test(
    "fsdp2", "A mode under FSDP2 with this mixed-precision policy against fp32 under FSDP2 without one.")
