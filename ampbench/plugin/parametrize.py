"""Which cells (model x precision mode, and for the speed test eager or compiled) a test runs, from the
session's settings, the test's ``cells`` marker and what the user named. ``ampbench.plugin.session``'s
``pytest_generate_tests`` parametrizes with the result; nothing here imports pytest.

A test's ``@pytest.mark.cells(...)`` keywords:

- ``kind="..."``: its own models instead of the tier's, those whose ModelSpec field of that name
  (``ampbench.models.spec.CELL_KINDS``: convergence, input_pipeline) takes them in this run (``RUNS``: the tier, or
  ``cpu_smoke`` on the CPU), or in any run where --perf-models names models (which narrows them); a
  tier of compiled cells only (``--perf-tier compile``) runs the ones its ``compile`` run takes, in
  the modes whose row compiles; a test with neither such models nor the compile axis sits that tier out;
- ``tiered=True``: the run's own selection of models (the tier's, the CPU smoke pass's) narrows the
  kind's models too;
- ``modes_tiered=True``: the modes whose row is ``full_tier_only`` (fp32's control of the harness,
  TF32) are left out of the quick tier, unless --perf-precisions names the modes.

Modes whose row compiles (fp8) run under --perf-compile on or both, or where --perf-precisions names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ampbench.modes import MODES, shared_versus
from ampbench.settings import TIERS, PerfSettings


@dataclass(frozen=True)
class Cells:
    """A test's cells, model-major, as pytest.parametrize takes them."""

    argnames: tuple[str, ...]  # ("model_name", "mode_name"), and "compiled_cell" on the compile axis
    values: list[tuple]  # one tuple per cell
    ids: list[str]  # "model-mode", "-compiled" appended to a compiled cell of a mode that also runs eager


def _run(s: PerfSettings) -> str:
    """The run, of ampbench.models.spec.RUNS, whose models a test of its own kind takes."""
    if TIERS[s.tier].compiled_only:
        return "compile"
    return "cpu_smoke" if s.smoke else s.tier


def _models(s: PerfSettings, marker: Mapping, named_models: Sequence[str] | None, has_axis: bool) -> list[str]:
    from ampbench.models import kind_models  # imports torch: only once a cell test is parametrized

    kind = marker.get("kind")
    if TIERS[s.tier].compiled_only and not has_axis and not (kind and kind_models(kind, "compile")):
        return []  # no compiled cells of its own: it sits the tier out
    if kind is None:
        return list(s.models)
    own = kind_models(kind, None if named_models else _run(s))
    narrowed = named_models or marker.get("tiered", False)
    return [m for m in own if m in s.models] if narrowed else own


def _modes(s: PerfSettings, marker: Mapping, named_precisions: Sequence[str] | None, has_axis: bool) -> tuple[str, ...]:
    precisions = s.precisions
    if TIERS[s.tier].compiled_only and not has_axis:
        precisions = tuple(p for p in precisions if MODES[p].compile)  # its compiled cells: the rows that compile
    named = set(named_precisions or ())
    if marker.get("modes_tiered") and s.tier == "quick" and not named:
        precisions = tuple(p for p in precisions if not MODES[p].full_tier_only)
    # the modes whose row always compiles (fp8) cost a minute of compiling per trainer: they run where
    # --perf-compile asks for compiled cells, or where --perf-precisions names them
    compiling = True in s.compile
    return tuple(p for p in precisions if not MODES[p].compile or compiling or p in named)


def cells_for(s: PerfSettings, marker: Mapping, named_models: Sequence[str] | None,
              named_precisions: Sequence[str] | None, has_axis: bool) -> Cells:
    """The cells of a test whose ``cells`` marker has the keywords `marker` ({} without one), under
    settings `s`, where the user named `named_models` and `named_precisions` (None: not named); `has_axis`
    for a test with the compile axis (a ``compiled_cell`` argument: test_speed)."""
    names = _models(s, marker, named_models, has_axis)
    precisions = _modes(s, marker, named_precisions, has_axis)
    if not has_axis:
        cells = [(m, p) for m in names for p in precisions]
        return Cells(("model_name", "mode_name"), cells, [f"{m}-{p}" for m, p in cells])
    # the compile axis: a mode whose row compiles (fp8) exists only compiled, and keeps its own id; every
    # other mode runs eager, compiled (id ending -compiled), or both, by --perf-compile. Model-major, then
    # eager before compiled, so each model's fp32 side is built once per kind
    kinds = sorted(set(s.compile) | {MODES[p].compile for p in precisions if MODES[p].compile})
    # among the compiled cells, a mode the rows that compile are timed against (amp_bf16, fp8's versus)
    # comes straight before them, so its compiled side serves them and is compiled once
    served = {m.name for m in shared_versus(precisions)}
    in_compiled_order = sorted(precisions, key=lambda p: (MODES[p].compile, p in served))
    axis = [(m, p, c) for m in names for c in kinds for p in (in_compiled_order if c else precisions)
            if (c if MODES[p].compile else c in s.compile)]
    return Cells(("model_name", "mode_name", "compiled_cell"), axis,
                 [f"{m}-{p}" + ("-compiled" if c and not MODES[p].compile else "") for m, p, c in axis])


_RUN_NAMES = {"quick": "the quick tier", "full": "the full tier", "compile": "the compile tier",
              "cpu_smoke": "the CPU smoke pass"}


def why_no_cells(s: PerfSettings, marker: Mapping, named_models: Sequence[str] | None,
                 named_precisions: Sequence[str] | None, has_axis: bool) -> str:
    """In plain words, why a test has no cells in this run: the reason its skip gives (pytest's own says
    "got empty parameter set")."""
    from ampbench.models import kind_models

    kind = marker.get("kind")
    if not _models(s, marker, named_models, has_axis):
        if kind is None:
            return f"{_RUN_NAMES[_run(s)]} runs no cell of this test"
        label, takers = kind.replace("_", "-"), ", ".join(kind_models(kind)) or "none"
        if named_models:
            return (f"no {label} cell: none of the models --perf-models names ({', '.join(named_models)}) takes "
                    f"part in {label} tests (those that do: {takers})")
        return (f"no {label} cell: none of the models of {_RUN_NAMES[_run(s)]} ({', '.join(s.models)}) takes part "
                f"in {label} tests there (name one of {takers} with --perf-models)")
    named = (f" --perf-precisions names ({', '.join(named_precisions)})" if named_precisions
             else f" {_RUN_NAMES[_run(s)]} runs")
    return f"no cell: none of the precision modes{named} runs in this test"
