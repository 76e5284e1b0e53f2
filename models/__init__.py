"""The model zoo: an explicit registry, one architecture per module."""

from __future__ import annotations

from models import dpn, gpt, llama, lstm_lm, mlp, mnist_cnn, resnet, wide_resnet
from models.spec import ModelSpec

# the order of the model table in README.md, which is also the order of test ids and report rows
_SPECS: tuple[ModelSpec, ...] = (
    mlp.SPEC,
    mnist_cnn.SPEC,
    wide_resnet.SPEC,
    resnet.RESNET18,
    resnet.RESNET34,
    resnet.RESNET50,
    resnet.RESNET101,
    resnet.RESNET152,
    dpn.DPN26_SPEC,
    dpn.DPN92_SPEC,
    lstm_lm.SPEC,
    gpt.SPEC,
    llama.SPEC,
)
REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in _SPECS}
assert len(REGISTRY) == len(_SPECS), f"duplicate model names in {[spec.name for spec in _SPECS]}"


def get_model(name: str) -> ModelSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; valid models: {', '.join(REGISTRY)}") from None


def model_names(tier: str = "full", cpu_smoke: bool = False) -> list[str]:
    """Names in registry order; tier 'quick' keeps only the quick-tier models, 'compile' those of the
    compile tier, `cpu_smoke` only those of the CPU smoke pass's default selection."""
    in_tier = {"full": lambda spec: True, "quick": lambda spec: spec.tier == "quick",
               "compile": lambda spec: spec.in_compile_tier}[tier]
    return [name for name, spec in REGISTRY.items() if in_tier(spec) and (spec.in_cpu_smoke or not cpu_smoke)]


def kind_models(kind: str, run: str | None = None) -> list[str]:
    """Names, in registry order, of the models the tests of `kind` (a CELL_KINDS field of ModelSpec) take
    in `run` (one of RUNS), or in any run (None)."""
    return [name for name, spec in REGISTRY.items() if spec.takes_part(kind, run)]
