"""Card admission (``ampbench.history.cards``): a card's fp32 device time per step against its GPU model's
other cards, on simulated fleets whose cards lie 0.3% to 1% apart, with one card 8% slow and an outlier
1.5x slow; its figures in the speed record (a record written before it loads without them) and in the
run's summary; the cell's comparison against a baseline file and a history.

The rates dev/bench_cards.py simulates (5000 fleets a row; the card's runs 1 or 3, each other card's 1 to 5,
run-to-run noise 0.3%; docs/design.md, "Card admission"): a card like the others is named an outlier card
in none of the fleets whose cards lie 0.3% apart and in at most 0.1% of those 1% apart, a card 8% slow in
every fleet 0.3% apart and in 95% to 99% of those 1% apart (about 95% against a baseline file's level
alone), a 1.5x card in every fleet. A second 1.5x card among the others does not hide an 8% slow card
where the others are 0.3% apart, and hides it in under 10% of the fleets 1% apart."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings

from ampbench.history.cards import MIN_SPREAD_CARDS, OUTLIER_Z, SPREAD_FLOOR, standing
from ampbench.plugin.summary import outlier_card_lines
from ampbench.results import CardFigures, SpeedRecord
from history_strategies import Fleet, fleets

STEP_MS = 40.0
BETWEEN = (0.003, 0.006, 0.01)  # sd of the cards' offsets
RUN_SD = 0.003  # a card's fp32 step from run to run


def _fleet(rng: random.Random, cards: int, between: float, runs: int = 3) -> list[list[float]]:
    """Each card's fp32 step times (ms), `runs` a card, the cards `between` apart."""
    out = []
    for _ in range(cards):
        offset = rng.gauss(0.0, between)
        out.append([STEP_MS * math.exp(offset + rng.gauss(0.0, RUN_SD)) for _ in range(runs)])
    return out


def _levels(cards: list[list[float]]) -> list[float]:
    return [sorted(c)[len(c) // 2] for c in cards]


# the least share of fleets in which a card of each factor is named, and the most, by the cards' spread: the
# simulation's rates (module docstring) less what 160 fleets may miss by chance
NAMED = {0.003: {1.0: (0.0, 0.0), 1.08: (1.0, 1.0), 1.5: (1.0, 1.0)},
         0.006: {1.0: (0.0, 0.0), 1.08: (0.97, 1.0), 1.5: (1.0, 1.0)},
         0.01: {1.0: (0.0, 0.02), 1.08: (0.9, 1.0), 1.5: (1.0, 1.0)}}


@pytest.mark.parametrize("between", BETWEEN)
def test_in_fleets_of_cards_within_1_percent_only_the_slow_cards_are_named(between):
    rng = random.Random(int(between * 1e4))
    named: dict[float, list[bool]] = {factor: [] for factor in NAMED[between]}
    for fleet_size in (1, 3, 7, 15):
        for _ in range(40):
            cards = _fleet(rng, fleet_size + 1, between)
            like, others = cards[0], _levels(cards[1:])
            for factor in named:
                found = standing([v * factor for v in like], others)
                assert found is not None, f"{fleet_size} other cards and the card's 3 runs give a standing"
                named[factor].append(found.outlier)
    for factor, (least, most) in NAMED[between].items():
        share = sum(named[factor]) / len(named[factor])
        assert least <= share <= most, (f"a card {factor}x of its model's level in fleets {between:.1%} apart is "
                                        f"named in {share:.1%} of them; expected {least:.0%} to {most:.0%}")


def test_a_card_against_a_baseline_files_level_alone_is_measured_in_the_floor():
    found = standing([STEP_MS * 1.5], [STEP_MS])
    assert found is not None and found.cards == 1 and found.spread == SPREAD_FLOOR
    assert found.outlier and found.off == pytest.approx(0.5) and found.z == pytest.approx(math.log(1.5) / SPREAD_FLOOR)
    assert not standing([STEP_MS * 1.02], [STEP_MS]).outlier  # within OUTLIER_Z floors: 5.25%
    assert standing([], [STEP_MS]) is None and standing([STEP_MS], []) is None


def test_a_wide_fleet_widens_the_spread_and_an_outlier_among_the_others_does_not():
    wide = [STEP_MS * math.exp(0.03 * z) for z in (-1.5, -0.8, -0.3, 0.0, 0.4, 0.9, 1.4)]
    found = standing([STEP_MS * 1.08], wide)
    assert found.spread > 0.02 and not found.outlier, found.describe()  # 8% is within a fleet 3% apart
    tight = [STEP_MS * (1 + d) for d in (-0.004, -0.002, 0.0, 0.001, 0.003)]
    found = standing([STEP_MS * 1.08], [*tight, STEP_MS * 1.5])
    assert found.spread == SPREAD_FLOOR and found.outlier, found.describe()
    assert len(tight) + 1 >= MIN_SPREAD_CARDS


@settings(max_examples=200, deadline=None)
@given(fleets())
def test_a_card_like_the_others_is_never_named_whatever_one_stray_run_of_it_measured(fleet: Fleet):
    found = standing(fleet.card_runs(), list(fleet.others))
    assert found is not None and not found.outlier, (
        f"a card like the others ({len(fleet.card.draws)} runs, stray at {fleet.card.stray_at}): {found.describe()}")


@settings(max_examples=200, deadline=None)
@given(fleets(factor=1.5))
def test_a_card_1_5x_slow_is_always_named_whatever_one_stray_run_of_it_measured(fleet: Fleet):
    found = standing(fleet.card_runs(), list(fleet.others))
    assert found is not None and found.outlier and found.z > OUTLIER_Z, found.describe()
    # scale-free: the same fleet timed in other units names the same card by as much
    again = standing([v * 1e3 for v in fleet.card_runs()], [v * 1e3 for v in fleet.others])
    assert again.z == pytest.approx(found.z) and again.outlier


OUTLIER = CardFigures(uuid="GPU-slow", step_ms=60.0, runs=3, level_ms=40.0, cards=4, off=0.5, z=27.0,
                      spread=0.015, outlier=True, source="history.sqlite")


def test_the_speed_record_keeps_the_card_and_an_older_record_loads_without_it():
    record = SpeedRecord(test_id="test_speed[gpt-amp_bf16]", model="gpt", mode="amp_bf16", card=OUTLIER)
    info = record.to_info()
    assert info["card"]["outlier"] is True and info["card"]["level_ms"] == 40.0
    assert SpeedRecord.problems(info, "cell") == []
    assert SpeedRecord.from_info(info, record.test_id).card == OUTLIER
    older = {k: v for k, v in info.items() if k != "card"}
    assert SpeedRecord.problems(older, "cell") == [] and not SpeedRecord.from_info(older).card


def test_the_summary_names_an_outlier_card_with_its_figures_once_for_its_cells():
    named = [SpeedRecord(test_id=f"test_speed[gpt-{m}]", model="gpt", mode=m, card=OUTLIER)
             for m in ("amp_bf16", "bf16")]
    fine = SpeedRecord(test_id="test_speed[vit-bf16]", model="vit", mode="bf16",
                       card=CardFigures(uuid="GPU-slow", step_ms=10.0, level_ms=10.0, z=0.1, outlier=False))
    lines = outlier_card_lines([*named, fine])
    assert lines[0].startswith("ampbench: an outlier card: GPU-slow, in 2 cells") and len(lines) == 3
    assert "test_speed[gpt-bf16]: fp32 step 60.000 ms against the model's 40.000 ms from 4 card(s): +50.0%, " \
           "+27.0 spreads of 1.5% (history.sqlite)" in lines[2]
    assert outlier_card_lines([fine]) == []


def test_the_report_lists_each_cell_of_an_outlier_card_with_its_figures():
    import json
    from pathlib import Path

    from ampbench.report.html import render_html
    from ampbench.report.markdown import render_markdown
    from ampbench.report.speed_cells import OUTLIER_TITLE
    from ampbench.results import parse_run

    doc = json.loads((Path(__file__).parent / "data" / "synthetic_h100_device.json").read_text())
    cell = next(b for b in doc["benchmarks"] if b["name"] == "test_speed[gpt-amp_bf16]")
    record = next(c for c in parse_run(doc, "run.json").cells if c.test_id == cell["name"])
    cell["extra_info"] = {**record.to_info(), "card": OUTLIER.to_info()}  # as this version writes it
    run = parse_run(doc, "run.json")
    markdown = render_markdown(run)
    assert f"### {OUTLIER_TITLE}" in markdown
    assert "| GPU-slow | test_speed[gpt-amp_bf16] | 60.000 | 40.000 | +50.0% | +27.0 | history.sqlite |" in markdown
    html = render_html(run, [])
    assert OUTLIER_TITLE in html and "GPU-slow" in html
    del cell["extra_info"]["card"]
    assert OUTLIER_TITLE not in render_markdown(parse_run(doc, "run.json")), "a run of no outlier card has no table"
