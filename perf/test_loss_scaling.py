"""Loss scaling, property-tested.

Every property runs against three scalers (the `case` parameter):
- ``tested``: the one named by ``--loss-scaler MODULE:CALLABLE`` (default ``torch.amp:GradScaler``);
- ``own-dynamic``: ampbench's ``LossScaler`` as the ``amp_fp16``/``fp16_master`` modes could use it;
- ``own-static``: ``LossScaler`` with growth and backoff factors 1.0, the static scale of the ``fp16`` mode.
Properties that today's ``torch.amp.GradScaler`` violates are strict xfails for it (so an upstream fix
shows up as an XPASS failure) and must pass for ``LossScaler``.
Properties marked ``via_master`` also run the fp16_master step of ``ampbench.train.MasterWeights``:
fp16 model gradients are copied to fp32 masters, the scaler unscales and steps the masters, and the
result is rounded back into the fp16 model (the order of ``Trainer.step``).
"""

from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from ampbench.scaling import LossScaler, load_scaler_factory
from ampbench.train import MasterWeights
from perf import strategies as S
from perf.strategies import Injection, ScalerConfig

# -- the scalers under test -----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    factory: Callable[..., Any]
    static: bool  # growth and backoff factors forced to 1.0

    def adapt(self, cfg: ScalerConfig) -> ScalerConfig:
        return replace(cfg, growth_factor=1.0, backoff_factor=1.0) if self.static else cfg

    def make(self, device: torch.device, cfg: ScalerConfig) -> Any:
        return self.factory(device=device.type, **self.adapt(cfg).kwargs())


def _is_torch_gradscaler(factory: Callable[..., Any]) -> bool:
    return factory is torch.amp.GradScaler


def violated_by_torch(reason: str) -> Callable:
    """Marks a property today's torch.amp.GradScaler violates: strict xfail for it, a pass for LossScaler."""

    def mark(fn: Callable) -> Callable:
        fn._violated_by_torch = reason
        return fn

    return mark


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" not in metafunc.fixturenames:
        return
    spec = metafunc.config.getoption("perf_loss_scaler")
    try:
        factory = load_scaler_factory(spec)
    except ValueError as exc:
        raise pytest.UsageError(f"--loss-scaler: {exc}") from None
    reason = getattr(metafunc.function, "_violated_by_torch", None)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason and _is_torch_gradscaler(factory) else []
    cases = [
        pytest.param(Case("tested", factory, False), marks=marks, id="tested"),
        pytest.param(Case("own-dynamic", LossScaler, False), id="own-dynamic"),
        pytest.param(Case("own-static", LossScaler, True), id="own-static"),
    ]
    metafunc.parametrize("case", cases)


# -- helpers --------------------------------------------------------------------------------------

GRAD = 2.0**-4  # the unscaled gradient of the driving steps: scaled by any fp32 scale it stays finite


def reference_trajectory(cfg: ScalerConfig, overflows: list[bool], min_scale: float = 0.0) -> list[tuple[float, int]]:
    """(scale, growth tracker) after each update() of a dynamic loss scaler with fp32 arithmetic:
    overflow -> scale * backoff, tracker 0; clean -> tracker + 1, and when it reaches the interval the
    scale grows by growth_factor if the product is finite (else stays put) and the tracker restarts at 0;
    the scale never goes below min_scale (0: no floor)."""
    f32 = np.float32
    scale = max(f32(cfg.init_scale), f32(min_scale))
    tracker, out = 0, []
    with np.errstate(over="ignore", under="ignore"):
        for overflow in overflows:
            if overflow:
                scale, tracker = f32(scale * f32(cfg.backoff_factor)), 0
            else:
                tracker += 1
                if tracker == cfg.growth_interval:
                    grown = f32(scale * f32(cfg.growth_factor))
                    scale = grown if np.isfinite(grown) else scale
                    tracker = 0
            scale = max(scale, f32(min_scale))
            out.append((float(scale), tracker))
    return out


def f32_mul(a: float, b: float) -> float:
    """a * b rounded to fp32 (inf when it overflows), as a scaler's fp32 scale tensor computes it."""
    with np.errstate(over="ignore", under="ignore"):
        return float(np.float32(a) * np.float32(b))


def min_scale_of(scaler: Any) -> float:
    get = getattr(scaler, "get_min_scale", None)
    return float(get()) if get else 0.0


def scale_and_tracker(scaler: Any) -> tuple[float, int]:
    sd = scaler.state_dict()
    return float(sd["scale"]), int(sd["_growth_tracker"])


def drive(scaler: Any, opt: torch.optim.Optimizer, param: torch.Tensor, overflow: bool) -> None:
    """One step whose (scaled) gradient is GRAD everywhere, or +inf in one element."""
    opt.zero_grad(set_to_none=True)
    grad = scaler.scale(torch.full_like(param, GRAD))
    if overflow:
        grad[0] = math.inf
    param.grad = grad
    scaler.step(opt)
    scaler.update()


def one_param_setup(case: Case, cfg: ScalerConfig, device: torch.device):
    param = torch.nn.Parameter(torch.zeros(4, device=device))
    return case.make(device, cfg), torch.optim.SGD([param], lr=1e-3), param


def make_optimizer(name: str, impl: str, params: list, lr: float = 1e-2) -> torch.optim.Optimizer:
    kw = {"forloop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}[impl]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=1e-2, **kw)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, **kw)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.1, **kw)


def bit_identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (so NaN == NaN and -0.0 != 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def snapshot(params: list[torch.Tensor], opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    out = [p.detach().clone() for p in params]
    for state in opt.state.values():
        out += [v.detach().clone() for _, v in sorted(state.items()) if isinstance(v, torch.Tensor)]
    return out


_accepted: dict[tuple, tuple[torch.dtype, ...]] = {}


def accepted_grad_dtypes(case: Case, device: torch.device) -> tuple[torch.dtype, ...]:
    """The gradient dtypes the scaler unscales (GradScaler refuses fp16), probed once per scaler."""
    key = (case.name, case.factory, device)
    if key not in _accepted:
        ok = []
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            scaler = case.make(device, ScalerConfig(2.0, 2.0, 0.5, 10))
            p = torch.nn.Parameter(torch.zeros(2, device=device, dtype=dtype))
            p.grad = scaler.scale(torch.ones_like(p))
            try:
                scaler.unscale_(torch.optim.SGD([p], lr=1.0))
                ok.append(dtype)
            except (ValueError, RuntimeError):
                pass
        _accepted[key] = tuple(ok)
    return _accepted[key]


# -- trajectory, floor, cap, tracker, state_dict ----------------------------------------------------


@given(cfg=S.scaler_configs(), overflows=S.overflow_sequences())
@example(cfg=ScalerConfig(2.0**127, 2.0, 0.5, 1), overflows=[False] * 3).via("growth at the fp32 cap must not reach inf")
@example(cfg=ScalerConfig(1.0, 2.0, 2.0**-100, 3), overflows=[True] * 3 + [False] * 3).via("backoff underflowing fp32")
def test_trajectory_matches_reference(case: Case, perf_device: torch.device, cfg: ScalerConfig, overflows: list[bool]) -> None:
    """For any sequence of clean and overflowing steps and any valid factors and growth interval, the
    scale and growth tracker after every update() equal reference_trajectory() exactly (fp32 arithmetic,
    the scaler's own floor if it has one); the scale is never inf or NaN."""
    scaler, opt, param = one_param_setup(case, cfg, perf_device)
    expected = reference_trajectory(case.adapt(cfg), overflows, min_scale_of(scaler))
    for i, overflow in enumerate(overflows):
        drive(scaler, opt, param, overflow)
        got = scale_and_tracker(scaler)
        assert got == expected[i], f"after step {i} ({'overflow' if overflow else 'clean'}): {got} != reference {expected[i]}"
        assert math.isfinite(got[0]), f"scale became {got[0]} after step {i}"


@given(init=st.sampled_from([2.0**127, S.F32_MAX, 1.5 * 2.0**126, 2.0**120]), growth=S.growth_factors(), steps=st.integers(1, 8))
def test_scale_stays_put_at_growth_cap(case: Case, perf_device: torch.device, init: float, growth: float, steps: int) -> None:
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
def test_scale_stays_positive_and_unscaling_stays_finite(case: Case, perf_device: torch.device, cfg: ScalerConfig, overflows: list[bool]) -> None:
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
    other, other_opt, other_param = one_param_setup(case, replace(cfg, growth_interval=cfg.growth_interval + 3), perf_device)
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
def test_state_dict_round_trip(case: Case, perf_device: torch.device, cfg: ScalerConfig, before: list[bool], after: list[bool]) -> None:
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
def test_overflow_detected_iff_nonfinite(case: Case, perf_device: torch.device, data, inj: Injection | None, seed: int, k: int) -> None:
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
        assert changed and not backed_off, f"clean gradients: step taken {changed}, scale {scale0} -> {scale_and_tracker(scaler)[0]}"
    else:
        assert skipped and backed_off, f"{inj} missed: step skipped {skipped}, scale {scale0} -> {scale_and_tracker(scaler)[0]}"


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
def test_only_the_overflowing_optimizer_skips(case: Case, perf_device: torch.device, inj_a: bool, inj_b: bool, seed: int, impl: str) -> None:
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


# -- equivalence with unscaled fp32 training --------------------------------------------------------


def _tiny_regression(seed: int, device: torch.device, batch: int = 8):
    gen = torch.Generator(device=device).manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    x = torch.randn(batch, 5, generator=gen, device=device)
    y = torch.randn(batch, 3, generator=gen, device=device)
    return model, x, y


def _train(model, x, y, opt_name: str, steps: int, scaler: Any | None, micro: int = 1, clip: float | None = None) -> list[torch.Tensor]:
    opt = make_optimizer(opt_name, "foreach", list(model.parameters()), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        for xs, ys in zip(x.chunk(micro), y.chunk(micro)):
            loss = torch.nn.functional.mse_loss(model(xs), ys) / micro
            (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
    return [p.detach().clone() for p in model.parameters()]


@given(cfg=S.pow2_scaler_configs(0, 24) | S.scaler_configs(init=S.init_scales(1.0, 2.0**24), backoff=st.just(0.5)),
       seed=S.seeds(), opt_name=st.sampled_from(["sgd", "adam", "adamw"]), steps=st.integers(1, 5),
       clip=st.none() | st.floats(1e-3, 10.0))
def test_clean_training_equals_fp32(
    case: Case, perf_device: torch.device, cfg: ScalerConfig, seed: int, opt_name: str, steps: int, clip: float | None
) -> None:
    """Without overflow, fp32 training with the scaler (scale, backward, unscale_, optional gradient
    clipping, step, update) equals the same training without it: bit-identical weights when every scale
    is a power of two (scaling commutes with every rounding), else within rtol 1e-4 + atol 1e-6 after at
    most 5 steps. Clipping after unscale_ is clipping of the unscaled gradients."""
    cfg = case.adapt(cfg)
    model, x, y = _tiny_regression(seed, perf_device)
    reference = _train(copy.deepcopy(model), x, y, opt_name, steps, None, clip=clip)
    scaler = case.make(perf_device, cfg)
    scaled = _train(model, x, y, opt_name, steps, scaler, clip=clip)
    pow2 = all(math.frexp(f)[0] == 0.5 for f in (cfg.init_scale, cfg.growth_factor))
    for r, s in zip(reference, scaled):
        if pow2:
            assert bit_identical(r, s), f"max diff {(r - s).abs().max().item()} at power-of-two scales"
        else:
            torch.testing.assert_close(s, r, rtol=1e-4, atol=1e-6)


@given(cfg=S.pow2_scaler_configs(0, 24), seed=S.seeds(), micro=st.sampled_from([2, 4, 8]), opt_name=st.sampled_from(["sgd", "adamw"]))
def test_accumulation_equals_large_batch(case: Case, perf_device: torch.device, cfg: ScalerConfig, seed: int, micro: int, opt_name: str) -> None:
    """Accumulating scaled gradients over `micro` micro-batches (each loss divided by `micro`) gives
    bit-identically the weights of the same unscaled accumulation (power-of-two scales), and the weights
    of one large batch within rtol 1e-5 + atol 1e-6 (the summation order differs)."""
    cfg = case.adapt(cfg)
    model, x, y = _tiny_regression(seed, perf_device, batch=8)
    unscaled = _train(copy.deepcopy(model), x, y, opt_name, 3, None, micro=micro)
    large = _train(copy.deepcopy(model), x, y, opt_name, 3, None, micro=1)
    scaled = _train(model, x, y, opt_name, 3, case.make(perf_device, cfg), micro=micro)
    for u, big, s in zip(unscaled, large, scaled):
        assert bit_identical(u, s), f"max diff {(u - s).abs().max().item()} against unscaled accumulation"
        torch.testing.assert_close(s, big, rtol=1e-5, atol=1e-6)


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


# -- fp16 numerics (Micikevicius et al., "Mixed Precision Training", 2018) --------------------------


@given(g=S.fp16_vanishing_gradients(), extra=st.integers(0, 30))
def test_fp16_vanishing_gradient_recovered_by_scale(case: Case, perf_device: torch.device, g: float, extra: int) -> None:
    """A gradient with |g| <= 2**-25 rounds to 0 in fp16. Scaled by 2**k with |g|*2**k >= 2**-24 (and
    below 65504) it is a nonzero fp16 of g's sign, and the fp16_master path (fp16 grad -> fp32 master ->
    unscale_) recovers g within fp16's rounding: |r - g| <= max(2**-25, |g|*2**k * 2**-11) / 2**k."""
    if case.static:
        return  # the static scale is a fixed 128; the property is about choosing k
    k = math.ceil(-24 - math.log2(abs(g))) + extra
    assume(abs(g) * 2.0**k < 65504)
    half = torch.tensor(g, device=perf_device).half()
    assert half.item() == 0.0
    model = [torch.nn.Parameter(torch.zeros(1, device=perf_device, dtype=torch.float16))]
    master = MasterWeights(model)
    scaler = case.make(perf_device, ScalerConfig(2.0**k, 2.0, 0.5, 1000))
    model[0].grad = scaler.scale(torch.full((1,), g, device=perf_device)).half()
    assert model[0].grad.item() != 0 and math.copysign(1, model[0].grad.item()) == math.copysign(1, g)
    master.grads_to_master()
    scaler.unscale_(torch.optim.SGD(master.master_params, lr=1.0))
    r = master.master_params[0].grad.item()
    assert abs(r - g) <= max(2.0**-25, abs(g) * 2.0**k * 2.0**-11) / 2.0**k, f"recovered {r} for {g} at 2**{k}"


@given(g=S.fp32_finite(), k=st.integers(1, 20))
@example(g=32759.998046875, k=1).via("g*s = 65519.99609375, the largest fp32 below 65520, rounds down to 65504")
@example(g=32760.0, k=1).via("g*s = 65520 is the tie between 65504 and 65536 (inf): ties-to-even gives inf")
def test_fp16_overflow_exactly_above_65504(case: Case, perf_device: torch.device, g: float, k: int) -> None:
    """A scaled fp32 gradient g*s cast to fp16 is inf exactly when |g*s| >= 65520 (rounds above 65504,
    fp16's largest finite); the fp16_master step reports the overflow (skips, scale backs off) exactly then."""
    scaler = case.make(perf_device, ScalerConfig(2.0**k, 2.0, 0.5, 1000))
    s = scale_and_tracker(scaler)[0]
    gs = f32_mul(g, s)
    model = [torch.nn.Parameter(torch.zeros(1, device=perf_device, dtype=torch.float16))]
    master = MasterWeights(model)
    model[0].grad = scaler.scale(torch.full((1,), g, device=perf_device)).half()
    assert math.isinf(model[0].grad.item()) == (abs(gs) >= 65520.0), f"fp16({gs}) = {model[0].grad.item()}"
    master.grads_to_master()
    scaler.step(torch.optim.SGD(master.master_params, lr=1.0))
    scaler.update()
    if not case.static:  # a static scale never moves, so only a dynamic one shows what it detected
        assert (scale_and_tracker(scaler)[0] < s) == (abs(gs) >= 65520.0), "overflow reported wrongly"
    assert torch.isfinite(model[0]).all()


@given(w=S.fp16_weights(), ratio=S.update_ratios(), sign=st.sampled_from([1.0, -1.0]))
def test_fp16_small_updates_lost_but_kept_by_master_weights(case: Case, perf_device: torch.device, w: float, ratio: float, sign: float) -> None:
    """An update u with |u| < 2**-12 |w| (under half an fp16 ulp of w; the paper's "2**-11 ratio" in
    ulp terms) is lost on an fp16 weight: w + u rounds to w, on every step. With fp32 master weights
    (the fp16_master step) each update is kept in the master (|u| >= 2**-22 |w|), and after
    n = ceil(ulp16(w) / |u|) + 1 steps the fp16 model weight has moved."""
    u = float(torch.tensor(sign * ratio * abs(w)).half())
    assume(u != 0.0 and abs(u) < 2.0**-12 * abs(w) and abs(u) >= 2.0**-22 * abs(w))
    n = math.ceil(2.0 ** (math.frexp(abs(w))[1] - 11) / abs(u)) + 1
    assume(n <= 100)
    scaler = case.make(perf_device, ScalerConfig(1.0, 2.0, 0.5, 10**6))
    pure = torch.nn.Parameter(torch.full((1,), w, device=perf_device, dtype=torch.float16))
    model = [torch.nn.Parameter(torch.full((1,), w, device=perf_device, dtype=torch.float16))]
    master = MasterWeights(model)
    opt = torch.optim.SGD(master.master_params, lr=1.0)
    grad = torch.full((1,), -u, device=perf_device, dtype=torch.float16)  # SGD subtracts: w - (-u) = w + u
    assert (pure.detach() - grad).item() == w, "fp16 kept an update below half an ulp"
    prev = master.master_params[0].item()
    for i in range(n):
        model[0].grad = scaler.scale(grad.float()).half()
        master.grads_to_master()
        scaler.step(opt)
        scaler.update()
        master.master_to_model()
        assert master.master_params[0].item() != prev, f"the fp32 master lost update {i}"
        prev = master.master_params[0].item()
    assert model[0].item() != w, f"{n} updates of {u} never reached the fp16 weight {w}"


# -- the project's own training steps -----------------------------------------------------------------


def test_pure_fp16_trainer_uses_static_scaler_that_skips(perf_device: torch.device) -> None:
    """The fp16 mode's scaler (ampbench.train.LOSS_SCALERS["static"]) is a LossScaler with a fixed scale
    of STATIC_LOSS_SCALE: an overflowing step is skipped and leaves the scale where it was."""
    from ampbench.modes import STATIC_LOSS_SCALE
    from ampbench.train import LOSS_SCALERS

    scaler = LOSS_SCALERS["static"](perf_device)
    p = torch.nn.Parameter(torch.ones(3, device=perf_device, dtype=torch.float16))
    opt = torch.optim.SGD([p], lr=1.0)
    for overflow in (True, False, True):
        drive(scaler, opt, p, overflow)
        assert scaler.get_scale() == STATIC_LOSS_SCALE
    assert p.tolist() == [1.0 - GRAD] * 3


# -- CUDA: host-device synchronizations of a training step ------------------------------------------

# Syncs an amp_fp16 / fp16 / fp16_master training step may make. The Trainer uses fused optimizers,
# whose kernels read the scale and the inf flag on the device, so the scaler's step needs no readback.
MAX_STEP_SYNCS = {"amp_fp16": 0, "fp16": 0, "fp16_master": 0}


@pytest.mark.gpu
@pytest.mark.parametrize("mode_name", list(MAX_STEP_SYNCS))
def test_training_step_host_syncs(perf_device: torch.device, mode_name: str) -> None:
    """On CUDA, one training step of the recipe MLP (after warm-up) makes at most MAX_STEP_SYNCS[mode]
    host-device synchronizations, counted with torch.cuda.set_sync_debug_mode("warn").
    (Found on the H100: the mode's own "prototype feature" warning was first counted as a sync.)"""
    if perf_device.type != "cuda":
        pytest.skip("host-device synchronizations exist only on CUDA; this run's device is " + str(perf_device))
    import models
    from ampbench.modes import MODES
    from ampbench.train import Trainer

    trainer = Trainer(models.get_model("mlp"), MODES[mode_name], perf_device, smoke=True)
    trainer.run(3)
    torch.cuda.synchronize(perf_device)
    with warnings.catch_warnings(record=True) as caught, trainer.mode.math_flags():
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            trainer.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # only the per-operation reports count; set_sync_debug_mode also warns once that it is a prototype
    syncs = [str(w.message) for w in caught if "called a synchronizing" in str(w.message)]
    assert len(syncs) <= MAX_STEP_SYNCS[mode_name], f"{mode_name} step synced {len(syncs)} times: {syncs}"
