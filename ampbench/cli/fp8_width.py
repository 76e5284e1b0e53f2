"""Where fp8 training starts to pay on this GPU: one decoder of the zoo at several widths, an fp8 mode
timed against compiled amp_bf16 (its versus side, as in the compiled speed cells) in device time, and
the width at which the ratio crosses 1.

fp8's matmuls gain in proportion to their FLOPs, its casts and scales cost in proportion to the
tensors' sizes, so it pays only where the Linear layers are wide enough. A widened model keeps its
depth, its tokens per step and its head width, and scales the rest with the width: the number of heads
(key/value heads in the same proportion) and the feed-forward width (the model's own ratio to its
width, rounded to a multiple of 16 so that torchao converts the layer). Both sides of a width are timed
the way a speed cell's are (``sides.prepare_side``, interleaved rounds, graph replay where it can be
captured), rounds added until the interval is tight.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

import torch

from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.device import (
    catch_oom,
    cell_unsupported_reason,
    configure_backends,
    device_name,
    release,
    resolve,
    unsupported_reason,
)
from ampbench.files.write import write_atomic
from ampbench.fp8 import FP8_ALIGNMENT
from ampbench.models import get_model
from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode, get_mode, label, versus_of
from ampbench.settings import DEFAULT_TOLERANCE
from ampbench.speed import sides
from ampbench.speed.clocks import device_clock
from ampbench.speed.timing import extend_until_tight
from ampbench.stats import SpeedupEstimate


class WidthError(ValueError):
    """A width the model cannot be built at, or a model without a width rule; the message says why."""


def _multiple(value: float, of: int) -> int:
    return max(of, int(round(value / of)) * of)


def _heads_for(width: int, head_dim: int, model: str) -> int:
    step = math.lcm(head_dim, FP8_ALIGNMENT)
    if width % step:
        raise WidthError(f"{model} width {width}: must be a multiple of {step} (its head width is {head_dim}, "
                         f"and torchao converts Linear layers whose sizes divide by {FP8_ALIGNMENT})")
    return width // head_dim


def _llama(config: Any, width: int) -> Any:
    heads = _heads_for(width, config.dim // config.n_heads, "llama")
    kv_heads = heads * config.n_kv_heads // config.n_heads
    if kv_heads < 1 or heads % kv_heads:
        raise WidthError(f"llama width {width}: {heads} query heads cannot share key/value heads in the ratio "
                         f"{config.n_heads}:{config.n_kv_heads}")
    return replace(config, dim=width, n_heads=heads, n_kv_heads=kv_heads,
                   ffn_dim=_multiple(width * config.ffn_dim / config.dim, FP8_ALIGNMENT))


def _gpt(config: Any, width: int) -> Any:
    return replace(config, n_embd=width, n_head=_heads_for(width, config.n_embd // config.n_head, "gpt"))


@dataclass(frozen=True)
class WidthRule:
    width_of: Callable[[Any], int]  # the model width of a config
    widen: Callable[[Any, int], Any]  # the config at another width (WidthError where it cannot be built)
    widths: tuple[int, ...]  # the widths swept unless told otherwise (the model's own among them)


# The default widths bracket where tensorwise fp8 crosses 1 on Hopper; gpt's stop below the width where
# its two compiled sides outgrow an 80 GB card (docs/design.md, "Where the constants come from").
WIDTH_RULES: dict[str, WidthRule] = {
    "llama": WidthRule(lambda c: c.dim, _llama, (1024, 1536, 2048, 3072, 4096)),
    "gpt": WidthRule(lambda c: c.n_embd, _gpt, (768, 1536, 2304)),
}


def width_rule(model: str) -> WidthRule:
    try:
        return WIDTH_RULES[model]
    except KeyError:
        raise WidthError(f"no width rule for model {model!r}; models with one: {', '.join(WIDTH_RULES)}") from None


def widened(spec: ModelSpec, width: int, smoke: bool) -> ModelSpec:
    """`spec` with the config it trains with (`smoke`'s or the full one) at `width`."""
    config = width_rule(spec.name).widen(spec.config_for(smoke), width)
    return replace(spec, smoke_config=config) if smoke else replace(spec, config=config)


@dataclass(frozen=True)
class WidthPoint:
    width: int
    estimate: SpeedupEstimate | None  # the mode's device-time speedup over its versus side; None where skipped
    method: str | None  # how device time was measured ("graph", "kernels", "wall")
    skipped: str | None = None  # why this width was not measured

    @property
    def outcome(self) -> str | None:
        """"pays" or "loses" where the whole interval lies above or below 1, else "even"; None if skipped."""
        if self.estimate is None:
            return None
        return "pays" if self.estimate.low > 1 else "loses" if self.estimate.high < 1 else "even"

    def as_dict(self) -> dict:
        est = self.estimate
        return {"width": self.width, "speedup": est.speedup if est else None, "low": est.low if est else None,
                "high": est.high if est else None, "rounds": est.rounds if est else None,
                "method": self.method, "skipped": self.skipped}


def measure_width(spec: ModelSpec, width: int, mode: PrecisionMode, versus: PrecisionMode, device: torch.device,
                  smoke: bool, policy: sides.SpeedPolicy) -> WidthPoint:
    """`mode` against `versus` for `spec` at `width`: both sides prepared, then interleaved device-time
    rounds until the interval's half-width is under the policy's target."""
    wide = widened(spec, width, smoke)
    config = wide.config_for(smoke)
    why = cell_unsupported_reason(mode, device, wide, config) or cell_unsupported_reason(versus, device, wide, config)
    if why:
        return WidthPoint(width, None, None, skipped=why)

    def timed() -> tuple[SpeedupEstimate, str | None]:
        base = sides.prepare_side(wide, versus, device, smoke, policy)
        side = sides.prepare_side(wide, mode, device, smoke, policy)
        clock = device_clock(base, side)
        return extend_until_tight(clock.timer(policy), policy.rounds), clock.method

    # both sides, their optimizer states and graph pools are on the card at once: a width that outgrows
    # the card ends that width, not the sweep
    measured, oom = catch_oom(timed)
    if mode.compile or versus.compile:
        import torch._dynamo

        torch._dynamo.reset()  # this width's graphs: nothing runs them again, and they count to the recompile limit
    release(device)
    if oom is not None:
        return WidthPoint(width, None, None, skipped=f"out of memory with both sides on the device ({oom})")
    assert measured is not None, "catch_oom returns what ran where nothing ran out of memory"
    return WidthPoint(width, *measured)


def sweep(spec: ModelSpec, widths: tuple[int, ...], mode: PrecisionMode, device: torch.device,
          smoke: bool) -> Iterator[WidthPoint]:
    """One point per width, as each is measured, `mode` against its versus side (``modes.versus_of``).
    WidthError, before anything is timed, for a width the model cannot be built at, then for a mode
    the device cannot run."""
    versus = versus_of(mode)
    if versus is None:
        raise WidthError(f"{label(mode)} has no side to be timed against: pick a mode whose row compiles (fp8)")
    for width in widths:
        widened(spec, width, smoke)  # raises for a width the model cannot take, before anything is timed
    missing = unsupported_reason(mode, device)
    if missing:
        raise WidthError(missing)
    policy = sides.policy_for(device, sides.DEFAULT_MIN_ROUNDS, DEFAULT_TOLERANCE)
    for width in widths:
        yield measure_width(spec, width, mode, versus, device, smoke, policy)


@dataclass(frozen=True)
class Crossover:
    below: WidthPoint  # the widest measured width whose whole interval lies under 1 (fp8 loses)
    above: WidthPoint  # the next measured width whose whole interval lies over 1 (fp8 pays)
    width: float  # where the speedup crosses 1, interpolated linearly in log width and log speedup

    def __str__(self) -> str:
        a, b = self.below, self.above
        assert a.estimate is not None and b.estimate is not None, "crossover() brackets with measured points"
        return (f"pays from width {b.width} ({b.estimate.speedup:.3f}x), loses at {a.width} "
                f"({a.estimate.speedup:.3f}x): crosses 1 near width {self.width:.0f}")


def crossover(points: list[WidthPoint]) -> Crossover | None:
    """Where the measured speedup goes from a loss to a gain with increasing width, both sides beyond
    their intervals; None where the points do not bracket it (all one side, or an interval on 1 between)."""
    measured = sorted((p for p in points if p.estimate is not None), key=lambda p: p.width)
    for a, b in zip(measured, measured[1:]):
        # an outcome is a measured point's: the estimates are set
        if a.outcome == "loses" and b.outcome == "pays" and a.estimate is not None and b.estimate is not None:
            la, lb = math.log(a.estimate.speedup), math.log(b.estimate.speedup)
            return Crossover(a, b, a.width * (b.width / a.width) ** (-la / (lb - la)))
    return None


def format_point(model: str, mode: PrecisionMode, point: WidthPoint) -> str:
    versus = versus_of(mode)
    assert versus is not None, "a swept mode has a side to be timed against (sweep)"
    head = f"{model} width {point.width:5d} {label(mode)} over {label(versus)}:"
    if point.estimate is None:
        return f"{head} skipped: {point.skipped}"
    return f"{head} {point.estimate} by {point.method}: {point.outcome}"


def command(args: argparse.Namespace) -> int:
    def bad_input(exc: Exception) -> int:
        print(f"ampbench fp8-width: error: {exc.args[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT

    try:
        spec, rule, mode = get_model(args.model), width_rule(args.model), get_mode(args.mode)
        device = resolve(args.device, flag="--device")
    except (KeyError, RuntimeError, WidthError) as exc:
        return bad_input(exc)
    configure_backends(device)
    points = []
    try:
        # the sweep's WidthErrors come before anything is timed: a width, then the device's needs
        for point in sweep(spec, args.widths or rule.widths, mode, device, smoke=device.type != "cuda"):
            print(format_point(args.model, mode, point), flush=True)
            points.append(point)
    except WidthError as exc:
        return bad_input(exc)
    found = crossover(points)
    print(f"{args.model} {args.mode}: {found or 'no measured width where it turns from a loss into a gain'}")
    if args.json is not None:
        write_atomic(args.json, {"model": args.model, "mode": args.mode, "device": device_name(device),
                                 "points": [p.as_dict() for p in points],
                                 "crossover_width": found.width if found else None})
    return EXIT_OK
