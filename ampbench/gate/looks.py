"""The sequential test's rule: when a judged figure has seen rounds enough. A group-sequential sign test on
the median of its rounds.

A judged ratio is looked at after its first rounds and again at fixed numbers of rounds after (LOOKS),
until its interval lies wholly on one side of its line or it reaches its limit of rounds or seconds. Each
look has its own order-statistic bounds: the pass bound is the a-th lowest aligned round, the regression
bound the a-th highest, a chosen so that, were the rounds' median exactly on the line, the bound would
cross it with at most the error that look may spend (P(Binomial(n, 1/2) <= a - 1), distribution-free as
the fixed-size interval is, ``stats.median_interval_ranks``). What the looks may spend is an alpha-spending
function of the rounds taken (Lan and DeMets 1983; the power family alpha t^rho of Kim and DeMets 1987),
with t the rounds over the limit: whatever a look leaves unspent (its bounds are discrete) the next may
take, and the errors of all looks together stay within alpha by the union bound, however many looks
the cell takes.

The two sides spend apart. A false regression is what the suite must not produce: its side spends
REGRESSION_ALPHA (1%, one-sided) in all, and a regression must be confirmed by a second, independent
set of rounds that spends as much again, so a run on its line fails by the rounds' chance at most 1 time in
10,000. A false pass lets a real regression of one run through, where later runs and the history still
catch it; its side spends PASS_ALPHA (5%), most of it at the first look, so that a clear pass stops after
FIRST_LOOK rounds (all of them above the line), which no regression decision can (2^-5 > 1%).

This is the rule alone (`schedule`, and `verdict_at`, what each look decides); the loop that drives a
clock look by look is the speed cell's (``speed.sequential``).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from ampbench.stats import SpeedupEstimate
from ampbench.verdict import SpeedupCheck, Verdict

# the rounds of a judged ratio at which it is looked at, after its first look
LOOKS = (8, 12, 16, 20, 24, 32, 40, 48)
FIRST_LOOK = 5  # the fewest rounds of a first look: all 5 above the line pass with error 2^-5
PASS_ALPHA, PASS_RHO = 0.05, 0.15  # what the pass bounds spend in all, and how soon (alpha t^rho)
REGRESSION_ALPHA, REGRESSION_RHO = 0.01, 0.5
# A reported figure judged against a baseline is looked at after this many rounds first: all of them above
# its line ([min, max] of 4 rounds, 87.5%) is a pass, and the rest of its rounds are not taken
REPORTED_FIRST_LOOK = 4


@dataclass(frozen=True)
class Look:
    """The bounds of one look: a pass where the `pass_rank`-th lowest round lies above the line, a
    regression where the `regression_rank`-th highest lies below it (None: this look cannot decide that
    side), each with the error it spends."""

    rounds: int
    pass_rank: int | None
    regression_rank: int | None
    pass_error: float
    regression_error: float

    @property
    def confidence(self) -> float:
        """The coverage of the interval between the two bounds (a side that cannot decide: its extreme)."""
        return 1.0 - self.pass_error - self.regression_error

    def bounds(self, values: Sequence[float]) -> tuple[float, float]:
        """(low, high) of `values` (ln ratios, e.g. aligned rounds) at this look."""
        ordered = sorted(values)
        if len(ordered) != self.rounds:
            raise ValueError(f"a look at {self.rounds} rounds was given {len(ordered)}")
        low = ordered[(self.pass_rank or 1) - 1]
        high = ordered[len(ordered) - (self.regression_rank or 1)]
        return low, high


def below(n: int, k: int) -> float:
    """P(Binomial(n, 1/2) <= k): the chance that k or fewer of n rounds lie below their median."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def _rank(n: int, allowance: float) -> tuple[int | None, float]:
    """The largest rank whose bound errs at most `allowance` with n rounds, and its error."""
    rank, error = None, 0.0
    k = 0
    while k < n // 2 and (p := below(n, k)) <= allowance:
        rank, error = k + 1, p
        k += 1
    return rank, error


@lru_cache(maxsize=64)
def schedule(first: int = FIRST_LOOK, limit: int = LOOKS[-1]) -> tuple[Look, ...]:
    """The looks of a judged ratio whose first look is after `first` rounds and which takes at most
    `limit`, each side spending its alpha as its spending function allows, what one look leaves
    unspent carried to the next."""
    if first < FIRST_LOOK:
        raise ValueError(f"the first look needs at least {FIRST_LOOK} rounds, got {first}")
    limit = max(limit, first)
    sizes = (first, *(n for n in LOOKS if first < n <= limit))
    if sizes[-1] != limit:
        sizes = (*sizes, limit)
    looks, spent_pass, spent_regression = [], 0.0, 0.0
    for n in sizes:
        t = n / limit
        pass_rank, pass_error = _rank(n, PASS_ALPHA * t ** PASS_RHO - spent_pass)
        regression_rank, regression_error = _rank(n, REGRESSION_ALPHA * t ** REGRESSION_RHO - spent_regression)
        spent_pass += pass_error
        spent_regression += regression_error
        looks.append(Look(n, pass_rank, regression_rank, pass_error, regression_error))
    return tuple(looks)


def errors(looks: Sequence[Look]) -> tuple[float, float]:
    """What a schedule spends in all: (false pass, false regression), each by the union bound."""
    return sum(look.pass_error for look in looks), sum(look.regression_error for look in looks)


def verdict_at(check: SpeedupCheck, est: SpeedupEstimate, look: Look | None) -> Verdict:
    """`check`'s verdict of `est`, an estimate taken at `look` (None: over all of a timer's rounds, a
    fixed-size interval): a side the look cannot decide (too few rounds for its error) is no verdict there."""
    verdict = check.classify(est)
    if look is not None and ((verdict is Verdict.REGRESSION and look.regression_rank is None) or (
            verdict in (Verdict.PASS, Verdict.IMPROVED) and look.pass_rank is None)):
        return Verdict.INCONCLUSIVE
    return verdict
