"""Mixed precision past one GPU: the communication variants as one table, how each wraps a model, and
NCCL's share of a step read from a profiler trace (``ampbench.distributed.figures`` merges the ranks'
documents into a cell's figures).

The per-rank program is ``ampbench.distributed.speed_worker`` (run by torchrun); ``ampbench.distributed.launch`` starts
it.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, NoReturn, Sequence

import torch
from torch import nn

from ampbench import models
from ampbench.modes import MODES, PrecisionMode

if TYPE_CHECKING:  # the trainer loads where a rank trains
    from ampbench.train import Scaler

_F32, _F16, _BF16 = torch.float32, torch.float16, torch.bfloat16


def _ddp_hook(name: str) -> Callable:
    # looked up by name so this module imports where torch.distributed's algorithms are absent
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return getattr(default_hooks, name)


@dataclass(frozen=True)
class CommVariant:
    """How gradients travel between ranks, and which precision modes that makes sense for."""

    name: str  # key in COMM_VARIANTS and the last part of a test id
    strategy: str  # key of STRATEGIES: "ddp" or "fsdp2"
    fp32_comm: str  # the variant the fp32 side trains with: the same parallelism, fp32 reduction
    ddp_hook: str | None = None  # name in ddp_comm_hooks.default_hooks; None: DDP's fp32 all-reduce
    param_dtype: torch.dtype | None = None  # FSDP2 MixedPrecisionPolicy: dtype parameters are gathered in
    reduce_dtype: torch.dtype | None = None  # FSDP2 MixedPrecisionPolicy: dtype gradients are reduced in
    # the modes it applies to, by their fields (never by name)
    param_dtypes: tuple[torch.dtype, ...] = (_F32,)
    autocast_dtypes: tuple[torch.dtype | None, ...] = (None, _F16, _BF16)
    loss_scalings: tuple[str, ...] = ("none", "dynamic", "static")
    what: str = ""

    def applies_to(self, mode: PrecisionMode) -> bool:
        return (mode.param_dtype in self.param_dtypes and mode.autocast_dtype in self.autocast_dtypes
                and mode.loss_scaling in self.loss_scalings)

    def hook(self) -> Callable | None:
        return _ddp_hook(self.ddp_hook) if self.ddp_hook else None

    def mp_policy(self):
        from torch.distributed.fsdp import MixedPrecisionPolicy

        return MixedPrecisionPolicy(param_dtype=self.param_dtype, reduce_dtype=self.reduce_dtype)


_ALL_DTYPES = (_F32, _F16, _BF16)

COMM_VARIANTS: dict[str, CommVariant] = {
    v.name: v
    for v in (
        # every mode: its gradients are all-reduced in the dtype they have
        CommVariant("fp32", "ddp", "fp32", param_dtypes=_ALL_DTYPES,
                    what="DDP, gradients all-reduced in their own dtype (fp32 for fp32 parameters)"),
        # compressing only makes sense for fp32 gradients: fp16/bf16 ones are already that small
        CommVariant("bf16_hook", "ddp", "fp32", ddp_hook="bf16_compress_hook",
                    what="DDP, fp32 gradients cast to bf16 for the all-reduce (bf16_compress_hook)"),
        CommVariant("fp16_hook", "ddp", "fp32", ddp_hook="fp16_compress_hook",
                    what="DDP, fp32 gradients cast to fp16 for the all-reduce (fp16_compress_hook)"),
        # FSDP2 shards fp32 parameters; under a dynamic loss scale each rank sees only its shard of the
        # gradients, so STRATEGIES gives it ShardedGradScaler (perf/test_distributed_scaling.py checks
        # that every rank skips an overflowing step); ampbench's static LossScaler is not checked there
        CommVariant("fsdp2_fp32", "fsdp2", "fsdp2_fp32", loss_scalings=("none", "dynamic"),
                    what="FSDP2 without a mixed-precision policy: fp32 all-gather and reduce-scatter"),
        CommVariant("fsdp2_fp32_reduce", "fsdp2", "fsdp2_fp32", param_dtype=_BF16, reduce_dtype=_F32,
                    autocast_dtypes=(_BF16,), loss_scalings=("none",),
                    what="FSDP2, parameters gathered in bf16, gradients reduce-scattered in fp32"),
        CommVariant("fsdp2_bf16_reduce", "fsdp2", "fsdp2_fp32", param_dtype=_BF16, reduce_dtype=_BF16,
                    autocast_dtypes=(_BF16,), loss_scalings=("none",),
                    what="FSDP2, parameters gathered and gradients reduce-scattered in bf16"),
    )
}


def get_comm(name: str) -> CommVariant:
    try:
        return COMM_VARIANTS[name]
    except KeyError:
        raise KeyError(f"unknown comm variant {name!r}; valid: {', '.join(COMM_VARIANTS)}") from None


def variants_for(mode: PrecisionMode, strategy: str | None = None) -> list[CommVariant]:
    """The comm variants `mode` runs under (of one strategy, if given), in table order."""
    return [v for v in COMM_VARIANTS.values() if v.applies_to(mode) and strategy in (None, v.strategy)]


# -- wrapping a model ------------------------------------------------------------------------------


class VariantUnsupported(Exception):
    """This torch build or device cannot run a comm variant; the message says what is missing. Raised
    alike on every rank (it depends on the build, the device and the model, never on the rank), before
    the variant's first collective of its own, so the ranks can go on to the next variant together."""


def _wrap_ddp(model: nn.Module, variant: CommVariant, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    hook = variant.hook()
    if hook is not None:
        try:
            ddp.register_comm_hook(state=None, hook=hook)  # state None: the default process group
        except (TypeError, RuntimeError) as exc:
            # DDP checks at registration what the hook needs of the build (bf16_compress_hook: CUDA and
            # NCCL 2.10+, or XPU and XCCL, which a CPU-only build lacks); its message names it
            raise VariantUnsupported(f"torch {torch.__version__} refuses DDP's {variant.ddp_hook}: {exc}") from exc
    return ddp


def fsdp2_units(model: nn.Module) -> list[nn.Module]:
    """The modules FSDP2 shards as units, innermost first, the root last: each parameterised child of
    the root's ModuleList/Sequential children (resnet's stages' blocks, GPT's transformer blocks), so
    one block's all-gather is prefetched while the previous one computes. Everything else (stem, head,
    GPT's tied embedding and lm_head) belongs to the root's unit."""
    units = [
        block
        for child in model.children() if isinstance(child, (nn.ModuleList, nn.Sequential))
        for block in child.children() if any(True for _ in block.parameters())
    ]
    return [*units, model]


def _batch_norm_refusal(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why this device's batch norm cannot train with `dtype` weights beside fp32 running statistics
    (what a BatchNorm layer holds once FSDP2 gathers its parameters in `dtype`: buffers keep their
    dtype), or None where it can. CUDA's kernels take the mix; the CPU's take 16-bit input only with
    fp32 weights."""
    x = torch.ones(2, 2, 2, 2, device=device, dtype=dtype, requires_grad=True)
    weight = torch.ones(2, device=device, dtype=dtype, requires_grad=True)
    stats = torch.zeros(2, device=device), torch.ones(2, device=device)
    try:
        nn.functional.batch_norm(x, *stats, weight, torch.zeros_like(weight), training=True).float().sum().backward()
    except RuntimeError as exc:
        return str(exc)
    return None


def _wrap_fsdp2(model: nn.Module, variant: CommVariant, device: torch.device) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    if variant.param_dtype not in (None, _F32) and any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                                       for m in model.modules()):
        refusal = _batch_norm_refusal(device, variant.param_dtype)
        if refusal:
            raise VariantUnsupported(
                f"{device.type}'s batch norm in torch {torch.__version__} has no kernel for "
                f"{str(variant.param_dtype).removeprefix('torch.')} weights beside fp32 running statistics, "
                f"which FSDP2's param_dtype gives this model's BatchNorm layers ({refusal})")
    policy, mesh = variant.mp_policy(), device_mesh(device)
    # fully_shard refuses parameters that are not contiguous, and on CUDA a convnet's Trainer has made
    # its conv weights channels_last; FSDP2 all-gathers every parameter contiguous anyway, so this only
    # moves the layout change to before the shard. The inputs stay channels_last.
    model.to(memory_format=torch.contiguous_format)
    for unit in fsdp2_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    return model


def device_mesh(device: torch.device):
    """A 1-D mesh of every rank on `device`'s type: named explicitly, because fully_shard's default
    mesh takes the machine's accelerator, which is wrong for gloo ranks on a machine with GPUs."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def _sharded_grad_scaler(device: torch.device):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device.type)


@dataclass(frozen=True)
class Strategy:
    name: str
    wrap: Callable[[nn.Module, CommVariant, torch.device], nn.Module]
    # loss scalers that replace ampbench.train.LOSS_SCALERS' under this strategy: with sharded
    # gradients, whether any rank overflowed must be agreed across ranks
    scalers: dict[str, Callable[[torch.device], Scaler]] = field(default_factory=dict)
    # what a host-bound cell's message adds of the strategy's own host cost, measured outside the harness
    host_bound_note: str = ""


# dev/fsdp2_probe.py, a loop of its own with the suite's wrapping (docs/design.md, "FSDP2's scaling")
FSDP2_HOST = ("FSDP2's eager step is host-bound outside this harness too: its host launches a GPT step in "
              "about 90 ms where the GPU's work is 30 ms, 8-10 ms of it the optimizer over DTensors")

STRATEGIES: dict[str, Strategy] = {
    "ddp": Strategy("ddp", _wrap_ddp),
    "fsdp2": Strategy("fsdp2", _wrap_fsdp2, {"dynamic": _sharded_grad_scaler}, host_bound_note=FSDP2_HOST),
}


# -- ending a rank -----------------------------------------------------------------------------------


def exit_failed_rank() -> NoReturn:
    """End a rank that raised: its traceback printed, then exit status 1 at once, without
    ``destroy_process_group``. That call flushes the NCCL communicator's pending work (ncclCommFinalize,
    torch 2.6 on) and NCCL's teardown may synchronise with the node's other ranks, which here sit in a
    collective this rank will never join: the failed rank would hang until the collective timeout, a
    waiting rank's watchdog would fire first, and torchrun would name that rank as the root cause,
    with its timeout instead of this rank's error. Exiting now lets torchrun see this rank fail first
    and stop the others; the driver frees the GPU and the communicator with the process."""
    traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


# -- NCCL's share of a step, from a profiler trace -------------------------------------------------


@dataclass(frozen=True)
class Kernel:
    name: str
    stream: int
    start: float  # microseconds
    end: float


def kernels_from_trace(trace: dict) -> list[Kernel]:
    """GPU kernels of a torch.profiler chrome trace (``export_chrome_trace``)."""
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") != "kernel" or "dur" not in ev:
            continue
        stream = (ev.get("args") or {}).get("stream", ev.get("tid"))
        start = float(ev["ts"])
        out.append(Kernel(str(ev.get("name", "")), int(stream), start, start + float(ev["dur"])))
    return out


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(union: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in union)


def comm_figures(kernels: Sequence[Kernel]) -> dict[str, float | None]:
    """comm_share: the time NCCL kernels ran over the span from the first kernel's start to the last
    one's end; comm_overlap: the part of that NCCL time during which a compute kernel (any other
    kernel) ran on another stream. Both count time, the union of intervals, not summed durations:
    NCCL kernels of two streams run at once (FSDP2's all-gather of the next unit during the
    reduce-scatter of the last), and a sum would count that time twice. NCCL kernels include the time
    they wait for the other ranks, so a share is an upper bound on the wire time.

    idle_share: the part of the span in which no kernel ran at all, NCCL's included: the GPU waiting
    for this rank's host to launch the next kernel (``hostload.is_host_bound``, as in the single-GPU cells)."""
    if not kernels:
        return {"comm_share": None, "comm_overlap": None, "comm_us": 0.0, "idle_share": None}
    span = max(k.end for k in kernels) - min(k.start for k in kernels)
    idle = 1.0 - _length(_union([(k.start, k.end) for k in kernels])) / span if span > 0 else None
    nccl = [k for k in kernels if "nccl" in k.name.lower()]
    if not nccl:
        return {"comm_share": 0.0, "comm_overlap": None, "comm_us": 0.0, "idle_share": idle}
    comm = _length(_union([(k.start, k.end) for k in nccl]))
    compute_by_stream: dict[int, list[tuple[float, float]]] = {}
    for k in kernels:
        if "nccl" not in k.name.lower():
            compute_by_stream.setdefault(k.stream, []).append((k.start, k.end))
    others: dict[int, list[tuple[float, float]]] = {}  # per NCCL stream: compute on every other stream
    overlapped: list[tuple[float, float]] = []
    for k in nccl:
        if k.stream not in others:
            others[k.stream] = _union([iv for s, ivs in compute_by_stream.items() if s != k.stream for iv in ivs])
        overlapped += [(max(k.start, x), min(k.end, y)) for x, y in others[k.stream] if x < k.end and y > k.start]
    return {"comm_share": comm / span if span > 0 else None,
            "comm_overlap": _length(_union(overlapped)) / comm if comm > 0 else None, "comm_us": comm,
            "idle_share": idle}


# -- how many ranks, and which cells ----------------------------------------------------------------

CPU_WORLD_SIZE = 2  # gloo processes of the CPU smoke pass
# the CPU pass runs in CI on two slow cores: one small model (its ModelSpec's `distributed` field), one
# mode, every variant that applies
CPU_MODES = ("amp_bf16",)


def default_cells(device: torch.device, tier: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(models, modes) of the distributed cells where --perf-models and --perf-precisions name none.
    The models are those whose ModelSpec's `distributed` field names the run. On GPUs every mode but
    those whose row compiles (fp8): as in the single-GPU suite they run where --perf-precisions names
    them, since each comm variant builds two trainers and each compile costs about a minute. And as
    there, the quick tier leaves out the rows that are ``full_tier_only`` (fp32's control of the harness,
    TF32), which cost a third of the distributed tests' time (docs/design.md)."""
    if device.type != "cuda":
        return tuple(models.kind_models("distributed", "cpu_smoke")), CPU_MODES
    full = tier == "full"
    # a compiled-only tier deselects these tests (their cells are no model_name cells); its collection
    # takes the quick tier's models
    names = tuple(models.kind_models("distributed", "full" if full else "quick"))
    return names, tuple(name for name, row in MODES.items() if not row.compile and (full or not row.full_tier_only))


def resolve_world_size(requested: int | None, device: torch.device, gpus: int, cpus: int, nodes: int = 1) -> int:
    """--perf-world-size as given, or its default: every visible GPU of each of `nodes` nodes, or
    CPU_WORLD_SIZE processes on the CPU (at least one per node). A count that `nodes` do not share
    evenly, or more ranks on a node than its GPUs, or on the CPU than the `cpus` this process may run on,
    raise ValueError naming the counts: ranks that share a core take turns, and time out instead of
    measuring."""
    if requested is not None and requested % nodes:
        raise ValueError(f"--perf-world-size {requested}: --perf-nnodes {nodes} cannot share it evenly "
                         f"(each node runs world size / nodes ranks)")
    per_node = requested // nodes if requested is not None else None
    share = f"{per_node} ranks on each of {nodes} nodes, " if nodes > 1 else ""
    if device.type != "cuda":
        if per_node is not None and per_node > cpus:
            raise ValueError(f"--perf-world-size {requested}: {share}only {cpus} CPU{'s' if cpus != 1 else ''} "
                             "to run gloo processes on")
        return requested if requested is not None else nodes * max(1, -(-CPU_WORLD_SIZE // nodes))
    if per_node is not None and per_node > gpus:
        raise ValueError(f"--perf-world-size {requested}: {share}only {gpus} GPU{'s' if gpus != 1 else ''} visible")
    return requested if requested is not None else gpus * nodes


def world_size_skip_reason(world_size: int, device: torch.device, gpus: int, nodes: int = 1) -> str | None:
    """Why the distributed tests cannot run, or None."""
    if device.type == "cuda" and gpus < 2 and nodes == 1:
        return f"needs 2+ GPUs, found {gpus}"
    if device.type == "cuda" and gpus < 1:
        return "needs a GPU on each node, found none"
    if world_size < 2:
        return f"needs 2+ ranks, --perf-world-size is {world_size}"
    return None
