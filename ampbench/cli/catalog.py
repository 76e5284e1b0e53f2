"""``ampbench list``: the models and the precision modes a run can name, with the tiers that run them
and what each mode needs of the device, read from the registry and the modes table themselves: its
arguments (``add_parser``) and the command."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ampbench.cli.exits import EXIT_BAD_INPUT, EXIT_OK
from ampbench.modes import MODES, PrecisionMode
from ampbench.settings import TIERS

# what each command's help says of it (argparse fills the text to the terminal's width)
_LIST_ABOUT = """List the models (tier, batch on a GPU and on the CPU, whether the CPU smoke pass and the compile
tier run them, the published benchmark each reproduces) and the precision modes (dtypes, loss scaling, tiers, what
each needs of the device: compute capability, torchao, torch.compile)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    lst = sub.add_parser("list", help="the models and precision modes a run can name",
                         description=_LIST_ABOUT)
    lst.add_argument("--json", action="store_true", help="print them as JSON (default: two tables)")
    lst.set_defaults(handler=command)


def zoo_rows() -> list[dict[str, Any]]:
    """One row per model of the zoo, in test order."""
    from ampbench import models  # builds nothing, but imports torch

    compile_tier = TIERS["compile"].models or models.model_names("compile")
    return [{"name": spec.name, "tier": spec.tier, "batch_size": spec.batch_size,
             "smoke_batch_size": spec.smoke_batch_size, "in_cpu_smoke": spec.in_cpu_smoke,
             "in_compile_tier": spec.name in compile_tier, "optimizer": spec.optimizer, "origin": spec.origin}
            for spec in models.REGISTRY.values()]


def _tiers(mode: PrecisionMode) -> str:
    """The tiers whose speed cells run `mode` by default."""
    tiers = [] if mode.compile else ["full"] if mode.full_tier_only else ["quick", "full"]
    tiers += ["compile"] if mode.name in (TIERS["compile"].modes or ()) else []
    # a row that always compiles costs a compile per trainer: elsewhere it runs when asked
    return ", ".join(tiers) + ("; elsewhere when named or under --perf-compile on|both" if mode.compile else "")


def mode_rows() -> list[dict[str, Any]]:
    """One row per precision mode, in table order: what it trains in and what it needs to run."""
    import torch

    from ampbench.device import CAPABILITIES

    cpu = torch.device("cpu")
    return [{"name": m.name, "parameters": m.param_dtype_name, "autocast": m.autocast_dtype_name,
             "loss_scaling": m.loss_scaling, "master_weights": m.master_weights, "compiled": m.compile,
             "tiers": _tiers(m), "needs": [CAPABILITIES[n].missing for n in m.needs]
             + (["torch.compile (Inductor, Triton)"] if m.compile else []),
             # all() stops at the first need the CPU lacks, before torchao is looked for
             "on_cpu": all(CAPABILITIES[n].check(cpu) for n in m.needs)}
            for m in MODES.values()]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(r, widths)), r[-1]]).rstrip() for r in [header, *rows]]


def render_text() -> str:
    """Both tables as the terminal shows them."""
    yes = lambda flag: "yes" if flag else "no"  # noqa: E731
    models = _table(["model", "tier", "batch", "CPU batch", "CPU pass", "compile tier", "origin"],
                    [[r["name"], r["tier"], str(r["batch_size"]), str(r["smoke_batch_size"]),
                      "yes" if r["in_cpu_smoke"] else "when named", yes(r["in_compile_tier"]), r["origin"]]
                     for r in zoo_rows()])
    modes = _table(["mode", "parameters", "autocast", "loss scaling", "tiers", "CPU", "needs"],
                   [[r["name"], r["parameters"], r["autocast"] or "-", r["loss_scaling"], r["tiers"],
                     yes(r["on_cpu"]), "; ".join(r["needs"]) or "-"] for r in mode_rows()])
    return "\n".join(["Models (--perf-models; tier quick runs by default, full only under --perf-tier full):", *models,
                      "",
                      "Precision modes (--perf-precisions; each timed against fp32):", *modes]) + "\n"


def as_json() -> dict[str, list[dict[str, Any]]]:
    return {"models": zoo_rows(), "modes": mode_rows()}


def command(args: argparse.Namespace) -> int:
    from ampbench import models  # imports torch, which the other file commands do without

    try:
        models.check_entry_points()
    except models.ModelEntryPointError as exc:
        print(f"ampbench: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(json.dumps(as_json(), indent=1) + "\n" if args.json else render_text())
    return EXIT_OK
