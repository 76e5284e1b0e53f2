"""FSDP2's step time and scaling in a training loop of its own, without the suite's harness::

    torchrun --nproc-per-node 2 dev/fsdp2_probe.py --model gpt --mode amp_bf16 --out /tmp/probe

The model is built from its ModelSpec config and wrapped as ``ampbench.distributed.variants`` wraps
it (``fully_shard`` on each of ``fsdp2_units``), with the optimizer ``ampbench.train.OPTIMIZERS``
builds, the mode's autocast, one fixed ``spec.make_batch`` batch per rank. --variants: ``single``
(rank 0 alone, unwrapped: the 1-GPU side), ``ddp`` (a control) and the suite's ``fsdp2_*`` comm
variants (their MixedPrecisionPolicy). Per variant:

1. Step time: CUDA events ("step ms") and perf_counter ("wall ms") around --steps steps, --rounds
   rounds after --warmup, all ranks starting each round together; the slowest rank's median round.
   "eff" = single's step time / the variant's (the same per-rank batch: weak scaling). With --graph,
   also "graph ms": CUDA events around --steps replays of one step captured as a CUDA graph (plain
   ``torch.cuda.graph``, none of the suite's holds), the GPU's time with the host taken out, and "g eff",
   its efficiency: what the suite's device-time scaling efficiency is checked against.
2. The optimizer step alone, over tensors or FSDP2's DTensors, between synchronizes: "host" until
   ``opt.step()`` returns, "total" until the device is done; the suite's optimizer and torch's
   default, foreach, fused and for-loop ones (failures as text).
3. One profiled step per rank (CPU and CUDA; it ends in a synchronize): ``trace_<variant>_rank<R>.json``
   and both ranks on one clock in ``trace_<variant>_merged.json``. Means over ranks of: the step's
   time ("profiled"; the profiler slows the host), the host's time to launch it ("launch"), the GPU's
   busy time (union of kernels), NCCL's (waits for the other rank included), NCCL time with no other
   kernel running ("exposed"), the optimizer's host time ("in step"); and each rank's step start
   relative to rank 0's (host clock, shared on one machine; ``barrier_skew_ms`` checks it).

NCCL time that grows where the GPU's own work shrinks, with the ranks' starts or launch times apart by
as much, means ranks out of step; "launch" near "profiled" means a host-bound step. If this loop
scales where the suite's cells do not, the harness is the cause. Off CUDA there are only host and wall
times. A rank that fails alone inside a collective leaves the others waiting until --timeout.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

# this checkout's package, not an installed copy of another checkout's
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from ampbench import models  # noqa: E402
from ampbench.distributed.graphed import DDP_STATS_EVERY, EAGER_BEFORE_CAPTURE, own_stream  # noqa: E402
from ampbench.distributed.variants import device_mesh, fsdp2_units, get_comm  # noqa: E402
from ampbench.modes import PrecisionMode, get_mode  # noqa: E402
from ampbench.train import OPTIMIZERS, memory_format_for  # noqa: E402
from probe_traces import merge_traces, summarise  # noqa: E402  (dev/, first on the path of a script run from it)

# the optimizers of (2): keyword arguments over the suite's optimizer's; None: the suite's own
OPT_IMPLS: dict[str, dict | None] = {
    "suite": None, "default": {"foreach": None, "fused": None}, "foreach": {"foreach": True, "fused": False},
    "fused": {"foreach": False, "fused": True}, "for-loop": {"foreach": False, "fused": False}}
UNSUPPORTED = ("master_weights", "keep_norms_fp32", "fp8_recipe", "compile")  # PrecisionMode fields


@dataclass
class Run:
    """One variant's model, optimizer, loss scaler and batch on this rank."""
    spec: models.ModelSpec
    mode: PrecisionMode
    device: torch.device
    model: nn.Module
    opt: torch.optim.Optimizer
    scaler: object | None
    x: torch.Tensor
    y: torch.Tensor


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def together(device: torch.device, alone: bool = False) -> None:
    """The device idle, then (unless `alone`) every rank past a barrier."""
    sync(device)
    if not alone:
        dist.barrier(device_ids=[device.index]) if device.type == "cuda" else dist.barrier()
        sync(device)


def wrap(model: nn.Module, variant: str, device: torch.device) -> nn.Module:
    if variant == "single":
        return model
    if variant == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    comm = get_comm(variant)
    if comm.strategy != "fsdp2":
        raise ValueError(f"{variant}: not an FSDP2 comm variant; use ddp for DDP")
    from torch.distributed.fsdp import fully_shard
    mesh = device_mesh(device)
    for unit in fsdp2_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=comm.mp_policy())
    return model


def build(spec: models.ModelSpec, mode: PrecisionMode, variant: str, device: torch.device, args) -> Run:
    unsupported = [f for f in UNSUPPORTED if getattr(mode, f)]
    if unsupported or mode.loss_scaling == "static":
        raise ValueError(f"mode {mode.name}: this loop has no {', '.join(unsupported) or 'static loss scale'}")
    config = spec.config_for(args.smoke)
    torch.manual_seed(0)  # the same weights on every rank: FSDP2 shards each rank's own copy
    layout = memory_format_for(spec, device)  # the suite's
    with torch.device(device):
        model = spec.build(config).to(dtype=mode.param_dtype, memory_format=layout).train()
    model = wrap(model, variant, device)
    opt = OPTIMIZERS[spec.optimizer](list(model.parameters()), spec.lr, mode.param_dtype)
    scaler = None
    if mode.loss_scaling == "dynamic":
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
        scaler = (ShardedGradScaler if variant.startswith("fsdp2") else torch.amp.GradScaler)(device.type)
    gen = torch.Generator(device=device).manual_seed(dist.get_rank())
    x, y = spec.make_batch(config, args.batch_size or spec.batch_size_for(args.smoke), device, gen)
    if x.is_floating_point():
        x = x.to(mode.param_dtype).contiguous(memory_format=layout) if x.dim() == 4 else x.to(mode.param_dtype)
    return Run(spec, mode, device, model, opt, scaler, x, y)


def step(run: Run, cache: bool = True) -> None:
    with record_function("probe.zero_grad"):
        run.opt.zero_grad(set_to_none=True)
    with record_function("probe.forward"), run.mode.autocast(run.device, cache_enabled=cache):
        loss = run.spec.loss(run.model(run.x).float(), run.y)
    with record_function("probe.backward"):
        (run.scaler.scale(loss) if run.scaler else loss).backward()
    with record_function("probe.optimizer"):
        if run.scaler:
            run.scaler.step(run.opt)
            run.scaler.update()
        else:
            run.opt.step()


def time_steps(run: Run, args, alone: bool) -> dict:
    """Per-step ms of each round: CUDA events (wall clock off CUDA) and wall clock."""
    cuda = run.device.type == "cuda"
    for _ in range(args.warmup):
        step(run)
    events, walls = [], []
    for _ in range(args.rounds):
        together(run.device, alone)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        if cuda:
            start.record()
        for _ in range(args.steps):
            step(run)
        if cuda:
            end.record()
        sync(run.device)
        walls.append((time.perf_counter() - t0) * 1e3 / args.steps)
        events.append(start.elapsed_time(end) / args.steps if cuda else walls[-1])
    return {"step_ms": events, "wall_ms": walls}


def time_graph(run: Run, args, alone: bool) -> dict:
    """Per-step ms of each round of replays of one step captured as a CUDA graph (CUDA events around
    --steps replays): the GPU's time with the host taken out, as the suite's device time. Plain
    torch.cuda.graph: warm-up on the capturing stream, capturable optimizer, autocast without its cache,
    "thread_local" capture (NCCL's watchdog thread queries events meanwhile). DDP checks its runtime
    statistics with host syncs on every hundredth iteration, which no capture may hold."""
    if run.device.type != "cuda":
        return {"graph_ms": None, "graph_error": "no CUDA device"}
    stream = torch.cuda.current_stream(run.device)  # not the legacy default one: see main()
    taken = args.warmup + args.rounds * args.steps  # the eager steps time_steps took before
    warm = max(3, EAGER_BEFORE_CAPTURE - taken)  # as the suite's ranks (``graphed``): DDP's first steps eager
    warm += (taken + warm + 1) % DDP_STATS_EVERY == 0
    for _ in range(warm):
        step(run, cache=False)
    for group in run.opt.param_groups:
        if "capturable" in group:
            group["capturable"] = True
    together(run.device, alone)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            step(run, cache=False)
    except Exception as exc:  # the text is the finding; every rank fails alike or hangs in a collective
        return {"graph_ms": None, "graph_error": f"{type(exc).__name__}: {str(exc).strip()[:200]}"}
    graph.replay()  # the first replay uploads the graph
    times = []
    for _ in range(args.rounds):
        together(run.device, alone)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.steps):
            graph.replay()
        end.record()
        sync(run.device)
        times.append(start.elapsed_time(end) / args.steps)
    return {"graph_ms": times, "graph_error": None}


def _optimizer(run: Run, kwargs: dict | None) -> torch.optim.Optimizer:
    if kwargs is None:
        return run.opt
    cls = type(run.opt)
    accepted = inspect.signature(cls.__init__).parameters
    defaults = {k: v for k, v in run.opt.defaults.items() if k in accepted}
    return cls(list(run.model.parameters()), **{**defaults, **kwargs})


def _time_one(opt: torch.optim.Optimizer, device: torch.device, reps: int) -> dict:
    host, total, zero = [], [], []
    for i in range(reps + 2):  # two untimed: a new optimizer makes its state in its first step
        sync(device)
        t0 = time.perf_counter()
        opt.step()
        t1 = time.perf_counter()
        sync(device)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        if i >= 2:
            host.append((t1 - t0) * 1e3)
            total.append((t2 - t0) * 1e3)
            zero.append((time.perf_counter() - t2) * 1e3)
    return {"host_ms": statistics.median(host), "total_ms": statistics.median(total),
            "zero_grad_host_ms": statistics.median(zero)}


def time_optimizer(run: Run, reps: int) -> dict[str, dict | str]:
    """Per OPT_IMPLS entry: median host and total ms of opt.step and host ms of zero_grad, or the error.
    The gradients are those the last step left, then zeros: no implementation skips arithmetic on them."""
    out: dict[str, dict | str] = {}
    for name, kwargs in OPT_IMPLS.items():
        try:
            out[name] = _time_one(_optimizer(run, kwargs), run.device, reps)
        except Exception as exc:  # DTensor lacks rules for some fused kernels: that is a finding
            out[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    return out


def profile_steps(run: Run, steps: int, path: Path) -> dict:
    """The trace of `steps` steps, after one unprofiled and one warm-up step under the profiler: its
    start (CUPTI attaching) takes each rank a different time, which a first traced step would show."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.device.type == "cuda" else [])
    with profile(activities=activities, schedule=schedule(wait=1, warmup=1, active=steps)) as prof:
        for _ in range(steps + 2):
            with record_function("probe.step"):
                step(run)
                with record_function("probe.sync"):
                    sync(run.device)
            prof.step()
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())


def run_variant(spec: models.ModelSpec, mode: PrecisionMode, variant: str, device: torch.device, args) -> dict:
    """This rank's figures of one variant; {"skipped": ...} on the ranks that wait out `single`."""
    rank, alone = dist.get_rank(), variant == "single"
    if alone and rank != 0:
        return {"skipped": "rank 0 runs single alone"}
    run = build(spec, mode, variant, device, args)
    with mode.math_flags():
        doc: dict = time_steps(run, args, alone)
        if args.graph:
            doc.update(time_graph(run, args, alone))
        doc["optimizer"] = time_optimizer(run, args.opt_reps)
        together(device, alone)
        doc["after_barrier_ns"] = time.time_ns()  # how far apart the ranks' clocks read the same moment
        path = Path(args.out) / f"trace_{variant}_rank{rank}.json"
        doc["profile"] = summarise(profile_steps(run, args.profile_steps, path)) if args.profile_steps else []
    doc["dtensor_params"] = type(next(run.model.parameters())).__name__ == "DTensor"
    return doc


def figures(docs: list[dict]) -> dict:
    """A variant's row: the slowest rank's median round; the profiled figures of its last step, mean over
    ranks; the ranks' start offsets from rank 0's."""
    ran = [d for d in docs if "step_ms" in d]
    prof = [d["profile"][-1] for d in ran if d.get("profile")]
    def mean(key: str) -> float | None:
        vs = [p[key] for p in prof if p.get(key) is not None]
        return sum(vs) / len(vs) if vs else None
    suite_opt = [d["optimizer"]["suite"] for d in ran if isinstance(d["optimizer"].get("suite"), dict)]
    starts = [p["start_us"] for p in prof]
    graphed = [d["graph_ms"] for d in ran if d.get("graph_ms")]
    return {"step_ms": max(statistics.median(d["step_ms"]) for d in ran),
            "graph_ms": max(statistics.median(g) for g in graphed) if len(graphed) == len(ran) else None,
            "graph_error": next((d["graph_error"] for d in ran if d.get("graph_error")), None),
            "wall_ms": max(statistics.median(d["wall_ms"]) for d in ran),
            "profiled_ms": mean("wall_ms"), "launch_ms": mean("launch_ms"),
            "nccl_ms": mean("nccl_ms"), "nccl_exposed_ms": mean("nccl_exposed_ms"),
            "gpu_busy_pct": (100 * mean("gpu_busy_ms") / mean("wall_ms")) if mean("gpu_busy_ms") else None,
            "opt_host_ms": max(o["host_ms"] for o in suite_opt) if suite_opt else None,
            "opt_in_step_ms": mean("opt_host_ms"),
            "start_offsets_ms": [(s - starts[0]) / 1e3 for s in starts],
            "barrier_skew_ms": [(d["after_barrier_ns"] - ran[0]["after_barrier_ns"]) / 1e6 for d in ran]}


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


COLUMNS = (("step ms", "step_ms", ".2f"), ("graph ms", "graph_ms", ".2f"), ("wall ms", "wall_ms", ".2f"),
           ("profiled", "profiled_ms", ".1f"), ("launch", "launch_ms", ".1f"),
           ("NCCL ms", "nccl_ms", ".1f"), ("exposed", "nccl_exposed_ms", ".1f"),
           ("GPU busy%", "gpu_busy_pct", ".0f"), ("opt host", "opt_host_ms", ".2f"),
           ("in step", "opt_in_step_ms", ".2f"))


def report(results: dict) -> str:
    lines = [f"{'variant':<18} {'eff':>5} {'g eff':>5} " + " ".join(f"{c:>9}" for c, _, _ in COLUMNS)
             + "  start offsets ms"]
    alone = results["variants"].get("single", {}).get("figures") or {}
    single, single_graph = alone.get("step_ms"), alone.get("graph_ms")
    for name, v in results["variants"].items():
        if (f := v["figures"]) is None:
            lines.append(f"{name:<18} failed: {'; '.join(sorted(set(v['errors'])))}")
            continue
        eff = _fmt(100 * single / f["step_ms"], ".0f") + "%" if single else "-"
        g_eff = _fmt(100 * single_graph / f["graph_ms"], ".1f") + "%" if single_graph and f["graph_ms"] else "-"
        lines.append(f"{name:<18} {eff:>5} {g_eff:>5} " + " ".join(f"{_fmt(f[k], fmt):>9}" for _, k, fmt in COLUMNS)
                     + "  " + ", ".join(_fmt(o, ".2f") for o in f["start_offsets_ms"]))
    lines += [f"  {name}: no graph ms: {v['figures']['graph_error']}" for name, v in results["variants"].items()
              if v["figures"] and v["figures"]["graph_error"]]
    lines.append("\noptimizer step alone, host/total ms (rank 0):")
    for name, v in results["variants"].items():
        if (opt := next((d["optimizer"] for d in v["ranks"] if "optimizer" in d), None)) is not None:
            lines.append(f"  {name:<18} " + "  ".join(
                f"{impl} {o['host_ms']:.2f}/{o['total_ms']:.2f}" if isinstance(o, dict) else f"{impl} FAILED ({o})"
                for impl, o in opt.items()))
    return "\n".join(lines)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt")
    p.add_argument("--mode", default="amp_bf16")
    p.add_argument("--variants", default="single,ddp,fsdp2_fp32,fsdp2_fp32_reduce",
                   help="comma-separated: single, ddp, and the suite's fsdp2_* comm variants")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--smoke", action="store_true", help="the spec's smoke config and batch (always on the CPU)")
    p.add_argument("--batch-size", type=int, default=None, help="per rank; default: the spec's")
    for name, default in (("warmup", 10), ("steps", 20), ("rounds", 3), ("opt-reps", 10), ("profile-steps", 1)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--graph", action="store_true",
                   help="also replay each variant's step as a CUDA graph: 'graph ms' and its efficiency 'g eff'")
    p.add_argument("--timeout", type=int, default=600, help="collective timeout, seconds")
    p.add_argument("--out", default="fsdp2-probe-out")
    args = p.parse_args()
    args.smoke = args.smoke or args.device == "cpu"
    return args


def main() -> None:
    args = parse_args()
    cuda = args.device == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
        if args.graph:  # DDP's gradient accumulators run on the stream it was built on; capture bars the legacy one
            own_stream(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=args.timeout),
                            device_id=device if cuda else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    spec, mode = models.get_model(args.model), get_mode(args.mode)
    results: dict = {"model": spec.name, "mode": mode.name, "world_size": world, "device": args.device,
                     "smoke": args.smoke, "args": vars(args), "variants": {}}
    for variant in args.variants.split(","):
        try:
            doc = run_variant(spec, mode, variant, device, args)
        except Exception as exc:
            traceback.print_exc()
            doc = {"error": f"{type(exc).__name__}: {exc}"}
        sync(device)
        if cuda:
            torch.cuda.empty_cache()
        docs: list = [None] * world
        dist.all_gather_object(docs, doc)
        errors = [d["error"] for d in docs if "error" in d]
        entry = {"ranks": docs, "figures": None if errors else figures(docs), "errors": errors}
        results["variants"][variant] = entry
        if rank == 0 and not errors and variant != "single" and args.profile_steps > 0:
            merge_traces([Path(args.out) / f"trace_{variant}_rank{r}.json" for r in range(world)],
                         Path(args.out) / f"trace_{variant}_merged.json")
    if rank == 0:
        (Path(args.out) / "probe.json").write_text(json.dumps(results, indent=1))
        print(f"\n{spec.name} {mode.name}, {world} ranks, {args.device}; figures in {args.out}/probe.json\n"
              + report(results), flush=True)
    together(device)  # gloo aborts a rank that tears down while another still writes ("terminate called")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
