"""The suite's hypothesis profiles, chosen by $HYPOTHESIS_PROFILE: dev (the default), ci (derandomized,
the default where $CI is set) and thorough. Loaded at configure time of a run where ampbench acts, before
any test module (and its ``@given``) is imported."""

from __future__ import annotations

import os


def register_profiles() -> None:
    from hypothesis import HealthCheck, settings  # a second or more to import: only where ampbench acts

    settings.register_profile("dev", max_examples=50, deadline=None)
    settings.register_profile(
        "ci", max_examples=60, derandomize=True, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )


def load() -> None:
    """Register the profiles and load the one $HYPOTHESIS_PROFILE names."""
    from hypothesis import settings

    register_profiles()
    # CI runners set CI=true; there the run must be reproducible
    default = "ci" if os.environ.get("CI") else "dev"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))
