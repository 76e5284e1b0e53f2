"""Noise that borrows strength across cells: each cell's run-to-run variance shrunk toward a prior learned
from every cell of the GPU model, by empirical Bayes (Smyth, "Linear models and empirical Bayes methods
for assessing differential expression in microarray experiments", 2004; limma's ``squeezeVar``).

A cell's sample variance s^2 on d degrees of freedom is taken as drawn around its true variance, and the
true variances of the model's cells as drawn from a scaled inverse chi-square of d0 degrees of freedom
around s0^2. The posterior variance is

    (d s^2 + d0 s0^2) / (d + d0),

and a new run is held to it with Student's t on d + d0 degrees of freedom (the moderated t). d0 and s0^2
are fitted by moments of log s^2 (``fit_prior``): where the cells' variances differ little beyond what
their own few degrees of freedom explain, d0 is large and a young cell is held nearly as tightly as a
learned one; where they differ a lot, d0 is small and each cell mostly stands on its own runs.

The cells' noise differs by a factor of ten and more between models (on one H200, lstm_lm's runs spread
0.1-0.4%, resnet50's 0.02-0.1%), far more than between the modes of one model. A trend that knows which
cells are noisy takes that out of the prior's spread, so that d0 measures only how far the cells lie from
it: log s0^2 is a level per model (its cells' mean), where each model has enough cells; else a line in the
cell's noise on the other GPU models' baseline files (relative noise: the line's intercept and slope are
fitted on this model's cells, so a GPU noisier throughout moves the line, not the verdicts); else one
level. On the H200's quick tier the model's level held the prior's spread lowest (d0 4.6 from three runs
a cell, against 2.6 for the other files' line and 1.6 for one level: docs/design.md, "Noise pooled across
cells").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping, Sequence

import numpy as np

from ampbench.history.replay import Replay
from ampbench.history.statuses import EXCLUDED, FAILED

# below this many cells with a degree of freedom the prior is not fitted: the spread of a handful of
# log variances says nothing of d0
MIN_CELLS = 5
# a model's cells get a level of their own in the prior where it has this many with a variance; the
# line in the other files' noise is fitted only where this many cells have it
MIN_GROUP_CELLS = 3
MIN_COVARIATE_CELLS = 8
# d0 where the cells' variances differ no more than their own degrees of freedom explain (limma takes it
# as infinite): finite, so that a cell's own runs still outweigh the prior in the end
MAX_PRIOR_DOF = 60
# the share of the fitted d0 a cell borrows. d0 comes from the spread of a few dozen log variances and is
# often fitted high; a cell far above its model's level is then held tighter than its noise. Simulated on
# the H200's cells at three times their noise, from three runs a cell, the whole d0 failed 1.6 unchanged
# runs in 1,000 and half of it 0.6 (dev/bench_pooling.py); at their own noise both stay under 0.3
PRIOR_DOF_SHARE = 0.5
GROUPS, COVARIATE, COMMON = "by model", "by the other GPU models' noise", "one level"


@dataclass(frozen=True)
class NoisePrior:
    """The prior of the cells' run-to-run variances: d0 and, per cell, s0."""

    dof: int  # what a cell borrows: PRIOR_DOF_SHARE of d0, floored to whole degrees of freedom
    scale: Mapping[str, float]  # each cell's s0, an sd of ln(value)
    cells: int  # cells it was fitted from
    trend: str  # what s0 follows: GROUPS, COVARIATE or COMMON

    def posterior_sd(self, cell: str, sd: float, dof: int) -> float:
        """The shrunk sd of `cell` whose own runs give `sd` on `dof` degrees of freedom."""
        return posterior_sd(sd * sd * dof, dof, self.dof, self.scale[cell])

    def describe(self) -> str:
        return f"pooled over {self.cells} cells ({self.trend}, {self.dof} degrees of freedom)"


def posterior_sd(m2: float, dof: int, prior_dof: int, prior_sd: float) -> float:
    """sqrt((d s^2 + d0 s0^2) / (d + d0)) of runs whose squared deviations sum to `m2` on `dof` degrees of
    freedom, pooled with a prior of `prior_dof` degrees of freedom about `prior_sd`."""
    return math.sqrt((m2 + prior_dof * prior_sd * prior_sd) / (dof + prior_dof))


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x, by Newton's method from limma's starting point."""
    from scipy.special import polygamma

    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1.0 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def _design(cells: list[str], groups: Mapping[str, str], covariates: Mapping[str, float]
            ) -> tuple[str, list[str], np.ndarray]:
    """The prior's trend and its columns: a level per group where every cell's group has MIN_GROUP_CELLS
    cells (and a degree of freedom is left over each level), else a line in the covariate where every
    cell has one, else one level."""
    labels = [groups.get(c, "") for c in cells]
    names = sorted(set(labels))
    if (len(names) > 1 and all(labels.count(g) >= MIN_GROUP_CELLS for g in names)
            and len(cells) - len(names) >= MIN_GROUP_CELLS):
        return GROUPS, names, np.array([[1.0 if label == g else 0.0 for g in names] for label in labels])
    x = [covariates.get(c, math.nan) for c in cells]
    if len(cells) >= MIN_COVARIATE_CELLS and all(math.isfinite(v) for v in x) and np.ptp(x) > 0:
        return COVARIATE, [], np.column_stack([np.ones(len(cells)), x])
    return COMMON, [], np.ones((len(cells), 1))


def fit_prior(variances: Mapping[str, tuple[float, int]], groups: Mapping[str, str] | None = None,
              covariates: Mapping[str, float] | None = None) -> NoisePrior | None:
    """The prior of `variances` (per cell: its sample variance of ln(value) and its degrees of freedom):
    log s0^2 at a level of each of `groups` (per cell: its model), or a line in `covariates` (per cell:
    ln of its noise's variance elsewhere), or one level (``_design``). None where fewer than MIN_CELLS
    cells have a positive variance on a degree of freedom or more, or where their variances differ so
    much that the prior would hold less than one degree of freedom: nothing to pool."""
    from scipy.special import digamma, polygamma

    groups, covariates = groups or {}, covariates or {}
    cells = sorted(c for c, (s2, d) in variances.items() if d >= 1 and s2 > 0 and math.isfinite(s2))
    if len(cells) < MIN_CELLS:
        return None
    d = np.array([float(variances[c][1]) for c in cells])
    # log s^2 less its expectation's offset: an unbiased estimate of log sigma^2 for each cell
    e = np.log([variances[c][0] for c in cells]) - digamma(d / 2) + np.log(d / 2)
    trend, names, design = _design(cells, groups, covariates)
    coef, *_ = np.linalg.lstsq(design, e, rcond=None)
    residual = e - design @ coef
    excess = float(residual @ residual) / (len(cells) - design.shape[1]) - float(np.mean(polygamma(1, d / 2)))
    d0 = min(2.0 * _trigamma_inverse(excess) if excess > 0 else math.inf, MAX_PRIOR_DOF)
    lent = int(d0 * PRIOR_DOF_SHARE)
    if lent < 1:
        return None
    offset = float(digamma(d0 / 2) - math.log(d0 / 2))
    # every cell gets its s0, one whose runs have not spread yet (s^2 = 0) too, where the trend places it
    if trend == GROUPS:
        at = {g: float(b) for g, b in zip(names, coef)}
        level = {c: at[groups[c]] for c in variances if groups.get(c) in at}
    elif trend == COVARIATE:
        level = {c: float(coef[0] + coef[1] * v) for c, v in covariates.items() if math.isfinite(v)}
    else:
        level = {c: float(coef[0]) for c in variances}
    scale = {c: math.sqrt(math.exp(v + offset)) for c, v in level.items()}
    return NoisePrior(lent, scale, len(cells), trend)


def group_of(test_id: str) -> str:
    """The group a cell's noise is pooled with first: its test and model ('test_speed[gpt-amp_fp16]' and
    'test_speed[gpt-bf16]' share 'test_speed:gpt'), since a model's step sets how far its runs wander."""
    name, _, inside = test_id.partition("[")
    return f"{name}:{inside.split('-')[0].rstrip(']')}"


def card_spread(replays: Iterable[Replay]) -> tuple[float, int] | None:
    """The sd of a card's offset from another card's level, pooled over every cell whose runs of its
    current level lie on more than one card: each other card's mean against the card of most runs, less
    what the cells' run-to-run noise explains of it (one-way random effects by moments, over all cells
    at once). A run the gate failed is left out; a run held back is not, since a card that lies off is
    what this learns, and one run of a second card lying 0.3-0.5% off is held back as a stray. The sd and
    the offsets behind it; None where no cell has runs on two cards."""
    total, offsets = 0.0, 0
    for replay in replays:
        by_card: dict[Hashable, list[float]] = {}
        for status in replay.statuses:
            if status.segment == replay.segment and status.state not in (FAILED, EXCLUDED):
                by_card.setdefault(replay.points[status.index].card, []).append(
                    math.log(replay.points[status.index].value))
        if len(by_card) < 2:
            continue
        noise = replay.model.sigma_w if replay.model.sigma_w is not None else replay.model.sigma
        major = max(by_card.values(), key=len)
        for runs in by_card.values():
            if runs is major:
                continue
            offset = sum(runs) / len(runs) - sum(major) / len(major)
            total += offset ** 2 - (noise or 0.0) ** 2 * (1 / len(runs) + 1 / len(major))
            offsets += 1
    return (math.sqrt(max(0.0, total / offsets)), offsets) if offsets else None


# -- what a GPU model with few cells or one card borrows from the other GPU models' files ---------------

TRANSFER = "by the other GPU models' files"
# the other files' cells a transfer needs beside this GPU model's own, and the residual degrees of
# freedom its d0 must rest on
MIN_TRANSFER_RESIDUALS = 2


def transfer_prior(variances: Mapping[str, tuple[float, int]],
                   elsewhere: Mapping[str, Mapping[str, tuple[float, int]]]) -> NoisePrior | None:
    """The prior of a GPU model whose own cells are too few to fit one (``fit_prior``): each cell's noise
    relative to the others', as the other GPU models' files hold it, scaled to this model's own cells.

    `variances`: this model's cells (sample variance of ln(value), degrees of freedom); `elsewhere`: per
    other file, its cells' (variance, degrees of freedom). log sigma^2 of cell c on file f is taken as
    a_f + g_c (a file's level, a cell's relative noise), fitted by least squares over every file's cells and
    this model's own; d0 is what the residuals earn beyond their sampling spread, as ``fit_prior`` fits it.
    None where no cell of this model is on another file, or too few residuals are left to fit d0."""
    from scipy.special import digamma, polygamma

    tables = {**{f"file{k}": dict(v) for k, v in enumerate(elsewhere.values())}, "": dict(variances)}
    rows = [(f, c, s2, d) for f, table in tables.items() for c, (s2, d) in table.items()
            if d >= 1 and s2 > 0 and math.isfinite(s2)]
    files = sorted({f for f, *_ in rows})
    cells = sorted({c for _, c, *_ in rows})
    own = [c for f, c, *_ in rows if f == ""]
    others = {c for f, c, *_ in rows if f != ""}
    if not own or not others.intersection(own) or len(files) < 2:
        return None
    residual_dof = len(rows) - (len(files) + len(cells) - 1)
    if residual_dof < MIN_TRANSFER_RESIDUALS:
        return None
    d = np.array([float(r[3]) for r in rows])
    e = np.log([r[2] for r in rows]) - digamma(d / 2) + np.log(d / 2)
    design = np.zeros((len(rows), len(files) + len(cells) - 1))
    for i, (f, c, *_) in enumerate(rows):
        design[i, files.index(f)] = 1.0
        if cells.index(c):  # the first cell's effect is the base level
            design[i, len(files) + cells.index(c) - 1] = 1.0
    coef, *_ = np.linalg.lstsq(design, e, rcond=None)
    residual = e - design @ coef
    excess = float(residual @ residual) / residual_dof - float(np.mean(polygamma(1, d / 2)))
    d0 = min(2.0 * _trigamma_inverse(excess) if excess > 0 else math.inf, MAX_PRIOR_DOF)
    lent = int(d0 * PRIOR_DOF_SHARE)
    if lent < 1:
        return None
    offset = float(digamma(d0 / 2) - math.log(d0 / 2))
    here = float(coef[files.index("")])
    effect = {c: (float(coef[len(files) + k - 1]) if k else 0.0) for k, c in enumerate(cells)}
    scale = {c: math.sqrt(math.exp(here + effect[c] + offset)) for c in cells}
    return NoisePrior(lent, scale, len(own), TRANSFER)


# the card term of a GPU model whose runs all came from one card, where no other GPU model's file beside
# its file holds one: the shipped H200 file's term pooled over its cells (0.32% on 57 card offsets,
# docs/design.md), held on few degrees of freedom, as a guess is
DEFAULT_CARD_SD, DEFAULT_CARD_DOF = 0.0032, 4
CARD_MEASURED, CARD_FROM_FILES, CARD_DEFAULT = "measured", "the other GPU models' files", "default"


@dataclass(frozen=True)
class CardTerm:
    """How far another card of the model lies from a level beyond the run-to-run spread, and where that
    comes from: measured on the history's cards, the other GPU models' files, or DEFAULT_CARD_SD."""

    sd: float
    dof: int
    source: str  # CARD_MEASURED, CARD_FROM_FILES or CARD_DEFAULT


def card_term(replays: Sequence[Replay], files: Iterable[Iterable[tuple[float, int | None]]]) -> CardTerm | None:
    """The card term of a GPU model's cells for a card they never ran on: measured where the runs of a
    cell lie on two cards or more (``card_spread``); else, where every counted run came from one card, the
    other GPU models' `files`' (``card_prior``); None where no cell has a counted run."""
    measured = card_spread(replays)
    if measured is not None:
        return CardTerm(measured[0], measured[1], CARD_MEASURED)
    if not any(r.counted_runs() for r in replays):
        return None
    return card_prior(files)


def card_prior(files: Iterable[Iterable[tuple[float, int | None]]]) -> CardTerm:
    """The card term of a GPU model whose runs came from one card: the other files' (each its entries'
    (between_card_sd, between_card_dof)), pooled by their degrees of freedom; DEFAULT_CARD_SD where none
    holds one. A file's term pooled over its cells repeats in each entry: each file counts once, its
    mean variance on its largest dof (an entry that kept no dof counts one)."""
    total = dof = 0.0
    for entries in files:
        terms = [(sd, d) for sd, d in entries if sd > 0 and math.isfinite(sd)]
        if not terms:
            continue
        file_dof = max(d or 1 for _, d in terms)
        total += file_dof * sum(sd * sd for sd, _ in terms) / len(terms)
        dof += file_dof
    if not dof:
        return CardTerm(DEFAULT_CARD_SD, DEFAULT_CARD_DOF, CARD_DEFAULT)
    return CardTerm(math.sqrt(total / dof), int(dof), CARD_FROM_FILES)
