"""The model zoo: an explicit registry, one architecture per module; after it, a project's own models,
each a ``ModelSpec`` its installed package names in the ``ampbench.models`` entry point group
(``own_model = "package.module:SPEC"``), in entry-point name order. An entry point that names no usable
model never stops the import: ``check_entry_points`` raises for it, where a run or a command uses the
registry, so that the message names the entry point and its cause instead of a traceback."""

from __future__ import annotations

import re
from importlib.metadata import entry_points

from ampbench.models import dpn, gpt, llama, lstm_lm, mlp, mnist_cnn, resnet, wide_resnet
from ampbench.models.spec import ModelSpec

ENTRY_POINTS = "ampbench.models"


class ModelEntryPointError(ValueError):
    """An ``ampbench.models`` entry point that names no usable ModelSpec."""

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
assert len({name.casefold() for name in REGISTRY}) == len(_SPECS), f"duplicate model names in {list(REGISTRY)}"


def spec_of_entry_point(name: str, value: str, load) -> ModelSpec:
    """The ModelSpec an entry point `name` = `value` loads (`load()`); ModelEntryPointError naming the
    entry point where it cannot be loaded, is no ModelSpec, or its name is not the entry point's."""
    where = f"entry point {ENTRY_POINTS} {name} = {value!r}"
    try:
        spec = load()
    except Exception as exc:  # an import of the user's package fails in any way its code can
        raise ModelEntryPointError(f"{where}: cannot be loaded: {type(exc).__name__}: {exc}") from None
    if not isinstance(spec, ModelSpec):
        raise ModelEntryPointError(f"{where}: names a {type(spec).__name__}, not an ampbench.models.spec.ModelSpec")
    if spec.name != name:
        raise ModelEntryPointError(f"{where}: its ModelSpec is named {spec.name!r}; name the entry point after it")
    return spec


# what --perf-models, a test id (test_speed[MODEL-MODE]) and every export can name: ASCII, no '-', ',', space
# or bracket, which split those
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def register(spec: ModelSpec, where: str) -> None:
    """Add a project's own model after the zoo; ModelEntryPointError where the name is taken, in any case
    (``MLP`` beside ``mlp`` would be two cells that a reader, a case-insensitive file system and a
    dashboard take for one), or is one that --perf-models and the test ids cannot name."""
    if not isinstance(spec.name, str) or not _NAME.fullmatch(spec.name):
        raise ModelEntryPointError(
            f"{where}: model name {spec.name!r} cannot be named by --perf-models or in a test id; a model name is "
            "ASCII letters, digits and '_', beginning with a letter (e.g. 'lenet_5')")
    taken = next((name for name in REGISTRY if name.casefold() == spec.name.casefold()), None)
    if taken == spec.name:
        raise ModelEntryPointError(f"{where}: model {spec.name!r} is already registered; choose another name")
    if taken is not None:
        raise ModelEntryPointError(f"{where}: model {spec.name!r} differs from the registered {taken!r} only in "
                                   "case; model names are unique in any case: choose another name")
    REGISTRY[spec.name] = spec


def _register_entry_points() -> list[str]:
    """Register every entry point's model; what was wrong with each that names no usable one."""
    broken = []
    for ep in sorted(entry_points(group=ENTRY_POINTS), key=lambda e: e.name):
        try:
            register(spec_of_entry_point(ep.name, ep.value, ep.load), f"entry point {ENTRY_POINTS} {ep.name}")
        except ModelEntryPointError as exc:
            broken.append(str(exc))
    return broken


_BROKEN_ENTRY_POINTS = _register_entry_points()


def check_entry_points() -> None:
    """ModelEntryPointError naming each installed entry point that names no usable model, whichever
    models a run asks for: its package is in the environment, and a run must not quietly leave it out."""
    if _BROKEN_ENTRY_POINTS:
        raise ModelEntryPointError("; ".join(_BROKEN_ENTRY_POINTS))


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
