"""Loss scaling, property-tested: the scaler's own state. Its scale and growth tracker against a reference
trajectory, the fp32 floor and cap, state_dict round trips, overflow detection and skipped steps, exact
unscaling, and call-order misuse. Each property runs against the scalers of ``perf/scalers.py`` (the
`case` parameter); ``perf/test_loss_scaling_training.py`` holds the properties of training with them.
Properties marked ``via_master`` also run the fp16_master step of ``ampbench.train.MasterWeights``:
fp16 model gradients are copied to fp32 masters, the scaler unscales and steps the masters, and the
result is rounded back into the fp16 model (the order of ``Trainer.step``).
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from ampbench.train import MasterWeights
from perf import strategies as S
from perf.scalers import (
    Case,
    accepted_grad_dtypes,
    bit_identical,
    drive,
    expected_trajectory,
    f32_mul,
    make_optimizer,
    min_scale_of,
    one_param_setup,
    parametrize_cases,
    scale_and_tracker,
    snapshot,
    violated_by_torch,
)
from perf.strategies import Injection, ScalerConfig


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc)


# -- trajectory, floor, cap, tracker, state_dict ----------------------------------------------------


@given(cfg=S.scaler_configs(), overflows=S.overflow_sequences())
@example(cfg=ScalerConfig(2.0**127, 2.0, 0.5, 1), overflows=[False] * 3).via(
    "growth at the fp32 cap must not reach inf")
@example(cfg=ScalerConfig(1.0, 2.0, 2.0**-100, 3), overflows=[True] * 3 + [False] * 3).via("backoff underflowing fp32")
def test_trajectory_matches_the_expected_one(case: Case, perf_device: torch.device,
                                      cfg: ScalerConfig, overflows: list[bool]) -> None:
    """For any sequence of clean and overflowing steps and any valid factors and growth interval, the
    scale and growth tracker after every update() equal expected_trajectory() exactly (fp32 arithmetic,
    the scaler's own floor if it has one); the scale is never inf or NaN."""
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    expected = expected_trajectory(case.adapt(cfg), overflows, min_scale_of(scaler))
    for i, overflow in enumerate(overflows):
        drive(scaler, opt, param, overflow)
        got = scale_and_tracker(scaler)
        assert got == expected[i], (f"after step {i} ({'overflow' if overflow else 'clean'}): {got} != reference "
                                    f"{expected[i]}")
        assert math.isfinite(got[0]), f"scale became {got[0]} after step {i}"


@given(init=st.sampled_from([2.0**127, S.F32_MAX, 1.5 * 2.0**126, 2.0**120]),
       growth=S.growth_factors(), steps=st.integers(1, 8))
def test_scale_stays_put_at_growth_cap(case: Case, perf_device: torch.device,
                                       init: float, growth: float, steps: int) -> None:
    """With growth interval 1 and only clean steps from a scale where scale * growth_factor overflows
    fp32, the scale stays exactly where it is (never inf) and the tracker restarts at 0."""
    cfg = case.adapt(ScalerConfig(init, growth, 0.5, 1))
    assume(case.static or not math.isfinite(f32_mul(init, growth)))
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    for i in range(steps):
        drive(scaler, opt, param, overflow=False)
        assert scale_and_tracker(scaler) == (float(np.float32(init)), 0), f"step {i}: {scale_and_tracker(scaler)}"


@violated_by_torch(
    "torch.amp.GradScaler has no floor: repeated backoff drives its fp32 scale to a subnormal or to 0, "
    "1/scale becomes inf, and the next clean step's unscaled gradients become inf/NaN (0 * inf) while "
    "found_inf stays 0, so the step is taken and the weights turn NaN with no overflow reported"
)
@given(cfg=S.scaler_configs(init=S.init_scales(1.0, 2.0**24)), overflows=S.overflow_sequences())
@example(cfg=ScalerConfig(1.0, 2.0, 2.0**-100, 1000), overflows=[True, True, False]).via(
    "GradScaler: scale 2**-200 rounds to 0 in fp32, then NaN weights with no overflow reported")
@example(cfg=ScalerConfig(1.0, 2.0, 2.0**-64, 1000), overflows=[True, True, False]).via(
    "GradScaler: scale 2**-128 is subnormal, 1/scale overflows to inf, gradients become inf unnoticed")
def test_scale_stays_positive_and_unscaling_stays_finite(case: Case, perf_device: torch.device,
                                                         cfg: ScalerConfig, overflows: list[bool]) -> None:
    """Under any sequence of clean and overflowing steps the scale stays positive and finite, and a
    clean step (finite gradients) never puts inf/NaN into the weights: unscaling never turns finite
    gradients into non-finite ones without reporting an overflow."""
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    for i, overflow in enumerate(overflows + [False]):
        drive(scaler, opt, param, overflow)
        scale, _ = scale_and_tracker(scaler)
        assert 0.0 < scale < math.inf, f"scale is {scale} after step {i}"
        assert torch.isfinite(param).all(), f"weights {param.tolist()} after step {i} at scale {scale}"


@given(cfg=S.scaler_configs(), overflows=S.overflow_sequences(), donor=S.overflow_sequences(12))
def test_growth_tracker_in_range_under_updates_and_load(
    case: Case, perf_device: torch.device, cfg: ScalerConfig, overflows: list[bool], donor: list[bool]
) -> None:
    """0 <= growth tracker < growth interval after every update(), and after load_state_dict() of a
    state taken from another scaler mid-training."""
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    other, other_opt, other_param = one_param_setup(case,
                                                    replace(cfg, growth_interval=cfg.growth_interval + 3), perf_device)
    for overflow in donor:
        drive(other, other_opt, other_param, overflow)
    for i, overflow in enumerate(overflows):
        drive(scaler, opt, param, overflow)
        if i == len(overflows) // 2:
            scaler.load_state_dict(other.state_dict())
        sd = scaler.state_dict()
        assert 0 <= sd["_growth_tracker"] < sd["growth_interval"], f"step {i}: {sd}"


@violated_by_torch(
    "torch.amp.GradScaler.set_growth_interval leaves the tracker where it was; when it is >= the new "
    "interval, _amp_update_scale_ (which grows on tracker == interval) never grows the scale again "
    "until an overflow resets the tracker"
)
@given(cfg=S.scaler_configs(interval=st.integers(2, 12)), clean=st.integers(1, 11), new_interval=st.integers(1, 12))
@example(cfg=ScalerConfig(1024.0, 2.0, 0.5, 10), clean=5, new_interval=2).via("GradScaler: tracker 5 >= interval 2")
# found by hypothesis: a scale at the fp32 cap cannot grow; the property now expects growth only below it
@example(cfg=ScalerConfig(2.0**112, 65536.0, 0.5, 2), clean=1, new_interval=1).via("no growth past the fp32 cap")
def test_growth_tracker_in_range_after_set_growth_interval(
    case: Case, perf_device: torch.device, cfg: ScalerConfig, clean: int, new_interval: int
) -> None:
    """After set_growth_interval(n) mid-training, 0 <= growth tracker < n, and within n more clean
    steps a dynamic scale grows (unless growing would overflow fp32)."""
    assume(clean < cfg.growth_interval)
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    for _ in range(clean):
        drive(scaler, opt, param, overflow=False)
    scaler.set_growth_interval(new_interval)
    scale, tracker = scale_and_tracker(scaler)
    assert 0 <= tracker < new_interval, f"tracker {tracker} with growth interval {new_interval}"
    for _ in range(new_interval):
        drive(scaler, opt, param, overflow=False)
    if not case.static and math.isfinite(f32_mul(scale, cfg.growth_factor)):
        assert scale_and_tracker(scaler)[0] > scale, f"no growth within {new_interval} clean steps"


@given(cfg=S.scaler_configs(), before=S.overflow_sequences(20), after=S.overflow_sequences(20))
def test_state_dict_round_trip(case: Case, perf_device: torch.device, cfg: ScalerConfig,
                               before: list[bool], after: list[bool]) -> None:
    """A fresh scaler (other initial arguments) that loads a state_dict() taken mid-training follows the
    identical (scale, tracker) trajectory afterwards; the state dict itself is not changed by loading."""
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    for overflow in before:
        drive(scaler, opt, param, overflow)
    sd = scaler.state_dict()
    saved = copy.deepcopy(sd)
    fresh, fresh_opt, fresh_param = one_param_setup(case, ScalerConfig(3.0, 8.0, 0.125, 77), perf_device)
    fresh.load_state_dict(sd)
    assert sd == saved
    for i, overflow in enumerate(after):
        drive(scaler, opt, param, overflow)
        drive(fresh, fresh_opt, fresh_param, overflow)
        assert scale_and_tracker(fresh) == scale_and_tracker(scaler), f"step {i} after the round trip"


# -- detection and skipping -------------------------------------------------------------------------


def _layout_params(layout: list[tuple], device: torch.device, gen: torch.Generator) -> list[torch.nn.Parameter]:
    return [
        torch.nn.Parameter(torch.randn(shape, generator=gen, device=device).to(dtype)) for shape, dtype, _ in layout
    ]


@given(data=st.data(), inj=S.injections(), seed=S.seeds(), k=st.integers(1, 10))
def test_overflow_detected_iff_nonfinite(case: Case, perf_device: torch.device, data,
                                         inj: Injection | None, seed: int, k: int) -> None:
    """An overflow is reported (the step is skipped and the scale backs off) if and only if some
    gradient element is +inf, -inf or NaN, at any position of any parameter of any dtype the scaler
    accepts; parameters without gradients are ignored."""
    layout = data.draw(S.param_layouts(accepted_grad_dtypes(case, perf_device)), label="layout")
    gen = torch.Generator(device=perf_device).manual_seed(seed)
    params = _layout_params(layout, perf_device, gen)
    scaler = case.make(perf_device, ScalerConfig(2.0**k, 2.0, 0.5, 1000))
    opt = torch.optim.SGD(params, lr=1.0)
    with_grad = [p for p, (_, _, has) in zip(params, layout) if has]
    for p in with_grad:
        # gradients in (0.5, 1.5): nonzero in every dtype, so a step that is taken changes every weight
        g = 1.0 + (torch.rand(p.shape, generator=gen, device=perf_device) - 0.5)
        p.grad = scaler.scale(g).to(p.dtype)
    if inj is not None:
        target = with_grad[inj.param % len(with_grad)]
        target.grad.view(-1)[inj.element % target.numel()] = inj.value
    before = [p.detach().clone() for p in with_grad]
    scale0 = scale_and_tracker(scaler)[0]
    scaler.step(opt)
    scaler.update()
    skipped = all(bit_identical(b, p.detach()) for b, p in zip(before, with_grad))
    changed = all(not torch.equal(b, p.detach()) for b, p in zip(before, with_grad))
    backed_off = scale_and_tracker(scaler)[0] < scale0 or (case.static and inj is not None)
    if inj is None:
        assert changed and not backed_off, (f"clean gradients: step taken {changed}, scale {scale0} -> "
                                            f"{scale_and_tracker(scaler)[0]}")
    else:
        assert skipped and backed_off, (f"{inj} missed: step skipped {skipped}, scale {scale0} -> "
                                        f"{scale_and_tracker(scaler)[0]}")


@given(spec=S.optimizer_specs(), seed=S.seeds(), inj=S.injections().filter(lambda i: i is not None),
       via_master=st.booleans(), k=st.integers(0, 12))
def test_skipped_step_leaves_state_bit_identical(
    case: Case, perf_device: torch.device, spec: tuple[str, str], seed: int, inj: Injection, via_master: bool, k: int
) -> None:
    """After a clean step (so the optimizer has state), a step whose gradients hold a non-finite value
    leaves every parameter and every optimizer state tensor (momentum, exp_avg, exp_avg_sq, step)
    bit-identical: SGD with momentum, Adam, AdamW; for-loop, foreach and fused. via_master: the same
    for the fp16 model and its fp32 masters of the fp16_master step."""
    name, impl = spec
    gen = torch.Generator(device=perf_device).manual_seed(seed)
    dtype = torch.float16 if via_master else torch.float32
    model = [torch.nn.Parameter(torch.randn(s, generator=gen, device=perf_device).to(dtype)) for s in ((3, 5), (5,))]
    master = MasterWeights(model) if via_master else None
    params = master.master_params if master else model
    try:
        opt = make_optimizer(name, impl, params)
    except (RuntimeError, ValueError):
        assume(False)  # a build or device without this fused kernel: nothing to test
        return
    scaler = case.make(perf_device, ScalerConfig(2.0**k, 2.0, 0.5, 1000))

    def step(poison: Injection | None) -> None:
        for p in model:
            p.grad = scaler.scale(torch.randn(p.shape, generator=gen, device=perf_device)).to(dtype)
        if poison is not None:
            g = model[poison.param % 2].grad
            g.view(-1)[poison.element % g.numel()] = poison.value
        if master:
            master.grads_to_master()
        scaler.step(opt)
        scaler.update()
        if master:
            master.master_to_model()

    step(None)
    before = snapshot(model + (master.master_params if master else []), opt)
    step(inj)
    after = snapshot(model + (master.master_params if master else []), opt)
    assert len(before) == len(after)
    for i, (b, a) in enumerate(zip(before, after)):
        assert bit_identical(b, a), f"tensor {i} of params/optimizer state changed by a skipped {name}/{impl} step"


@given(inj_a=st.booleans(), inj_b=st.booleans(), seed=S.seeds(), impl=st.sampled_from(["forloop", "foreach", "fused"]))
def test_only_the_overflowing_optimizer_skips(case: Case, perf_device: torch.device, inj_a: bool,
                                              inj_b: bool, seed: int, impl: str) -> None:
    """With two optimizers and one scaler, an optimizer steps if and only if its own gradients are
    finite; the scale backs off once (by backoff_factor) if either overflowed, and is unchanged otherwise
    (growth interval not reached)."""
    gen = torch.Generator(device=perf_device).manual_seed(seed)
    a = torch.nn.Parameter(torch.randn(6, generator=gen, device=perf_device))
    b = torch.nn.Parameter(torch.randn(6, generator=gen, device=perf_device))
    opt_a, opt_b = make_optimizer("adam", impl, [a]), make_optimizer("sgd", impl, [b])
    scaler = case.make(perf_device, ScalerConfig(1024.0, 2.0, 0.5, 1000))
    for p, poison in ((a, inj_a), (b, inj_b)):
        p.grad = scaler.scale(torch.rand(6, generator=gen, device=perf_device) + 0.5)
        if poison:
            p.grad[3] = math.nan
    a0, b0 = a.detach().clone(), b.detach().clone()
    scaler.step(opt_a)
    scaler.step(opt_b)
    scaler.update()
    assert torch.equal(a0, a.detach()) == inj_a, "optimizer a stepped wrongly"
    assert torch.equal(b0, b.detach()) == inj_b, "optimizer b stepped wrongly"
    expected = 1024.0 * (case.adapt(ScalerConfig(1, 2.0, 0.5, 1)).backoff_factor if (inj_a or inj_b) else 1.0)
    assert scale_and_tracker(scaler)[0] == expected


@given(g=S.fp32_normals(-100, 100), k=st.integers(-20, 100), n=st.integers(1, 16))
def test_power_of_two_unscale_is_exact(case: Case, perf_device: torch.device, g: float, k: int, n: int) -> None:
    """For an fp32 gradient g*2**k (g normal, g*2**k normal, no overflow) and scale 2**k, unscale_
    returns exactly g: multiplication by the exact reciprocal of a power of two is exact."""
    assume(abs(g) * 2.0**k < S.F32_MAX / 8 and abs(g) * 2.0**k >= 2.0**-126)
    scaler = case.make(perf_device, ScalerConfig(2.0**k, 2.0, 0.5, 1000))
    assume(scale_and_tracker(scaler)[0] == 2.0**k)  # a floor may have raised it
    p = torch.nn.Parameter(torch.zeros(n, device=perf_device))
    values = torch.full((n,), g, device=perf_device) * torch.linspace(1, 2, n, device=perf_device).exp2().floor()
    p.grad = scaler.scale(values)
    scaler.unscale_(torch.optim.SGD([p], lr=1.0))
    assert bit_identical(p.grad, values), f"{p.grad.tolist()} != {values.tolist()}"


# -- call-order misuse ------------------------------------------------------------------------------


MISUSES = {
    "unscale_ twice": lambda s, o: (s.unscale_(o), s.unscale_(o)),
    "step twice": lambda s, o: (s.step(o), s.step(o)),
    "unscale_ after step": lambda s, o: (s.step(o), s.unscale_(o)),
    "update without step": lambda s, o: s.update(),
}


@pytest.mark.parametrize("misuse", list(MISUSES))
def test_call_order_misuse_raises(case: Case, perf_device: torch.device, misuse: str) -> None:
    """unscale_ twice, step twice, unscale_ after step (between two update()s) and update() without a
    step each raise, and a correct sequence afterwards (after update) still works."""
    scaler = case.make(perf_device, ScalerConfig(8.0, 2.0, 0.5, 10))
    p = torch.nn.Parameter(torch.zeros(3, device=perf_device))
    opt = torch.optim.SGD([p], lr=1.0)
    p.grad = scaler.scale(torch.ones(3, device=perf_device))
    with pytest.raises((RuntimeError, AssertionError)):
        MISUSES[misuse](scaler, opt)
