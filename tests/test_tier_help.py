"""--perf-tier's help is read off the tier table: a tier's models and modes come from TIERS, the model
registry and the mode table, so a row added to any of them shows in the help without an edit to it."""

from __future__ import annotations

from ampbench import models
from ampbench.modes import MODES
from ampbench.settings import TIERS, Tier, tier_help


def test_the_help_names_each_tier_with_its_models_and_modes():
    text = tier_help(TIERS, models.model_names, MODES)
    quick = text.split(". full:")[0]
    assert quick.startswith("quick: " + ", ".join(models.model_names("quick")))
    assert "fp32" not in quick and "amp_bf16" in quick  # the full-tier-only modes stay out of the quick tier
    assert "full: every model in every mode; memory with each cell's largest batch" in text
    assert "compile: compiled cells only" in text and "resnet50, gpt, llama in amp_bf16, fp8_tensorwise" in text
    assert text.endswith("(default: quick)")


def test_a_new_tier_row_shows_in_the_help():
    tiers = {**TIERS, "nightly": Tier("nightly", models=("gpt",), modes=("bf16",))}
    assert "nightly: gpt in bf16; memory with each cell's largest batch" in tier_help(tiers, models.model_names, MODES)
