"""Noise pooled across a GPU model's cells (ampbench.history.pooling): the prior it fits, the tolerance it
gives a young cell, its false failures on noise alone, the pooled card term, and one tolerance in the file
and in the history."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from ampbench.baselines.entries import SpeedEntry, entry_tolerance
from ampbench.baselines.file import BaselineFile
from ampbench.history.learn import learn
from ampbench.history.model import NEW_CARD
from ampbench.history.pooling import COMMON, GROUPS, card_spread, fit_prior, group_of
from ampbench.history.replay import Replay
from ampbench.history.series import Point, Series
from ampbench.results.ratios import DEVICE
from ampbench.stats import t_quantile
from ampbench.tolerance import BetweenRuns

ROOT = Path(__file__).resolve().parent.parent
# the quick tier's 25 cells' run-to-run sd on one H200 (four runs each), by model: what the prior meets
H200_SD = {"gpt": [0.064, 0.036, 0.024, 0.050, 0.161], "lstm_lm": [0.374, 0.319, 0.434, 0.114, 0.114],
           "mlp": [0.074, 0.053, 0.124, 0.024, 0.029], "resnet50": [0.023, 0.035, 0.015, 0.031, 0.110],
           "wide_resnet28_10": [0.071, 0.067, 0.098, 0.015, 0.054]}
CELLS = [f"test_speed[{m}-{k}]" for m in H200_SD for k in range(5)]
SIGMA = np.array([v for m in H200_SD for v in H200_SD[m]]) / 100
FLOOR, SHARE = 0.005, 0.001


def test_a_cells_group_is_its_test_and_model():
    assert group_of("test_speed[gpt-amp_fp16]") == group_of("test_speed[gpt-bf16]") == "test_speed:gpt"
    assert group_of("test_ddp_speed[gpt-amp_bf16-fp16_hook]") == "test_ddp_speed:gpt"


def test_cells_of_one_noise_lend_each_other_many_degrees_of_freedom():
    rng = np.random.default_rng(3)
    variances = {f"c{i}": (0.001 ** 2 * rng.chisquare(3) / 3, 3) for i in range(40)}
    prior = fit_prior(variances)
    assert prior is not None and prior.trend == COMMON and prior.dof >= 20
    assert all(abs(s / 0.001 - 1) < 0.25 for s in prior.scale.values())


def test_models_of_very_different_noise_lend_little_as_one_level_and_much_by_model():
    """Five models whose noise differs tenfold, their modes alike: one level for all lends little, a level
    per model takes the difference out, and each model's cells are held to their own model's level."""
    rng = np.random.default_rng(4)
    level = {"gpt": 0.0005, "lstm_lm": 0.003, "mlp": 0.0006, "resnet50": 0.0003, "wide_resnet28_10": 0.0006}
    truth = {c: level[c[len("test_speed["):].split("-")[0]] * math.exp(0.15 * rng.standard_normal()) for c in CELLS}
    variances = {c: (s ** 2 * rng.chisquare(3) / 3, 3) for c, s in truth.items()}
    one = fit_prior(variances)
    by_model = fit_prior(variances, {c: group_of(c) for c in CELLS})
    assert by_model is not None and by_model.trend == GROUPS and by_model.dof >= 5
    assert one is None or one.dof < by_model.dof
    assert by_model.scale["test_speed[lstm_lm-0]"] > 3 * by_model.scale["test_speed[resnet50-0]"]


def test_too_few_cells_pool_nothing():
    assert fit_prior({"a": (1e-6, 3), "b": (2e-6, 3), "c": (1e-6, 0)}) is None


def _tolerances(n: int, rng: np.random.Generator, pooled: bool) -> np.ndarray:
    """The learned tolerances of the 25 cells after n runs each, at their true noise."""
    d = n - 1
    s2 = SIGMA ** 2 * rng.chisquare(d, size=len(SIGMA)) / d
    sd, dof = np.sqrt(s2), np.full(len(SIGMA), float(d))
    prior = fit_prior({c: (v, d) for c, v in zip(CELLS, s2)}, {c: group_of(c) for c in CELLS}) if pooled else None
    if prior is not None:
        sd = np.array([prior.posterior_sd(c, s, d) for c, s in zip(CELLS, sd)])
        dof += prior.dof
    return np.maximum(FLOOR, [t_quantile(SHARE, k) * s * math.sqrt(1 + 1 / n) for s, k in zip(sd, dof)])


@pytest.mark.parametrize("runs", [3, 5, 10])
def test_pooled_noise_fails_at_most_one_cell_in_a_thousand_on_noise_alone_and_is_tighter(runs):
    """Simulated on the H200's own cells' noise: a new unchanged run lies below its line (level less its
    tolerance) with the chance the normal gives; averaged over cells and draws it stays under 1 in 1,000,
    and the pooled tolerances are narrower than each cell's own."""
    rng = np.random.default_rng(runs)
    k = math.sqrt(1 + 1 / runs)
    fails, own, pooled = [], [], []
    for _ in range(400):
        tol = _tolerances(runs, rng, True)
        fails.append(norm.cdf(np.log(1 - tol) / (SIGMA * k)))
        pooled.append(tol)
        own.append(_tolerances(runs, rng, False))
    assert np.mean(fails) <= 0.001
    assert np.median(pooled) <= np.median(own)
    if runs == 3:  # the young cells gain most: the noisiest quiet cell's median tolerance narrows by a third
        assert np.median(np.array(pooled)[:, 4]) < 0.75 * np.median(np.array(own)[:, 4])


def _series(test_id: str, logs: list[float], cards: list[str]) -> Series:
    points = tuple(Point(f"r{i}", f"2026-03-01T{i:02d}:00:00Z", math.exp(y), None, None, True, False, c, "pass")
                   for i, (y, c) in enumerate(zip(logs, cards)))
    return Series("simulated GPU", test_id, "device_speedup", points)


def test_a_card_offset_is_pooled_over_cells_less_what_their_noise_explains():
    rng = np.random.default_rng(5)
    replays = []
    for i in range(30):
        offset = 0.004 * rng.standard_normal()
        logs = list(0.0005 * rng.standard_normal(4)) + [offset + 0.0005 * rng.standard_normal()]
        replays.append(Replay(_series(f"test_speed[m{i}-x]", logs, ["a"] * 4 + ["b"])))
    sd, offsets = card_spread(replays)
    assert offsets == 30 and 0.0025 < sd < 0.0055
    assert card_spread([Replay(_series("test_speed[m-x]", [0.0, 0.001], ["a", "a"]))]) is None


def test_the_moderated_bound_combines_the_card_terms_degrees_of_freedom():
    alone = BetweenRuns(0.001, 5, True, 1, 5, 0.003)
    pooled = BetweenRuns(0.001, 5, True, 1, 5, 0.003, card_dof=50)
    # the card term learned from 50 offsets is held with far fewer t-quantile's worth than 4 runs' dof
    assert pooled.bound(0.998) < 0.6 * alone.bound(0.998)
    assert pooled.bound(0.998) > t_quantile(0.001, 1000) * math.hypot(0.001 * math.sqrt(1.2), 0.003)


def test_the_shipped_h200_file_and_its_history_hold_a_cell_to_one_tolerance():
    """The exported file stores the pooled spread (posterior sd, its prior, the pooled card term), and the
    verdict's rule read back from the file gives what the history computed."""
    document = json.loads((ROOT / "baselines" / "nvidia-h200.json").read_text())
    for test_id, entry in document["entries"].items():
        typed = SpeedEntry.from_figures(entry["figures"])
        ratio = typed.ratio(DEVICE)
        assert ratio.between_card_dof and ratio.between_card_sd, test_id  # three cards behind it
        assert entry_tolerance(DEVICE, FLOOR, ratio) == pytest.approx(ratio.tolerance, rel=1e-9), test_id
        # the quick tier's cells from six runs on three cards; the compiled ones from three runs on two,
        # whose own noise borrows nothing (two degrees of freedom: gpt fp8_tensorwise's 0.5% sd gives 4.9%)
        assert 0.005 <= ratio.tolerance < (0.06 if typed.versus else 0.025), test_id


def test_export_writes_what_the_history_judges_with(tmp_path):
    """Three cells of four runs on one card and one on another: the file's tolerance of each is the one the
    history's overlay holds a run on a new card to, and a cell whose own runs have not learned a spread
    borrows nothing."""
    from ampbench.history.baseline_source import HistoryBaselines

    class Runs:
        def __init__(self, serieses):
            self.serieses = serieses

        def series_of(self, gpu, figure):
            return self.serieses if figure == DEVICE.history else {}

    rng = np.random.default_rng(6)
    serieses = {}
    for i in range(6):
        test_id = f"test_speed[m{i % 2}-mode{i}]"
        logs = list(math.log(2.0) + 0.0008 * rng.standard_normal(4)) + [math.log(2.0) + 0.003]
        serieses[test_id] = _series(test_id, logs, ["a"] * 4 + ["b"])
    serieses["test_speed[m0-young]"] = _series("test_speed[m0-young]", [0.7, 0.7005], ["a", "a"])
    store = BaselineFile(tmp_path / "x.json", "simulated GPU")
    learned = HistoryBaselines(store, Runs(serieses), card=NEW_CARD).learned()
    lent = [b[DEVICE.name] for t, b in learned.items() if t != "test_speed[m0-young]"]
    assert all(b.lent_dof >= 1 and b.card_dof == 6 for b in lent)
    young = learned["test_speed[m0-young]"][DEVICE.name]
    assert young.lent_dof == 0 and young.between_runs is None
    for b in lent:
        ratio = b.into(SpeedEntry().ratio(DEVICE), stores_tolerance=True)
        assert entry_tolerance(DEVICE, FLOOR, ratio) == pytest.approx(b.tolerance, rel=1e-9)
    assert learn(serieses["test_speed[m0-mode0]"]).lent_dof == 0  # a cell learned alone borrows nothing


def test_the_distributed_cells_pool_their_noise_the_same_way(tmp_path):
    from ampbench.history.baseline_source import DISTRIBUTED_CELLS, HistoryBaselines

    kinds = {kind.history: kind for kind in DISTRIBUTED_CELLS.ratios}
    assert DEVICE.history in kinds

    class Runs:
        def series_of(self, gpu, figure):
            if figure != DEVICE.history:
                return {}
            rng = np.random.default_rng(8)
            return {t: _series(t, list(math.log(4.0) + 0.001 * rng.standard_normal(4)), ["a"] * 4)
                    for t in (f"test_ddp_speed[{m}-{mode}-fp32]" for m in ("gpt", "resnet50")
                              for mode in ("amp_bf16", "amp_fp16", "bf16", "fp16"))}

    store = BaselineFile(tmp_path / "x-x2.json", "simulated GPU x2")
    learned = HistoryBaselines(store, Runs(), cells=DISTRIBUTED_CELLS, card=NEW_CARD).learned()
    assert len(learned) == 8 and all(b[DEVICE.name].lent_dof >= 1 for b in learned.values())
