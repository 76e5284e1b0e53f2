"""The operating characteristic of `ampbench ab`'s paired statistic (``ampbench.ab.paired``), simulated, against
a paired t on the pairs' log ratios alone and an exact Wilcoxon signed-rank test (as Chromium's Pinpoint).

Each simulated run's ln(value) is the cell's level, plus a between-process draw (sd tau), plus its own
error (sd `within`, which the run also states, itself estimated from ~10 rounds' worth), plus, 1 run in
50, a stray offset of -1% to -3%; the head's runs are `drop` lower. A cell takes pairs until a look decides
it or `max_pairs` run out, every candidate at the same alpha-spending schedule (``ab.paired.pair_schedule``).

    python dev/bench_paired.py              # the tables of docs/design.md, "Paired A/B" (~1 min)
    python dev/bench_paired.py --cells 5000 # quicker, coarser
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import t as student  # noqa: E402

from ampbench.ab.paired import (  # noqa: E402
    MAX_PAIRS,
    PAIRED_REGRESSION_RHO,
    RUN_SD_DOF,
    SPEEDUP_RULE,
    Pair,
    PairRule,
    RunValue,
    judge_pairs,
    pair_schedule,
)
from ampbench.stats import t_quantile  # noqa: E402

WITHIN = (0.0002, 0.0005, 0.001, 0.003)  # each run's own sd of ln(value)
TAU = (0.0, 0.0005, 0.001, 0.002)  # between-process sd of ln(value)
DROPS = (0.0, 0.001, 0.0025, 0.003, 0.005, 0.01, 0.02)
STRAY_RATE, STRAY_RANGE = 1 / 50, (0.01, 0.03)
SD_DOF = 10  # a run's stated sd is estimated: chi-square on this many dof
# (within, tau) of a quiet cell (gpt-like), a middling one and a noisy one (lstm_lm-like)
QUIET, MIDDLING, NOISY = (0.0005, 0.0005), (0.001, 0.001), (0.003, 0.001)

PASS, INCONCLUSIVE, REGRESSION = 1, 0, -1


@dataclass(frozen=True)
class Cells:
    """Simulated pairs of many cells: oriented log ratios d and each pair's stated within variance."""

    d: np.ndarray  # (cells, max_pairs)
    within_var: np.ndarray  # (cells, max_pairs)


def simulate(rng: np.random.Generator, n: int, within: float, tau: float, drop: float, max_pairs: int,
             strays: bool = True) -> Cells:
    shape = (n, max_pairs)

    def run() -> tuple[np.ndarray, np.ndarray]:
        value = tau * rng.standard_normal(shape) + within * rng.standard_normal(shape)
        if strays:
            hit = rng.random(shape) < STRAY_RATE
            value -= hit * rng.uniform(*STRAY_RANGE, shape)
        stated = within * np.sqrt(rng.chisquare(SD_DOF, shape) / SD_DOF)
        return value, stated

    base, base_sd = run()
    head, head_sd = run()
    return Cells(head + math.log1p(-drop) - base, base_sd ** 2 + head_sd ** 2)


# A candidate: (cells, look index n, its errors) -> (low, high) of the mean oriented log ratio, or None
Bounds = Callable[[Cells, int, float, float], "tuple[np.ndarray, np.ndarray] | None"]


def combined(rule: PairRule, floored: bool = False, welch: bool = True, robust_regression: bool = True) -> Bounds:
    """ab.paired's statistic, vectorized (checked against judge_pairs below). `floored`: the moderated
    total variance floored at the runs' own, instead of the between part on top of the runs' own;
    `welch`=False: Student's t on the between part's dof alone, not Welch-Satterthwaite's."""
    def bounds(c: Cells, n: int, pass_error: float, regression_error: float):
        d = c.d[:, :n]
        mean, within = d.mean(1), c.within_var[:, :n].mean(1)
        prior = 2 * rule.prior_sd ** 2
        between_dof = rule.prior_dof + n - 1
        if n < 2 or math.isinf(rule.prior_dof):
            var = within + prior
        else:
            s2 = d.var(1, ddof=1)
            if floored:
                var = np.maximum(within, (rule.prior_dof * (within + prior) + (n - 1) * s2) / between_dof)
            else:
                var = within + (rule.prior_dof * prior + (n - 1) * np.maximum(s2 - within, 0)) / between_dof
        between = var - within
        with np.errstate(divide="ignore", invalid="ignore"):
            dof = var ** 2 / (within ** 2 / (2 * n * RUN_SD_DOF) + between ** 2 / between_dof)
        dof = np.where(np.isfinite(dof), dof, 1e9)
        se = np.sqrt(var / n)
        pass_dof = dof if welch else between_dof
        regression_dof = dof if welch and not robust_regression else np.where(between > 0, between_dof, dof)
        return (mean - student.ppf(1 - pass_error, pass_dof) * se,
                mean + student.ppf(1 - regression_error, regression_dof) * se)
    return bounds


def paired_t(c: Cells, n: int, pass_error: float, regression_error: float):
    """Student's t on the pairs' log ratios alone, n - 1 dof: nothing before two pairs."""
    if n < 2:
        return None
    d = c.d[:, :n]
    se = d.std(1, ddof=1) / math.sqrt(n)
    mean = d.mean(1)
    return mean - t_quantile(pass_error, n - 1) * se, mean + t_quantile(regression_error, n - 1) * se


def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(W+ <= w) under the null, w = 0 .. n(n+1)/2, by counting the 2^n sign patterns."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    for signs in itertools.product((0, 1), repeat=n):
        counts[sum(r for r, s in zip(range(1, n + 1), signs) if s)] += 1
    return np.cumsum(counts) / 2 ** n


def wilcoxon(per_look_alpha: float | None = None) -> Bounds:
    """The exact signed-rank test of each side against the line, read as bounds: a side decides where its
    one-sided p-value is within the look's error (or `per_look_alpha` at every look, as Pinpoint's fixed
    threshold); the bound returned is then just past the line."""
    def bounds(c: Cells, n: int, pass_error: float, regression_error: float, tol: float = SPEEDUP_RULE.tolerance):
        if n < 2:
            return None
        x = c.d[:, :n] - math.log1p(-tol)  # distance above the line
        ranks = np.argsort(np.argsort(np.abs(x), 1), 1) + 1
        w_plus = (ranks * (x > 0)).sum(1)
        cdf, total = _signed_rank_cdf(n), n * (n + 1) // 2
        p_below = cdf[w_plus]  # few positive: median below the line
        p_above = cdf[total - w_plus]
        a_pass, a_reg = (per_look_alpha, per_look_alpha) if per_look_alpha else (pass_error, regression_error)
        eps = 1e-9
        low = np.where(p_above <= a_pass, eps, -1.0)
        high = np.where(p_below <= a_reg, -eps, 1.0)
        return low + math.log1p(-tol), high + math.log1p(-tol)
    return bounds


def decide(c: Cells, bounds: Bounds, max_pairs: int, tol: float, rho: float = PAIRED_REGRESSION_RHO
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(final verdict, pairs used, verdict by look (cells, looks)) of every cell."""
    n_cells = c.d.shape[0]
    verdict = np.zeros(n_cells, dtype=int)
    used = np.full(n_cells, max_pairs)
    open_ = np.ones(n_cells, dtype=bool)
    by_look = np.zeros((n_cells, max_pairs), dtype=int)
    line = math.log1p(-tol)
    for look in pair_schedule(max_pairs, rho):
        b = bounds(c, look.pairs, look.pass_error, look.regression_error)
        if b is not None:
            low, high = b
            now = np.where((high < line) & look.can_fail, REGRESSION, np.where(low >= line, PASS, INCONCLUSIVE))
            new = open_ & (now != INCONCLUSIVE)
            verdict[new], used[new] = now[new], look.pairs
            open_ &= ~new
        by_look[:, look.pairs - 1] = verdict
    return verdict, used, by_look


def check_against_module(rng: np.random.Generator, cells: int = 300) -> None:
    """The vectorized statistic agrees with judge_pairs, pair for pair and look for look."""
    c = simulate(rng, cells, 0.0005, 0.001, 0.004, MAX_PAIRS)
    _, _, by_look = decide(c, combined(SPEEDUP_RULE), MAX_PAIRS, SPEEDUP_RULE.tolerance)
    for i in range(cells):
        verdict = INCONCLUSIVE
        for n in range(1, MAX_PAIRS + 1):
            sds = [math.sqrt(c.within_var[i, k] / 2) for k in range(n)]  # only the pair's sum counts
            pairs = [Pair(RunValue(1.0, sds[k]), RunValue(math.exp(c.d[i, k]), sds[k])) for k in range(n)]
            v = judge_pairs(pairs, SPEEDUP_RULE, MAX_PAIRS, model="m", mode="amp", figure="f", source="base").verdict
            verdict = {"regression": REGRESSION, "pass": PASS, "improved": PASS}.get(v.value, INCONCLUSIVE)
            if verdict != INCONCLUSIVE:
                break
        assert verdict == by_look[i, -1], (i, verdict, by_look[i])


def candidates() -> dict[str, tuple[Bounds, float]]:
    """name: (bounds, rho of the regression side's spending)."""
    rule, rho = SPEEDUP_RULE, PAIRED_REGRESSION_RHO
    return {
        f"ab.paired: prior {rule.prior_sd:.2%} x {rule.prior_dof:g} dof, rho {rho:g}": (combined(rule), rho),
        "  rho 0.5": (combined(rule), 0.5),
        "  rho 2": (combined(rule), 2.0),
        "  Welch-Satterthwaite dof at both ends": (combined(rule, robust_regression=False), rho),
        "  the between part's dof at both ends": (combined(rule, welch=False), rho),
        "  total variance floored at the runs' own": (combined(rule, floored=True), rho),
        "  prior 8 dof": (combined(replace(rule, prior_dof=8.0)), rho),
        "  prior 16 dof": (combined(replace(rule, prior_dof=16.0)), rho),
        "  prior known (inf dof)": (combined(replace(rule, prior_dof=math.inf)), rho),
        f"  prior {2 * rule.prior_sd:.3%}": (combined(replace(rule, prior_sd=2 * rule.prior_sd)), rho),
        f"  prior {rule.prior_sd / 2:.3%}": (combined(replace(rule, prior_sd=rule.prior_sd / 2)), rho),
        "runs' own sd only (no between part)": (combined(replace(rule, prior_sd=0.0, prior_dof=math.inf)), rho),
        "paired t, n - 1 dof": (paired_t, rho),
        "Wilcoxon signed-rank, same spending": (wilcoxon(), rho),
        "Wilcoxon signed-rank, 5% per look": (wilcoxon(0.05), rho),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", type=int, default=40000, help="A/A cells per noise level (default 40000)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    tol = SPEEDUP_RULE.tolerance
    check_against_module(rng)
    grid = list(itertools.product(WITHIN, TAU))

    print(f"Candidates, speedup tolerance {tol:.2%}, at most {MAX_PAIRS} pairs, {len(grid)} noise levels "
          f"(within {', '.join(f'{w:.2%}' for w in WITHIN)} x tau {', '.join(f'{t:.2%}' for t in TAU)}), "
          f"1 run in 50 a stray; {args.cells} A/A cells per level")
    print(f"{'candidate':55s} {'A/A fail':>9s} {'worst':>8s} {'1st look':>9s} {'pairs':>6s} "
          f"{'quiet:.5%':>9s} {'1%':>6s} {'2%':>6s} {'pass .3%':>8s} {'mid:1%':>7s} {'noisy:1%':>9s}")
    for name, (bounds, rho) in candidates().items():
        fails, firsts, pairs, worst = [], [], [], 0.0
        for within, tau in grid:
            v, used, _ = decide(simulate(rng, args.cells, within, tau, 0.0, MAX_PAIRS), bounds, MAX_PAIRS, tol, rho)
            fails.append(np.mean(v == REGRESSION))
            firsts.append(np.mean((used == 1) & (v != INCONCLUSIVE)))
            pairs.append(used.mean())
            worst = max(worst, fails[-1])
        power = {}
        for label, (within, tau), drop in (("q.5", QUIET, 0.005), ("q1", QUIET, 0.01), ("q2", QUIET, 0.02),
                                           ("q.3", QUIET, 0.003), ("m1", MIDDLING, 0.01), ("n1", NOISY, 0.01)):
            v, _, _ = decide(simulate(rng, args.cells // 4, within, tau, drop, MAX_PAIRS), bounds, MAX_PAIRS, tol,
                             rho)
            power[label] = np.mean(v == PASS) if label == "q.3" else np.mean(v == REGRESSION)
        print(f"{name:55s} {np.mean(fails):9.5f} {worst:8.5f} {np.mean(firsts):9.1%} {np.mean(pairs):6.2f} "
              f"{power['q.5']:9.1%} {power['q1']:6.1%} {power['q2']:6.1%} {power['q.3']:8.1%} {power['m1']:7.1%} "
              f"{power['n1']:9.1%}")

    chosen = combined(SPEEDUP_RULE)
    print("\nab.paired by noise level (A/A): false failures, decided at the first look, mean pairs")
    print(f"{'within':>7s} " + " ".join(f"{'tau ' + format(t, '.2%'):>24s}" for t in TAU))
    for within in WITHIN:
        row = []
        for tau in TAU:
            v, used, _ = decide(simulate(rng, args.cells, within, tau, 0.0, MAX_PAIRS), chosen, MAX_PAIRS, tol)
            row.append(f"{np.mean(v == REGRESSION):8.5f} {np.mean((used == 1) & (v != INCONCLUSIVE)):6.1%} "
                       f"{used.mean():4.2f}  ")
        print(f"{within:7.2%} " + " ".join(f"{r:>24s}" for r in row))

    for label, (within, tau) in (("quiet cell (gpt-like)", QUIET), ("middling cell", MIDDLING),
                                 ("noisy cell (lstm_lm-like)", NOISY)):
        print(f"\nab.paired, {label}: within {within:.2%}, tau {tau:.2%}; chance of a failure by true drop and "
              f"pairs ({MAX_PAIRS} at most), then of a pass, an inconclusive end, and mean pairs")
        print(f"{'drop':>6s} " + " ".join(f"{'<=' + str(n):>7s}" for n in range(1, MAX_PAIRS + 1))
              + f" {'pass':>7s} {'inconcl':>7s} {'pairs':>6s}")
        for drop in DROPS:
            n = args.cells if drop == 0 else args.cells // 4
            v, used, by_look = decide(simulate(rng, n, within, tau, drop, MAX_PAIRS), chosen, MAX_PAIRS, tol)
            cum = " ".join(f"{np.mean(by_look[:, k] == REGRESSION):7.4f}" for k in range(MAX_PAIRS))
            print(f"{drop:6.2%} {cum} {np.mean(v == PASS):7.1%} {np.mean(v == INCONCLUSIVE):7.1%} "
                  f"{used.mean():6.2f}")

    print("\nab.paired by max pairs (each its own schedule), quiet cell: chance of a failure by true drop")
    sizes = (3, 6, 10)
    print(f"{'drop':>6s} " + " ".join(f"{'max ' + str(m):>8s}" for m in sizes))
    for drop in DROPS:
        n = args.cells if drop == 0 else args.cells // 4
        cells = [decide(simulate(rng, n, *QUIET, drop, m), chosen, m, tol)[0] for m in sizes]
        print(f"{drop:6.2%} " + " ".join(f"{np.mean(v == REGRESSION):8.4f}" for v in cells))


if __name__ == "__main__":
    main()
