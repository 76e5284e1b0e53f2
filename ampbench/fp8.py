"""fp8 training through torchao's float8 (``torchao.float8.convert_to_float8_training``, the library
itself): which torchao pairs with the installed torch, which Linear layers a mode converts, and the
conversion.

torchao is optional (``pip install -e ".[fp8]"``). Nothing here imports it until a conversion or the
availability check asks, so the suite runs, and skips its fp8 cells with the reason, without it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from ampbench.models.spec import ModelSpec
from ampbench.modes import PrecisionMode

# torch._scaled_mm wants both dimensions of an fp8 operand divisible by 16
FP8_ALIGNMENT = 16

Version = tuple[int, int]


@dataclass(frozen=True)
class TorchaoPairing:
    torchao: Version  # a torchao release series (major, minor)
    torch_low: Version  # the oldest torch (major, minor) it runs with
    torch_high: Version | None  # the newest; None: any newer torch


# torchao's wheels are each built for one torch release; from 0.18 on, one wheel serves torch 2.11 and
# newer. A torchao newer than the last row is taken to keep that row's rule.
TORCHAO_FOR_TORCH: tuple[TorchaoPairing, ...] = (
    TorchaoPairing((0, 14), (2, 9), (2, 9)),
    TorchaoPairing((0, 15), (2, 9), (2, 9)),
    TorchaoPairing((0, 16), (2, 10), (2, 10)),
    TorchaoPairing((0, 17), (2, 11), (2, 11)),
    TorchaoPairing((0, 18), (2, 11), None),
)

INSTALL_HINT = 'pip install -e ".[fp8]"'


def parse_version(text: str) -> Version:
    """(major, minor) of a version string such as '2.14.1+cu130' or '0.18.0.dev20260101'."""
    match = re.match(r"(\d+)\.(\d+)", text)
    if match is None:
        raise ValueError(f"cannot read a version from {text!r}")
    return int(match.group(1)), int(match.group(2))


def _fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def pairing_for(torchao: Version) -> TorchaoPairing | None:
    """The row of `torchao`'s release series; the last row for a newer torchao; None for an older one."""
    for row in TORCHAO_FOR_TORCH:
        if row.torchao == torchao:
            return row
    newest = TORCHAO_FOR_TORCH[-1]
    return newest if torchao > newest.torchao else None


def _pairs(row: TorchaoPairing, torch_version: Version) -> bool:
    return row.torch_low <= torch_version and (row.torch_high is None or torch_version <= row.torch_high)


def torchao_range_for(torch_version: Version) -> str:
    """Which torchao releases run with this torch, in words: 'torchao 0.18 or newer', 'torchao 0.16'."""
    fits = [row for row in TORCHAO_FOR_TORCH if _pairs(row, torch_version)]
    if not fits:
        return f"a torchao release newer than {_fmt(TORCHAO_FOR_TORCH[-1].torchao)} (none known pairs with it)"
    low, high = fits[0], fits[-1]
    if high.torch_high is None:
        return f"torchao {_fmt(low.torchao)} or newer"
    if low is high:
        return f"torchao {_fmt(low.torchao)}"
    return f"torchao {_fmt(low.torchao)} to {_fmt(high.torchao)}"


def version_problem(torchao_version: str | None, torch_version: str) -> str | None:
    """Why this torchao cannot serve this torch, or None where they pair."""
    needs = f"torch {torch_version} needs {torchao_range_for(parse_version(torch_version))}"
    if torchao_version is None:
        return f"torchao is not installed ({INSTALL_HINT}); {needs}"
    row = pairing_for(parse_version(torchao_version))
    if row is None or not _pairs(row, parse_version(torch_version)):
        return f"torchao {torchao_version} installed, {needs}"
    return None


def installed_torchao() -> str | None:
    """The installed torchao's version, read from its metadata without importing it."""
    try:
        return importlib.metadata.version("torchao")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def torchao_problem() -> str | None:
    """Why fp8 training through torchao cannot run here (not installed, a version that does not pair
    with this torch, or torchao.float8 failing to import), or None. Imports torchao once."""
    version = installed_torchao()
    problem = version_problem(version, torch.__version__)
    if problem:
        return problem
    try:
        import torchao.float8  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any import failure means the same: no fp8 here
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"torchao {version} installed, but torchao.float8 does not import: {first}"
    return None


# -- which Linear layers a mode converts ------------------------------------------------------------

ModuleFilter = Callable[[nn.Module, str], bool]  # torchao's module_filter_fn(module, fully qualified name)


def output_head(model: nn.Module) -> str | None:
    """The name of the model's output head: its last Linear layer in registration order, as every
    model of the zoo registers its classifier or LM head last."""
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    return names[-1] if names else None


def _aligned(linear: nn.Linear) -> bool:
    return linear.in_features % FP8_ALIGNMENT == 0 and linear.out_features % FP8_ALIGNMENT == 0


def inner_linears(model: nn.Module) -> ModuleFilter:
    """Every Linear layer but the output head, where both its dimensions divide by 16. The head stays
    bf16, as torchtitan's fp8 recipes keep it: its logits feed the loss directly. Unlike torchao's
    ``_auto_filter_for_recipe``, small layers are converted too: where fp8 stops paying is what the
    speed cells measure, not something to filter away."""
    head = output_head(model)

    def keep(module: nn.Module, fqn: str) -> bool:
        return isinstance(module, nn.Linear) and fqn != head and _aligned(module)

    return keep


# PrecisionMode.module_filter -> a builder of torchao's module_filter_fn for one model
MODULE_FILTERS: dict[str, Callable[[nn.Module], ModuleFilter]] = {
    "inner_linears": inner_linears,
}


def _module_filter(mode: PrecisionMode) -> Callable[[nn.Module], ModuleFilter]:
    assert mode.module_filter is not None, f"{mode.name}: an fp8 row names its module_filter"
    return MODULE_FILTERS[mode.module_filter]


def converted_names(model: nn.Module, mode: PrecisionMode) -> list[str]:
    """The Linear layers `mode` converts to fp8 in `model` (none for a mode without fp8)."""
    if mode.fp8_recipe is None:
        return []
    keep = _module_filter(mode)(model)
    return [name for name, m in model.named_modules() if keep(m, name)]


def _why_none(model: nn.Module) -> str:
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    if not linears:
        return "it has no Linear layer"
    head = output_head(model)
    parts = [f"{head} is the output head, kept in bf16"]
    misaligned = [f"{name} ({m.in_features}x{m.out_features})" for name, m in linears.items()
                  if name != head and not _aligned(m)]
    if misaligned:
        parts.append(f"{', '.join(misaligned)} not divisible by {FP8_ALIGNMENT}")
    return "; ".join(parts)


class Unconvertible(ValueError):
    """A model in which an fp8 mode finds no Linear layer to convert."""


def unconvertible_reason(mode: PrecisionMode, spec: ModelSpec, config: Any) -> str | None:
    """Why `mode` has nothing to train in fp8 in `spec` at `config` (built on the meta device, so this
    costs no memory), or None where it converts at least one layer or is no fp8 mode."""
    if mode.fp8_recipe is None:
        return None
    with torch.device("meta"):
        model = spec.build(config)
    if converted_names(model, mode):
        return None
    return f"{mode.name} on {spec.name}: no Linear layer to train in fp8 ({_why_none(model)})"


def convert(model: nn.Module, mode: PrecisionMode) -> list[str]:
    """Swap the Linear layers `mode`'s filter keeps for torchao's Float8Linear under `mode`'s recipe, in
    place; returns their names. ``Unconvertible`` where the filter keeps none."""
    names = converted_names(model, mode)
    if not names:
        raise Unconvertible(f"{mode.name}: no Linear layer to train in fp8 ({_why_none(model)})")
    # looked up here at each call, so that ampbench.slowdown can swap the builder for chosen cells
    config = float8_config(mode)
    from torchao.float8 import convert_to_float8_training

    convert_to_float8_training(model, config=config, module_filter_fn=_module_filter(mode)(model))
    return names


def float8_config(mode: PrecisionMode) -> Any:
    """torchao's ``Float8LinearConfig`` of `mode`'s recipe."""
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig.from_recipe_name(mode.fp8_recipe)
