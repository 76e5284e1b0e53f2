"""Faults injected into chosen comm variants of a distributed launch, as a worker plugin
(``AMPBENCH_WORKER_PLUGINS=tests.dist_faults``): ``$AMPBENCH_TEST_DIST_FAULTS`` names
``COMM:crash`` (the variant's wrap raises an error, as a bug would) or ``COMM:unsupported`` (it raises
``VariantUnsupported``, as a build that lacks what the variant needs does), comma-separated.
``tests/test_dist_isolation.py`` uses it to show that one variant's fault stays its own."""

from __future__ import annotations

import dataclasses
import os

from ampbench.distributed import variants

ENV = "AMPBENCH_TEST_DIST_FAULTS"


class InjectedCrash(RuntimeError):
    """The error a crashing variant raises."""


def faults() -> dict[str, str]:
    """comm variant -> "crash" or "unsupported", from ENV."""
    pairs = (item.split(":") for item in os.environ.get(ENV, "").split(",") if item.strip())
    return {comm.strip(): kind.strip() for comm, kind in pairs}


def worker_configure() -> None:
    """Wrap every strategy's wrap so that the variants ENV names fail in their way, alike on every rank."""
    named = faults()
    for name, strategy in list(variants.STRATEGIES.items()):
        def wrap(model, variant, device, _wrap=strategy.wrap):
            kind = named.get(variant.name)
            if kind == "crash":
                raise InjectedCrash(f"injected crash in {variant.name}")
            if kind == "unsupported":
                raise variants.VariantUnsupported(f"injected: this build lacks what {variant.name} needs")
            return _wrap(model, variant, device)

        variants.STRATEGIES[name] = dataclasses.replace(strategy, wrap=wrap)
