"""One rank of the distributed loss-scaling properties, run by torchrun::

    torchrun --nproc-per-node 2 --standalone -m ampbench.distributed.loss_scaling_worker --scenarios FILE --out DIR

FILE holds scenarios drawn by hypothesis in the parent (perf/strategies.py ``dist_scenarios``): a loss
scaler's configuration and a few steps, each naming the one rank (or none) whose local gradient of
one hidden unit is made non-finite before any communication. Every setup of SETUPS runs every
scenario from the same initial weights; per step each rank records its scale, growth tracker, whether
its weights moved, and a digest of its weights, into ``DIR/<setup>/rank{R}.json``. The parent judges.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Callable, cast

import torch
import torch.distributed as dist
from torch import nn

from ampbench.distributed.variants import exit_failed_rank

WIDTH = 8  # hidden units; FSDP2 shards the first layer's rows, WIDTH / world size per rank


class PoisonableNet(nn.Module):
    """Linear -> ReLU -> Linear. With ``poison = (unit, value)`` set, backward replaces the first
    sample's gradient of hidden unit `unit` with `value`: only the first layer's row `unit` (and its
    bias) gets a non-finite gradient, so under FSDP2 only the rank holding that row's shard sees it."""

    def __init__(self, width: int = WIDTH):
        super().__init__()
        self.a, self.b = nn.Linear(width, width), nn.Linear(width, 1)
        self.poison: tuple[int, float] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if self.poison is not None and h.requires_grad:
            h.register_hook(lambda g, poison=self.poison: _poisoned(g, *poison))
        return self.b(torch.relu(h)).square().mean()


def _poisoned(grad: torch.Tensor, unit: int, value: float) -> torch.Tensor:
    grad = grad.clone()
    grad[0, unit] = value
    return grad


def _ddp(net: nn.Module, device: torch.device) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(net, device_ids=[device.index] if device.type == "cuda" else None)


def _fsdp2(net: nn.Module, device: torch.device) -> nn.Module:
    from torch.distributed.fsdp import fully_shard

    from ampbench.distributed.variants import device_mesh

    # fully_shard returns the module it was given, which its class makes an FSDPModule too
    return cast(nn.Module, fully_shard(net, mesh=device_mesh(device)))


def _grad_scaler(device: torch.device, **kw) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(device.type, **kw)


def _sharded_grad_scaler(device: torch.device, **kw) -> torch.amp.GradScaler:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(device.type, **kw)


SCALER_OPTIMIZERS: dict[str, Callable[[list], torch.optim.Optimizer]] = {
    "sgd_foreach": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, foreach=True),
    # fused: the optimizer takes the scaler's scale and inf flag itself (GradScaler.step's other path)
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-2, fused=True),
}


@dataclass(frozen=True)
class Setup:
    name: str
    wrap: Callable[[nn.Module, torch.device], nn.Module]
    scaler: Callable[..., torch.amp.GradScaler]
    optimizer: str  # key of SCALER_OPTIMIZERS
    sharded: bool  # each rank holds a shard of the reduced gradients (FSDP2), not all of them
    agrees: bool = True  # False: a control the properties must catch


SETUPS: dict[str, Setup] = {
    s.name: s
    for s in (
        Setup("ddp-gradscaler-sgd", _ddp, _grad_scaler, "sgd_foreach", False),
        Setup("ddp-gradscaler-adamw", _ddp, _grad_scaler, "adamw_fused", False),
        Setup("fsdp2-sharded-sgd", _fsdp2, _sharded_grad_scaler, "sgd_foreach", True),
        Setup("fsdp2-sharded-adamw", _fsdp2, _sharded_grad_scaler, "adamw_fused", True),
        # plain GradScaler under FSDP2 agrees as well: its inf check on DTensor gradients is all-reduced
        # over the mesh by DTensor's own handler of _amp_foreach_non_finite_check_and_unscale_
        Setup("fsdp2-gradscaler-sgd", _fsdp2, _grad_scaler, "sgd_foreach", True),
        # the control: ranks that never communicate skip on their own and drift apart
        Setup("unsynchronized-gradscaler-sgd", lambda net, device: net, _grad_scaler,
              "sgd_foreach", False, agrees=False),
    )
}


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def _digest(tensors: list[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def run_scenario(setup: Setup, scenario: dict, device: torch.device, rank: int) -> list[dict]:
    torch.manual_seed(0)  # the same initial weights on every rank
    net = PoisonableNet().to(device)
    model = setup.wrap(net, device)
    opt = SCALER_OPTIMIZERS[setup.optimizer](list(model.parameters()))
    scaler = setup.scaler(device, **scenario["scaler"])
    # each rank its own data, so the gradients really differ between ranks before they are reduced
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(1 + rank)).to(device)
    records = []
    for step in scenario["steps"]:
        before = [_local(p).detach().clone() for p in model.parameters()]
        net.poison = (step["unit"], float(step["value"])) if step["rank"] == rank else None
        opt.zero_grad(set_to_none=True)
        scaler.scale(model(x)).backward()
        # what this rank's own gradients (its shards under FSDP2) hold after the reduction: under FSDP2
        # only the rank owning the poisoned row sees the non-finite value
        local_overflow = any(not bool(torch.isfinite(_local(p.grad)).all()) for p in model.parameters()
                             if p.grad is not None)
        scaler.step(opt)
        scaler.update()
        net.poison = None
        after = [_local(p).detach() for p in model.parameters()]
        state = scaler.state_dict()
        records.append({
            "local_overflow": local_overflow, "scale": float(state["scale"]), "tracker": int(state["_growth_tracker"]),
            "moved": any(not torch.equal(a.view(torch.int32), b.view(torch.int32)) for a, b in zip(before, after)),
            "local_digest": _digest(after), "full_digest": _digest([_full(p) for p in model.parameters()]),
        })
    return records


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ampbench.distributed.loss_scaling_worker")
    p.add_argument("--scenarios", type=Path, required=True, help="JSON list of scenarios")
    p.add_argument("--out", type=Path, required=True, help="folder for <setup>/rank{R}.json")
    p.add_argument("--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    args = p.parse_args(argv)
    rank, local = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=120),
                            device_id=device if cuda else None)
    try:
        scenarios = json.loads(args.scenarios.read_text())
        for name in args.setups.split(","):
            setup = SETUPS[name]
            results = []
            for i, scenario in enumerate(scenarios):
                try:
                    results.append(run_scenario(setup, scenario, device, rank))
                except Exception as exc:
                    print(f"rank {rank}: setup {name}, scenario {i} {scenario}: {type(exc).__name__}: {exc}",
                          file=sys.stderr, flush=True)
                    raise
            path = args.out / name / f"rank{rank}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"rank": rank, "world_size": dist.get_world_size(), "setup": name,
                                        "device": str(device), "results": results}))
            print(f"rank {rank}: {name}: {len(results)} scenarios done", flush=True)
    except BaseException:
        exit_failed_rank()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
