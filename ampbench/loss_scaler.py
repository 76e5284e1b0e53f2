"""ampbench's own loss scaler: ``torch.amp.GradScaler``'s interface, with what the fp16 modes need and
GradScaler lacks.

- A floor, ``min_scale``: GradScaler's scale halves on every overflowing step with no lower bound, so a
  run of overflows drives it to 0, the reciprocal to inf, and the unscaled gradients to NaN, while no
  overflow is reported. Here the scale never falls below ``min_scale`` (default 1.0, as Megatron and
  DeepSpeed use), so unscaling never makes a gradient larger.
- fp16 and bf16 gradients (pure ``.half()`` training); GradScaler refuses to unscale fp16 gradients.
- ``growth_factor == backoff_factor == 1.0``: a static scale that still skips overflowing steps.

Like GradScaler it never reads a value back to the host except where a skip must be decided for a
non-fused optimizer (``step``), or where asked (``get_scale``, ``state_dict``).
"""

from __future__ import annotations

import importlib
import math
import warnings
from collections import defaultdict
from enum import Enum
from typing import Any, Callable

import torch


class OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def _fresh_state() -> dict[str, Any]:
    return {"stage": OptState.READY, "found_inf": None}


class LossScaler:
    """Dynamic (or static) loss scaling for one or more optimizers, used exactly like GradScaler:
    ``scale(loss).backward()``, optionally ``unscale_(opt)``, ``step(opt)`` per optimizer, ``update()``."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
        min_scale: float = 1.0,
    ) -> None:
        where = torch.device(device)
        if enabled and where.type == "cuda" and not torch.cuda.is_available():
            warnings.warn("LossScaler is enabled, but CUDA is not available. Disabling.", stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._device = where
        if not (math.isfinite(min_scale) and min_scale > 0):
            raise ValueError(f"min_scale must be positive and finite, got {min_scale}")
        if not (math.isfinite(init_scale) and init_scale > 0):
            raise ValueError(f"init_scale must be positive and finite, got {init_scale}")
        if not (growth_factor >= 1.0 and math.isfinite(growth_factor)):
            raise ValueError(f"growth_factor must be finite and >= 1.0 (1.0: a static scale), got {growth_factor}")
        if not 0.0 < backoff_factor <= 1.0:
            raise ValueError(f"backoff_factor must lie in (0, 1] (1.0: a static scale), got {backoff_factor}")
        self._min_scale = float(min_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self.set_growth_interval(growth_interval)
        self._per_optimizer: dict[int, dict[str, Any]] = defaultdict(_fresh_state)
        if enabled:
            self._scale = torch.full((), max(float(init_scale), self._min_scale), dtype=torch.float32, device=where)
            self._growth_tracker = torch.zeros((), dtype=torch.int32, device=where)

    # -- the training loop ------------------------------------------------------------------------

    def scale(self, outputs: Any) -> Any:
        """``outputs`` (a tensor, or nested lists/tuples of them) multiplied by the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale.to(outputs.device, non_blocking=True)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or a list/tuple of Tensors")

    def _grads_by_device_dtype(self, optimizer: torch.optim.Optimizer) -> dict[tuple, list[torch.Tensor]]:
        groups: dict[tuple, list[torch.Tensor]] = defaultdict(list)
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    # duplicate indices are summed by coalesce(); that sum is what may overflow
                    p.grad = grad = grad.coalesce()
                    grad = grad._values()
                groups[(grad.device, grad.dtype)].append(grad)
        return groups

    def _check_and_unscale(self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor) -> torch.Tensor:
        """Multiply every gradient by ``inv_scale``; return a 0-d float32 tensor on the scaler's device,
        nonzero iff some gradient element was inf or NaN (before, or after unscaling)."""
        found_inf = torch.zeros((), dtype=torch.float32, device=self._device)
        one = torch.ones((), dtype=torch.float32, device=self._device)
        with torch.no_grad():
            for (device, _), grads in self._grads_by_device_dtype(optimizer).items():
                local_inf = torch.zeros((), dtype=torch.float32, device=device)
                torch._amp_foreach_non_finite_check_and_unscale_(grads, local_inf, inv_scale.to(device))
                if self._min_scale < 1.0:
                    # a scale below 1 enlarges gradients, which may overflow only now
                    torch._amp_foreach_non_finite_check_and_unscale_(grads, local_inf, one.to(device))
                found_inf += local_inf.to(self._device, non_blocking=True)
        return found_inf

    def _inv_scale(self) -> torch.Tensor:
        # the reciprocal in fp64 so that a power-of-two scale gives an exact power-of-two inverse
        return self._scale.double().reciprocal().float()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place and record whether any was inf/NaN."""
        if not self._enabled:
            return
        state = self._per_optimizer[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        state["found_inf"] = self._check_and_unscale(optimizer, self._inv_scale())
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done already) and step ``optimizer``, unless a gradient was inf/NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("closure use is not supported with LossScaler")
        state = self._per_optimizer[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            # fused kernels unscale and skip on the device themselves: no host sync. grad_scale and found_inf
            # are what such an optimizer reads, set as torch.amp.GradScaler sets them: Optimizer declares neither
            if state["stage"] is OptState.READY:
                state["found_inf"] = self._check_and_unscale(optimizer, torch.ones_like(self._scale))
                optimizer.grad_scale = self._scale  # type: ignore[attr-defined]
            else:
                optimizer.grad_scale = None  # type: ignore[attr-defined]
            optimizer.found_inf = state["found_inf"]  # type: ignore[attr-defined]
            try:
                retval = optimizer.step(*args, **kwargs)
            finally:
                del optimizer.grad_scale, optimizer.found_inf  # type: ignore[attr-defined]
        else:
            if state["stage"] is OptState.READY:
                self.unscale_(optimizer)
            retval = None if state["found_inf"].item() else optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return retval

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back off after any skipped step, grow after ``growth_interval`` clean ones, never below
        ``min_scale``; or set ``new_scale`` (clamped to ``min_scale``)."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, torch.Tensor):
                self._scale.copy_(new_scale.detach().reshape(()))
            else:
                self._scale.fill_(float(new_scale))
        else:
            if not any(s["stage"] is OptState.STEPPED for s in self._per_optimizer.values()):
                raise RuntimeError("update() called without a step() since the last update()")
            found = [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None]
            found_inf = torch.stack(found).sum()
            torch._amp_update_scale_(
                self._scale, self._growth_tracker, found_inf,
                self._growth_factor, self._backoff_factor, self._growth_interval,
            )
        self._scale.clamp_(min=self._min_scale)
        self._per_optimizer = defaultdict(_fresh_state)

    # -- GradScaler's accessors -------------------------------------------------------------------

    def get_scale(self) -> float:
        return float(self._scale.item()) if self._enabled else 1.0

    def _get_growth_tracker(self) -> int:
        return int(self._growth_tracker.item()) if self._enabled else 0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        if int(new_interval) < 1:
            raise ValueError(f"growth_interval must be >= 1, got {new_interval}")
        self._growth_interval = int(new_interval)
        if self._enabled and hasattr(self, "_growth_tracker"):
            # a shorter interval must not leave the tracker past its end, where it would never fire
            self._growth_tracker.clamp_(0, self._growth_interval - 1)

    def get_min_scale(self) -> float:
        return self._min_scale

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict[str, Any]:
        """Plain data: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker, min_scale;
        empty when disabled. Take it after ``update()``."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._get_growth_tracker(),
            "min_scale": self._min_scale,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict`` (of this class or of GradScaler) returned."""
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("the state dict is empty, possibly saved from a disabled scaler")
        self._min_scale = float(state_dict.get("min_scale", self._min_scale))
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._scale.fill_(max(float(state_dict["scale"]), self._min_scale))
        self._growth_tracker.fill_(int(state_dict["_growth_tracker"]))
        self.set_growth_interval(state_dict["growth_interval"])


def load_scaler_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``"MODULE:CALLABLE"`` (e.g. ``torch.amp:GradScaler``); ValueError naming
    what is wrong when the module cannot be imported, lacks the attribute, or it is not callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"loss scaler {spec!r}: expected MODULE:CALLABLE, e.g. torch.amp:GradScaler")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - a module that fails as it is imported is as unusable
        why = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"loss scaler {spec!r}: cannot import module {module_name!r}: {why}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"loss scaler {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"loss scaler {spec!r}: {attr!r} is a {type(obj).__name__}, not callable")
    return obj


# what the loss-scaling tests call on a scaler (perf/test_loss_scaling.py), GradScaler's interface
SCALER_METHODS = ("scale", "unscale_", "step", "update", "state_dict", "load_state_dict")
A_SCALER = ("a loss scaler is a callable that takes torch.amp.GradScaler's keyword arguments (device, init_scale, "
            "growth_factor, backoff_factor, growth_interval) and returns an object with GradScaler's methods "
            f"({', '.join(SCALER_METHODS)}), e.g. torch.amp:GradScaler or ampbench.loss_scaler:LossScaler")


def check_scaler_factory(spec: str, factory: Callable[..., Any], device: str) -> None:
    """ValueError where `factory` (what `spec` names) makes no loss scaler: called once on `device` with
    GradScaler's default arguments, as the loss-scaling tests call it, it must return an object with
    GradScaler's methods (``SCALER_METHODS``). A callable of another kind (a function of other
    arguments) fails here, naming `spec`, instead of as a TypeError in every test."""
    try:
        scaler = factory(device=device, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                         growth_interval=2000)
    except Exception as exc:  # noqa: BLE001 - whatever stops the call, the tests could not make a scaler
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise ValueError(f"loss scaler {spec!r}: calling it as the tests do failed ({type(exc).__name__}"
                         f"{': ' + first if first else ''}); {A_SCALER}") from None
    missing = [name for name in SCALER_METHODS if not callable(getattr(scaler, name, None))]
    if missing:
        raise ValueError(f"loss scaler {spec!r}: it returns a {type(scaler).__name__}, without "
                         f"{', '.join(missing)}; {A_SCALER}")
