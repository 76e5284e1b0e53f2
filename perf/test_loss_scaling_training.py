"""Loss scaling, property-tested: training with it. Clean scaled training equals unscaled fp32 training,
scaled gradient accumulation equals a large batch, fp16's vanishing gradients, overflow threshold and
lost small updates (and how loss scaling and fp32 master weights answer them), the fp16 mode's static
scaler, and the host syncs of a scaled CUDA step. Each property runs against the scalers of
``perf/scalers.py`` (the `case` parameter); ``perf/test_loss_scaling.py`` holds the scaler's own state.
"""

from __future__ import annotations

import copy
import math
import warnings
from typing import Any

import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from ampbench.train import MasterWeights
from perf import strategies as S
from perf.scalers import GRAD, Case, bit_identical, drive, f32_mul, make_optimizer, parametrize_cases, scale_and_tracker
from perf.strategies import ScalerConfig


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    parametrize_cases(metafunc)


# -- equivalence with unscaled fp32 training --------------------------------------------------------


def _tiny_regression(seed: int, device: torch.device, batch: int = 8):
    gen = torch.Generator(device=device).manual_seed(seed)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    x = torch.randn(batch, 5, generator=gen, device=device)
    y = torch.randn(batch, 3, generator=gen, device=device)
    return model, x, y


def _train(model, x, y, opt_name: str, steps: int, scaler: Any | None,
           micro: int = 1, clip: float | None = None) -> list[torch.Tensor]:
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
    unscaled = _train(copy.deepcopy(model), x, y, opt_name, steps, None, clip=clip)
    scaler = case.make(perf_device, cfg)
    scaled = _train(model, x, y, opt_name, steps, scaler, clip=clip)
    pow2 = all(math.frexp(f)[0] == 0.5 for f in (cfg.init_scale, cfg.growth_factor))
    for r, s in zip(unscaled, scaled):
        if pow2:
            assert bit_identical(r, s), f"max diff {(r - s).abs().max().item()} at power-of-two scales"
        else:
            torch.testing.assert_close(s, r, rtol=1e-4, atol=1e-6)


@given(cfg=S.pow2_scaler_configs(0, 24), seed=S.seeds(), micro=st.sampled_from([2, 4, 8]),
       opt_name=st.sampled_from(["sgd", "adamw"]))
def test_accumulation_equals_large_batch(case: Case, perf_device: torch.device, cfg: ScalerConfig,
                                         seed: int, micro: int, opt_name: str) -> None:
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


# -- fp16 numerics (Micikevicius et al., "Mixed Precision Training", 2018) --------------------------


@given(g=S.fp16_vanishing_gradients(), extra=st.integers(0, 30))
def test_fp16_vanishing_gradient_recovered_by_scale(case: Case,
                                                    perf_device: torch.device, g: float, extra: int) -> None:
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
def test_fp16_small_updates_lost_but_kept_by_master_weights(case: Case, perf_device: torch.device,
                                                            w: float, ratio: float, sign: float) -> None:
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
    host-device synchronizations, counted with torch.cuda.set_sync_debug_mode("warn") (whose own
    "prototype feature" warning is no sync)."""
    if perf_device.type != "cuda":
        pytest.skip("host-device synchronizations exist only on CUDA; this run's device is " + str(perf_device))
    from ampbench import models
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
