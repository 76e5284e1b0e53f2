"""The precision modes, as one table of data.

Everything that differs between modes lives in a ``PrecisionMode`` row; the training step
(``ampbench.train``) reads the row and never branches on a mode's name.

The table imports no torch: a report or a comparison, made where only the JSON is, takes the modes'
order and the fp32 side from it. Rows name their dtypes; torch resolves them on first use.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Iterable, Iterator

if TYPE_CHECKING:
    import torch

# Static loss scale of pure fp16 ("RTX Titan FP16 comparison" (2019) used 128; 64 and 256 trained the same there).
STATIC_LOSS_SCALE = 128.0


@dataclass(frozen=True)
class PrecisionMode:
    name: str  # key in MODES and in test ids
    param_dtype_name: str  # torch dtype (by name) of the model's parameters and float inputs
    peak_dtype: str  # which measured matmul peak (ampbench.device.PEAK_DTYPES) its TFLOP/s compare with
    autocast_dtype_name: str | None = None  # torch.autocast dtype (by name) around forward and loss; None: no autocast
    tf32: bool = False  # TF32 tensor cores for fp32 matmuls and cuDNN convolutions (set explicitly, both ways)
    loss_scaling: str = "none"  # key of ampbench.train.LOSS_SCALERS: "none", "dynamic" or "static"
    master_weights: bool = False  # the optimizer updates an fp32 master copy (Apex O2, fastai to_fp16)
    keep_norms_fp32: bool = False  # normalization layers stay fp32 inside a low-precision model
    needs: tuple[str, ...] = ()  # device capabilities (ampbench.device.CAPABILITIES) it cannot run without
    fp8_recipe: str | None = None  # torchao's Float8LinearConfig recipe ("tensorwise", "rowwise"); None: no fp8
    module_filter: str | None = None  # key of ampbench.fp8.MODULE_FILTERS: which Linear layers the recipe converts
    compile: bool = False  # torch.compile the model, after any fp8 conversion (fp8 casts are only fast fused)
    # whose accuracy test_convergence holds this mode's against, compiled as this mode is
    parity_mode: str = "fp32"
    # its speed cells run in the full tier only: fp32's own (a control of the harness) and TF32's, which
    # has no 16-bit arithmetic; the quick tier spends its time on the modes that do
    full_tier_only: bool = False

    @cached_property
    def param_dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.param_dtype_name)

    @cached_property
    def autocast_dtype(self) -> torch.dtype | None:
        import torch

        return None if self.autocast_dtype_name is None else getattr(torch, self.autocast_dtype_name)

    @contextlib.contextmanager
    def math_flags(self) -> Iterator[None]:
        """TF32 on or off for matmuls and cuDNN for the duration, restored afterwards.

        PyTorch's default turns TF32 on for cuDNN convolutions, so an fp32 run that does not set
        this is really half TF32; the fp32 side and the mode run interleaved, so the flags are
        set around every block rather than once per process.
        """
        import torch

        saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = self.tf32
        torch.backends.cudnn.allow_tf32 = self.tf32
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    def autocast(self, device: torch.device, cache_enabled: bool = True) -> contextlib.AbstractContextManager:
        """The mode's autocast region; `cache_enabled=False` while a CUDA graph is captured (autocast's
        cache of cast weights would outlive the capture that filled it)."""
        import torch

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype, cache_enabled=cache_enabled)


_F32, _F16, _BF16 = "float32", "float16", "bfloat16"

MODES: dict[str, PrecisionMode] = {
    m.name: m
    for m in (
        PrecisionMode(name="fp32", param_dtype_name=_F32, peak_dtype="fp32", full_tier_only=True),
        PrecisionMode(name="tf32", param_dtype_name=_F32, peak_dtype="tf32", tf32=True, needs=("tf32",),
                      full_tier_only=True),
        PrecisionMode(name="amp_fp16", param_dtype_name=_F32, peak_dtype="fp16", autocast_dtype_name=_F16,
                      loss_scaling="dynamic", needs=("fp16",)),
        PrecisionMode(name="amp_bf16", param_dtype_name=_F32, peak_dtype="bf16", autocast_dtype_name=_BF16,
                      needs=("bf16",)),
        PrecisionMode(name="fp16_master", param_dtype_name=_F16, peak_dtype="fp16", loss_scaling="dynamic",
                      master_weights=True, keep_norms_fp32=True, needs=("fp16",)),
        PrecisionMode(name="fp16", param_dtype_name=_F16, peak_dtype="fp16", loss_scaling="static", needs=("fp16",)),
        PrecisionMode(name="bf16", param_dtype_name=_BF16, peak_dtype="bf16", needs=("bf16",)),
        # fp8 matmuls in the converted Linear layers, bf16 autocast around them; the layers the filter
        # keeps and everything else run in bf16, so compiled amp_bf16 is what fp8 must beat
        PrecisionMode(name="fp8_tensorwise", param_dtype_name=_F32, peak_dtype="fp8", autocast_dtype_name=_BF16,
                      needs=("fp8", "torchao"), fp8_recipe="tensorwise", module_filter="inner_linears",
                      compile=True, parity_mode="amp_bf16"),
        PrecisionMode(name="fp8_rowwise", param_dtype_name=_F32, peak_dtype="fp8", autocast_dtype_name=_BF16,
                      needs=("fp8", "torchao"), fp8_recipe="rowwise", module_filter="inner_linears",
                      compile=True, parity_mode="amp_bf16"),
    )
}

FP32_MODE = "fp32"


def order_modes(modes: Iterable[str]) -> list[str]:
    """`modes` in the mode table's order; modes it lacks (a newer writer's) follow in the order met."""
    seen = list(dict.fromkeys(modes))
    return [m for m in MODES if m in seen] + [m for m in seen if m not in MODES]


def compiled(mode: PrecisionMode, compile: bool = True) -> PrecisionMode:
    """The same row with torch.compile on (or off): the mode as a compiled cell trains it."""
    return dataclasses.replace(mode, compile=compile)


def parity_mode_of(mode: PrecisionMode) -> PrecisionMode:
    """The mode whose accuracy `mode`'s is held against, compiled as `mode` is."""
    return compiled(get_mode(mode.parity_mode), mode.compile)


def versus_of(mode: PrecisionMode) -> PrecisionMode | None:
    """The side a compiled cell's second ratio times `mode` against; None for an eager cell, which has
    one ratio. A mode compiled where its row is eager is held against itself eager (the ratio is its
    compile gain); a row that always compiles (fp8) against its parity mode compiled (fp8's speedup
    over compiled amp_bf16, what fp8 adds where compile already paid)."""
    if not mode.compile:
        return None
    if MODES[mode.name].compile:
        return parity_mode_of(mode)
    return compiled(mode, False)


def shared_versus(precisions: Iterable[str]) -> set[PrecisionMode]:
    """The versus sides of the rows that compile among `precisions`: compiled amp_bf16, which both fp8
    modes are timed against, so that one side serves several cells."""
    return {side for p in precisions if MODES[p].compile if (side := versus_of(get_mode(p))) is not None}


def versus_figure(mode: PrecisionMode) -> str | None:
    """What the second ratio is called: 'compile gain over amp_bf16', 'speedup over amp_bf16 compiled'."""
    versus = versus_of(mode)
    if versus is None:
        return None
    return f"{'compile gain' if versus.name == mode.name else 'speedup'} over {label(versus)}"


def label(mode: PrecisionMode) -> str:
    """The mode's name, with "compiled" where it is compiled and its row is not: "amp_bf16 compiled"."""
    return f"{mode.name} compiled" if mode.compile and not MODES[mode.name].compile else mode.name


def get_mode(name: str) -> PrecisionMode:
    try:
        return MODES[name]
    except KeyError:
        raise KeyError(f"unknown precision mode {name!r}; valid modes: {', '.join(MODES)}") from None
