"""Every hypothesis strategy of the property tests (loss scaling, fp8 casts), in one place.

Scales and factors are drawn as fp32-representable numbers: a scaler keeps its scale in an fp32
tensor, so a factor that is not an fp32 number would make "the reference model" ambiguous.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

F32_MAX = float(torch.finfo(torch.float32).max)
NONFINITE = (math.inf, -math.inf, math.nan)


@dataclass(frozen=True)
class ScalerConfig:
    """GradScaler's keyword arguments, as drawn (device is added by the test)."""

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int

    def kwargs(self) -> dict:
        return {
            "init_scale": self.init_scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
        }


def powers_of_two(low: int, high: int) -> st.SearchStrategy[float]:
    """2**k for integer k in [low, high]."""
    return st.integers(low, high).map(lambda k: math.ldexp(1.0, k))


def init_scales(low: float = 2.0**-20, high: float = 2.0**127) -> st.SearchStrategy[float]:
    """Initial scales in [low, high]: mostly powers of two (what people use), some arbitrary fp32 numbers."""
    lo_k, hi_k = math.ceil(math.log2(low)), math.floor(math.log2(high))
    return st.one_of(
        powers_of_two(lo_k, hi_k),
        st.floats(low, high, width=32, allow_nan=False, allow_infinity=False),
    )


def growth_factors() -> st.SearchStrategy[float]:
    """Growth factors > 1 (GradScaler refuses 1.0), fp32-representable."""
    return st.one_of(
        st.just(2.0), st.sampled_from([1.5, 4.0, 65536.0]),
        st.floats(1.0, 1e4, exclude_min=True, width=32),
    )


def backoff_factors() -> st.SearchStrategy[float]:
    """Backoff factors in (0, 1), including tiny ones that drive a scale to its floor (or to 0) in a few steps."""
    return st.one_of(
        st.just(0.5), st.sampled_from([0.25, 2.0**-64, 2.0**-100]),
        st.floats(0.0, 1.0, exclude_min=True, exclude_max=True, width=32),
    )


def growth_intervals(high: int = 12) -> st.SearchStrategy[int]:
    """Growth intervals of 1 to `high` clean steps; short, so growth happens within a short sequence."""
    return st.integers(1, high)


def scaler_configs(
    init: st.SearchStrategy[float] | None = None,
    growth: st.SearchStrategy[float] | None = None,
    backoff: st.SearchStrategy[float] | None = None,
    interval: st.SearchStrategy[int] | None = None,
) -> st.SearchStrategy[ScalerConfig]:
    """Dynamic scaler configurations valid for torch.amp.GradScaler (growth > 1, 0 < backoff < 1)."""
    return st.builds(
        ScalerConfig,
        init_scale=init if init is not None else init_scales(),
        growth_factor=growth if growth is not None else growth_factors(),
        backoff_factor=backoff if backoff is not None else backoff_factors(),
        growth_interval=interval if interval is not None else growth_intervals(),
    )


def pow2_scaler_configs(low_k: int = 0, high_k: int = 24) -> st.SearchStrategy[ScalerConfig]:
    """Configurations in which every scale a trajectory reaches is a power of two (while it stays in
    the normal fp32 range): power-of-two initial scale, growth and backoff."""
    return scaler_configs(
        init=powers_of_two(low_k, high_k),
        growth=st.sampled_from([2.0, 4.0]),
        backoff=st.sampled_from([0.5, 0.25]),
    )


def overflow_sequences(max_size: int = 40) -> st.SearchStrategy[list[bool]]:
    """Steps in order, True where the step's gradients overflow; runs of either kind are likely."""
    return st.lists(st.one_of(st.booleans(), st.sampled_from([True, False])), min_size=1, max_size=max_size)


def nonfinite_values() -> st.SearchStrategy[float]:
    """+inf, -inf or NaN."""
    return st.sampled_from(NONFINITE)


def shapes(max_dims: int = 3, max_side: int = 5) -> st.SearchStrategy[tuple[int, ...]]:
    """Small tensor shapes, scalars included."""
    return st.lists(st.integers(1, max_side), min_size=0, max_size=max_dims).map(tuple)


def param_layouts(dtypes: tuple[torch.dtype, ...], max_params: int = 4) -> st.SearchStrategy[list[tuple]]:
    """Parameters as (shape, dtype, has_grad) triples; at least one has a gradient."""
    one = st.tuples(shapes(), st.sampled_from(dtypes), st.booleans() | st.just(True))
    return st.lists(one, min_size=1, max_size=max_params).filter(lambda ps: any(p[2] for p in ps))


@dataclass(frozen=True)
class Injection:
    """Where a non-finite value goes: param index and flat element index (both taken modulo the sizes)."""

    param: int
    element: int
    value: float


def injections() -> st.SearchStrategy[Injection | None]:
    """No injection (a clean step), or one non-finite value somewhere."""
    return st.none() | st.builds(Injection, st.integers(0, 63), st.integers(0, 1023), nonfinite_values())


def seeds() -> st.SearchStrategy[int]:
    """Seeds for the torch generator that makes data and initial weights."""
    return st.integers(0, 2**31 - 1)


def optimizer_specs() -> st.SearchStrategy[tuple[str, str]]:
    """(optimizer, implementation): sgd (momentum), adam or adamw; forloop, foreach or fused."""
    return st.tuples(st.sampled_from(["sgd", "adam", "adamw"]), st.sampled_from(["forloop", "foreach", "fused"]))


def fp32_normals(min_exp: int, max_exp: int) -> st.SearchStrategy[float]:
    """Signed normal fp32 numbers m * 2**e, 1 <= m < 2, e in [min_exp, max_exp]."""
    mantissas = st.integers(0, 2**23 - 1).map(lambda m: 1.0 + m / 2**23)
    return st.builds(lambda m, e, s: s * math.ldexp(m, e), mantissas,
                     st.integers(min_exp, max_exp), st.sampled_from([1.0, -1.0]))


def fp16_vanishing_gradients() -> st.SearchStrategy[float]:
    """fp32 gradients with 0 < |g| <= 2**-25: below half of fp16's smallest subnormal, so fp16 rounds them to 0."""
    return fp32_normals(-60, -26) | st.sampled_from([2.0**-25, -(2.0**-25)])


def fp32_finite() -> st.SearchStrategy[float]:
    """Any finite fp32 number, with the fp16 overflow boundary (65504, 65519.99, 65520) made likely."""
    edges = st.sampled_from([65504.0, 65519.99609375, 65520.0, 65520.00390625, -65520.0, -65504.0])
    return edges | st.floats(width=32, allow_nan=False, allow_infinity=False)


def fp16_weights() -> st.SearchStrategy[float]:
    """Normal fp16 weights (exactly representable), magnitudes 2**-10 to 2**10."""
    return fp32_normals(-10, 10).map(lambda w: float(torch.tensor(w, dtype=torch.float16)))


def update_ratios() -> st.SearchStrategy[float]:
    """|u| / |w| for an update u of weight w: in [2**-16, 2**-12), below fp16's half-ulp and far above
    fp32's ulp; no smaller than 2**-16 so that fewer than 65 updates add up to an fp16 ulp."""
    return st.floats(2.0**-16, 2.0**-12, exclude_max=True)


# -- loss scaling across ranks (perf/test_distributed_scaling.py) ----------------------------------


@dataclass(frozen=True)
class RankPoison:
    """One training step across ranks: `rank` (None: none) makes its local gradient of hidden unit
    `unit` non-finite before any communication."""

    rank: int | None
    unit: int
    value: float

    def to_json(self) -> dict:
        return {"rank": self.rank, "unit": self.unit, "value": str(self.value)}


@dataclass(frozen=True)
class DistScenario:
    cfg: ScalerConfig
    steps: tuple[RankPoison, ...]

    def to_json(self) -> dict:
        return {"scaler": self.cfg.kwargs(), "steps": [s.to_json() for s in self.steps]}


def dist_scaler_configs() -> st.SearchStrategy[ScalerConfig]:
    """Configurations whose scales stay far from fp32's limits over a few steps (at most 2**16 x 4**8),
    so no clean step overflows of itself and only the poisoned ones skip."""
    return scaler_configs(
        init=powers_of_two(-10, 16) | st.floats(2.0**-10, 2.0**16, width=32),
        growth=st.sampled_from([2.0, 4.0]) | st.floats(1.0, 4.0, exclude_min=True, width=32),
        backoff=st.sampled_from([0.5, 0.25]) | st.floats(0.125, 1.0, exclude_max=True, width=32),
        interval=growth_intervals(4),
    )


def dist_scenarios(world_size: int, width: int, max_steps: int = 8) -> st.SearchStrategy[DistScenario]:
    """A scaler configuration and 1 to `max_steps` steps, each clean or poisoned on one rank."""
    step = st.builds(RankPoison, st.none() | st.integers(0, world_size - 1), st.integers(0, width - 1),
                     nonfinite_values())
    return st.builds(DistScenario, dist_scaler_configs(), st.lists(step, min_size=1, max_size=max_steps).map(tuple))


# -- fp8 casts (perf/test_fp8_numerics.py) ---------------------------------------------------------


@dataclass(frozen=True)
class Fp8Input:
    """A 2-D tensor to cast, as drawn: rows of signed values (zeros included) and the dtype the
    training step would hand torchao (bf16 under autocast, fp32 for an fp32 master)."""

    rows: tuple[tuple[float, ...], ...]
    dtype: torch.dtype

    def tensor(self, device: torch.device) -> torch.Tensor:
        return torch.tensor(self.rows, dtype=torch.float32, device=device).to(self.dtype)


@st.composite
def fp8_inputs(draw, top_exp: tuple[int, int], spread: int = 24, max_rows: int = 4, max_cols: int = 16) -> Fp8Input:
    """Tensors whose rows each hold one entry of magnitude in [2**e, 2**(e+1)) for e in `top_exp` (one e
    per row, so rows differ in scale, as rowwise scaling must handle), the others up to 2**`spread`
    smaller or exactly zero. Every entry is an fp32 normal number or zero."""
    n_rows, n_cols = draw(st.integers(1, max_rows), label="rows"), draw(st.integers(1, max_cols), label="cols")
    rows = []
    for _ in range(n_rows):
        top = draw(st.integers(*top_exp), label="top exponent")
        entry = fp32_normals(max(-126, top - spread), top) | st.just(0.0)
        row = draw(st.lists(entry, min_size=n_cols, max_size=n_cols), label="row")
        row[draw(st.integers(0, n_cols - 1), label="top column")] = draw(fp32_normals(top, top), label="top")
        rows.append(tuple(row))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]), label="dtype")
    return Fp8Input(tuple(rows), dtype)


def fp8_positions() -> st.SearchStrategy[tuple[int, int]]:
    """(row, column) of an injected value, both taken modulo the tensor's shape."""
    return st.tuples(st.integers(0, 63), st.integers(0, 63))
