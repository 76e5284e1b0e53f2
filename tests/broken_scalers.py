"""Deliberately broken loss scalers, each with one bug of the kind a scaler implementation really gets
wrong. ``tests/test_scaler_teeth.py`` runs the loss-scaling property suite against each (as
``--loss-scaler tests.broken_scalers:NAME``) and requires the property in ``CAUGHT_BY`` to fail."""

from __future__ import annotations

from typing import Any

import torch

from ampbench.loss_scaler import LossScaler, OptState


class NoBackoff(torch.amp.GradScaler):
    """Never backs off: an overflowing step is skipped but the scale stays, so it overflows forever."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._backoff_factor = 1.0


class StepNotSkipped(torch.amp.GradScaler):
    """Steps the optimizer even when a gradient is inf/NaN (the scale still backs off)."""

    def _maybe_opt_step(self, optimizer, optimizer_state, *args: Any, **kwargs: Any):
        return optimizer.step(*args, **kwargs)


class NaNNotSeen(LossScaler):
    """Sees +-inf but not NaN: NaN gradients are zeroed before the check, as a careless nan_to_num would."""

    def _check_and_unscale(self, optimizer, inv_scale):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    torch.nan_to_num_(p.grad, nan=0.0, posinf=float("inf"), neginf=float("-inf"))
        return super()._check_and_unscale(optimizer, inv_scale)


class OffByOneGrowth(torch.amp.GradScaler):
    """Grows after growth_interval + 1 clean steps instead of growth_interval."""

    def update(self, new_scale=None) -> None:
        self._growth_interval += 1
        try:
            super().update(new_scale)
        finally:
            self._growth_interval -= 1


class GrowsToInf(LossScaler):
    """Grows without checking that the grown scale is finite, so at the fp32 cap it becomes inf."""

    def update(self, new_scale=None) -> None:
        if new_scale is not None:
            return super().update(new_scale)
        found = any(s["found_inf"].item() for s in self._per_optimizer.values() if s["found_inf"] is not None)
        if found:
            self._scale.mul_(self._backoff_factor).clamp_(min=self._min_scale)
            self._growth_tracker.zero_()
        else:
            self._growth_tracker += 1
            if int(self._growth_tracker) == self._growth_interval:
                self._scale.mul_(self._growth_factor)
                self._growth_tracker.zero_()
        self._per_optimizer.clear()


class ForgetsTrackerOnLoad(torch.amp.GradScaler):
    """load_state_dict restores the scale but restarts the growth tracker at 0."""

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict({**state_dict, "_growth_tracker": 0})


class SkipsEveryOptimizer(LossScaler):
    """One optimizer's overflow skips every optimizer stepped after it in the same iteration."""

    def step(self, optimizer, *args: Any, **kwargs: Any):
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            return super().step(optimizer, *args, **kwargs)
        state = self._per_optimizer[id(optimizer)]
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if any(s["found_inf"].item() for s in self._per_optimizer.values() if s["found_inf"] is not None):
            state["stage"] = OptState.STEPPED
            return None
        return super().step(optimizer, *args, **kwargs)


class MultipliesInsteadOfDivides(LossScaler):
    """"Unscales" by multiplying with the scale."""

    def _inv_scale(self) -> torch.Tensor:
        return self._scale.clone()


class AllowsUnscaleTwice(LossScaler):
    """A second unscale_ before step() silently divides the gradients again."""

    def unscale_(self, optimizer) -> None:
        state = self._per_optimizer[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            state["stage"] = OptState.READY
        super().unscale_(optimizer)


# which property of perf/test_loss_scaling.py must catch each
CAUGHT_BY: dict[str, str] = {
    "NoBackoff": "test_trajectory_matches_the_expected_one",
    "StepNotSkipped": "test_skipped_step_leaves_state_bit_identical",
    "NaNNotSeen": "test_overflow_detected_iff_nonfinite",
    "OffByOneGrowth": "test_trajectory_matches_the_expected_one",
    "GrowsToInf": "test_scale_stays_put_at_growth_cap",
    "ForgetsTrackerOnLoad": "test_state_dict_round_trip",
    "SkipsEveryOptimizer": "test_only_the_overflowing_optimizer_skips",
    "MultipliesInsteadOfDivides": "test_power_of_two_unscale_is_exact",
    "AllowsUnscaleTwice": "test_call_order_misuse_raises",
}
