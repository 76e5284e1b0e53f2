"""Change points in a cell's run history: where its figure moved to another level, and between which runs.

Two detectors, each as keen as it can be. The gate's own: where the history's replay (``replay``) holds
back runs that lie together below the level, two runs or more, the level moved at the first of them
(``Replay.moved_from``), as the verdicts that failed or held them back said; no penalty could find a step
the gate already failed sooner. And ruptures' PELT with an RBF kernel cost (``KernelCPD``, implemented
in C) on the ln values, each less its card's offset (``card_offsets``: moving to another card is
no step), scaled by the cell's noise, for every other step: an improvement, a step that came and went. The kernel bounds
what one run can cost a segment, so a stray run (a
throttled card, a busy host) cannot pay for a change of its own, as it can under the squared-error
(l2) cost; the l1 cost is as robust but ruptures computes it in Python, ~400 times slower. The noise
scale joins the learned spread (``learn``: the counted runs, each from its own level and card, none of
them held back by the step itself) with a robust scale of the series itself (the median absolute deviation of run-to-run
differences, which neither a
step nor a stray run sets), as the root mean square of the two. The learned spread swells with any
step among runs that count (an improvement passes its verdict): scaled by the larger of the two, +2% at
run 7 of 12 was missed 29 times in 100. The robust scale alone is so unsure in short series that its
penalty must be higher: it found a -1.5% step at run 5 of 8 45 times in 100, the mean square 97. The penalty
grows with the series' length as fitted by simulation (``dev/bench_changes.py --calibrate``): pure
noise of 8 to 60 runs with stray runs gives about 3 false changes per 10,000 series. A change needs
MIN_RUNS runs on each side: the newest run alone is the verdict's to judge.

Every point is looked at, counted or not: a run that failed its verdict is what a change looks like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from ampbench.baselines.spread import Prior
from ampbench.history.replay import Replay
from ampbench.history.series import Point, Series
from ampbench.stats import median, robust_sd

# the RBF kernel on noise-scaled values: exp(-gamma d^2) for two runs d sd apart, a bandwidth of 2 sd, so
# that a stray run costs a segment at most one unit; 0.5 lost nearly every 6-sd step between 4 runs and 4,
# 0.05 nearly half the 2-sd steps 0.25 finds (dev/bench_changes.py)
GAMMA = 0.125
MIN_RUNS = 2  # runs on each side of a change (ruptures' min_size)
# the penalty a change must pay, a + b ln(n) for a series of n runs (dev/bench_changes.py --calibrate);
# a series without a learned noise (no level holds two counted runs) is scaled by its own alone
PENALTY = (1.5, 0.5)
PENALTY_OWN_SCALE = (2.96, 0.1)
# below a tenth of a percent a step is too small to act on (the verdicts' floor is 0.5%), and a figure
# that never moves (a memory ratio) would otherwise make every rounding a change
NOISE_FLOOR = 0.001


@dataclass(frozen=True)
class Change:
    """A step in a cell's series: the level moved at point `index` (the first run after the change)."""

    series: Series
    index: int
    before: range  # the points of the segment before the change
    after: range  # the points of the segment after it
    level_before: float  # exp(median ln value) of each segment: a stray run does not move it
    level_after: float
    accepted: bool  # an accepted change (a restart) lies within a run of it

    @property
    def step(self) -> float:
        """Relative change of the level: -0.015 for a 1.5% drop."""
        return self.level_after / self.level_before - 1.0

    @property
    def run_before(self) -> Point:
        """The last run before the change."""
        return self.series.points[self.index - 1]

    @property
    def run_after(self) -> Point:
        """The first run after it."""
        return self.series.points[self.index]

    def __str__(self) -> str:
        return (f"{self.series.test_id} {self.series.figure}: {self.level_before:.4g} -> {self.level_after:.4g} "
                f"({self.step:+.2%}) between runs {self.run_before.run_id} and {self.run_after.run_id}"
                + (" (accepted)" if self.accepted else ""))


def penalty(n: int, shape: tuple[float, float] = PENALTY) -> float:
    """What a change must gain in a series of `n` runs (kernel cost units)."""
    a, b = shape
    return a + b * math.log(n)


def noise_scale(logs: Sequence[float], learned_sd: float | None) -> float:
    """The sd the detection scales ln values by: the root mean square of the learned spread and the
    series' own robust scale (run-to-run differences' MAD, over sqrt 2), the latter alone where no
    spread is learned; at least NOISE_FLOOR."""
    own = robust_sd(np.diff(np.asarray(logs, dtype=float))) / math.sqrt(2) if len(logs) > 2 else 0.0
    scale = own if learned_sd is None else math.sqrt((own * own + learned_sd * learned_sd) / 2)
    return max(scale, NOISE_FLOOR)


def change_points(logs: Sequence[float], scale: float, shape: tuple[float, float] = PENALTY) -> list[int]:
    """Indices of the first value after each change in `logs` (ln values) with noise `scale`."""
    import ruptures  # only `history changes` needs it

    n = len(logs)
    if n < 2 * MIN_RUNS:
        return []
    z = (np.asarray(logs, dtype=float) - median(logs)) / scale
    detector = ruptures.KernelCPD(kernel="rbf", params={"gamma": GAMMA}, min_size=MIN_RUNS, jump=1).fit(z)
    return [int(b) for b in detector.predict(pen=penalty(n, shape))[:-1]]


def find_changes(series: Series,
                 shape: tuple[float, float] | None = None, replay: Replay | None = None) -> list[Change]:
    """The changes in `series`, oldest first; `replay` (a ``learn.CellBaseline``'s, say) supplies the runs
    held back and the learned noise, else the series' own replay, settled as ``learn.learn`` settles it.
    `shape` overrides the penalty (calibration)."""
    logs = series.log_values()
    if replay is None:
        replay = settled(series)
    offsets = card_offsets(replay)
    adjusted = [y - offsets.get(p.card, 0.0) for y, p in zip(logs, series.points)]
    sd = replay.model.sigma
    cuts = change_points(adjusted, noise_scale(adjusted, sd),
                         shape or (PENALTY if sd is not None else PENALTY_OWN_SCALE))
    moved = replay.moved_from()
    # the gate's step, at its first moved run: it replaces a cut ruptures put beside it; a step at the first
    # run is none (a first run held back as a stray lies before no level)
    if moved is not None and moved > 0:
        cuts = sorted({c for c in cuts if abs(c - moved) > 1} | {moved})
    bounds = [0, *cuts, len(logs)]
    segments = [range(a, b) for a, b in zip(bounds, bounds[1:])]
    levels = [math.exp(median([adjusted[i] for i in seg])) for seg in segments]
    restarts = {i for i, p in enumerate(series.points) if p.restart}
    return [Change(series, cut, segments[k], segments[k + 1], levels[k], levels[k + 1],
                   bool(restarts & {cut - 1, cut, cut + 1}))
            for k, cut in enumerate(cuts)]


def card_offsets(replay: Replay) -> dict[Hashable, float]:
    """Each card's offset (ln) from the level of the segments it ran in, over `replay`'s counted runs,
    pulled toward 0 as the model pulls a card's level (tau^2 against sigma^2 / n): what to take out of a
    run's value so that moving to another card is no step."""
    model = replay.model
    if model.sigma_w is None or model.tau == 0.0:
        return {}
    counted = [(s.segment, replay.points[s.index].card, math.log(replay.points[s.index].value))
               for s in replay.statuses if s.counts]
    by_segment: dict[int, list[float]] = {}
    for segment, _, y in counted:
        by_segment.setdefault(segment, []).append(y)
    level = {seg: sum(ys) / len(ys) for seg, ys in by_segment.items()}
    residuals: dict[Hashable, list[float]] = {}
    for segment, card, y in counted:
        residuals.setdefault(card, []).append(y - level[segment])
    ratio = model.sigma_w ** 2 / model.tau ** 2
    return {card: sum(r) / (len(r) + ratio) for card, r in residuals.items()}


def settled(series: Series, prior: Prior | None = None) -> Replay:
    """`series` replayed, with what follows an unaccepted change held back (``settle``): what the gate
    judges a cell's next run against."""
    replay = Replay(series, prior)
    settle(replay)
    return replay


def settle(replay: Replay) -> Change | None:
    """Hold back what follows the first change of the current level segment that nobody accepted (a step
    ruptures finds below the gate's keenness, an improvement): the level and the noise learn from the runs
    before it, so that a step, however small, never becomes the level it is judged by, and never widens
    the noise it is judged with. The change, or None. Runs so held are cleared as suspect runs are, where
    later runs show the level held (``Replay``)."""
    series = replay.as_series()
    if len(series.points) < 2 * MIN_RUNS:
        return None
    start = next((s.index for s in replay.statuses if s.segment == replay.segment), len(series.points))
    moved = replay.moved_from()  # the gate's own step: its runs are held back already
    for change in find_changes(series, replay=replay):
        if change.index > start and not change.accepted and change.index != moved:
            why = (f"after the change at {change.run_after.run_id} ({change.step:+.2%}), which nobody accepted: "
                   "`ampbench history accept` makes its level the cell's")
            replay.withhold_from(change.index, why)
            return change
    return None
