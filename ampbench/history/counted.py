"""The runs of one series a replay has taken so far (``replay.Replay``), and the model of those that count
(``model.fit``): each card's level and the noise a new run is held to, floored by the runs' robust scale
for the replay's decisions. What counts is the replay's to decide; this keeps the tally."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Hashable

import numpy as np

from ampbench.baselines.spread import Prior
from ampbench.history.model import Fit, Moments, Prediction, fit
from ampbench.history.series import Point, Series
from ampbench.history.statuses import EXCLUDED, FAILED, Status

# the fewest runs of a segment whose successive differences give a robust scale (``robust_scale``)
ROBUST_RUNS = 5
MAD_TO_SD = 1.482602218505602  # a normal's sd over its median absolute deviation, 1 / Phi^-1(3/4)


class CountedRuns:
    """The series' runs taken so far, their statuses, and the model of the counted ones."""

    def __init__(self, series: Series, prior: Prior | None = None, robust: bool = True):
        self.series = series  # its name and figure; `points` grows as runs are fed
        self.prior = prior
        self.robust = robust  # the runs' robust scale floors the noise of the replay's decisions
        self.points: list[Point] = []
        self.statuses: list[Status] = []
        self.segment = 0
        self.pending: list[int] = []  # held-back runs of the current segment, not cleared
        self._logs: list[float] = []
        self._shift: float | None = None
        self._groups: dict[tuple[int, Hashable], Moments] = {}
        self._fit: Fit | None = None
        self._robust: dict[bool, float] = {}

    # -- the model of the runs counted so far ------------------------------------------------------------

    @property
    def model(self) -> Fit:
        if self._fit is None:
            self._fit = fit(self._groups, self.segment, self.prior)
        return self._fit

    def predict(self, card: Hashable, whole: bool = False) -> Prediction | None:
        """The model's prediction for a new run on `card` (levels shifted; ``level`` gives ln), its sd at
        least the runs' own robust scale (``robust_scale``, of the `whole` segment) for the replay's
        decisions."""
        pred = self.model.predict(card)
        robust = self.robust_scale(whole) if self.robust else 0.0
        if pred is None or pred.sd is None or pred.noise_sd is None or robust <= pred.noise_sd:
            return pred
        grown = math.sqrt(pred.sd ** 2 + robust ** 2 - pred.noise_sd ** 2)
        return replace(pred, sd=grown, noise_sd=robust)

    def robust_scale(self, whole: bool = False) -> float:
        """How far the segment's runs move from one to the next, held back or not, up to its first failed
        run (or, `whole`, all of them): the median absolute deviation of successive differences of ln
        value, over sqrt 2 (0 with fewer than ROBUST_RUNS runs). A step moves one difference, a stray two, so
        neither sets it; where the counted runs by chance lie closer than the runs do (three runs within
        0.03% of a cell whose runs move by 0.25%), it keeps every later run from being held back as suspect
        for good. Up to the first failure for holding runs back (a step's runs, wider spread over the
        cards, must not widen what lets them in); the whole segment for failing a run with the runs held
        back, which must never rest on a noise narrower than the runs show."""
        if whole not in self._robust:
            logs = []
            for s in self.statuses:
                if s.segment != self.segment or s.state == EXCLUDED:
                    continue
                if s.state == FAILED and not whole:  # the gate said the level moved here
                    break
                logs.append(self._logs[s.index])
            self._robust[whole] = 0.0
            if len(logs) >= ROBUST_RUNS:
                diffs = np.diff(np.asarray(logs))
                # the MAD scaled to a normal's sd (``stats.robust_sd``), in numpy: the replay asks once a run
                self._robust[whole] = float(MAD_TO_SD * np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)
        return self._robust[whole]

    @property
    def _origin(self) -> float:
        """ln of the series' first value, by which the model's values are shifted: set once a run is fed,
        which any prediction follows."""
        assert self._shift is not None, "a prediction follows the first run fed"
        return self._shift

    def level(self, card: Hashable) -> float | None:
        """ln of `card`'s level in the current segment; None while it is learning."""
        pred = self.model.predict(card)
        return None if pred is None else pred.level + self._origin

    def deviation(self, index: int) -> float | None:
        """ln(value / its card's level) of run `index`, against the model as it stands now."""
        level = self.level(self.points[index].card)
        return None if level is None else self._logs[index] - level

    def _count(self, index: int) -> None:
        key = (self.statuses[index].segment, self.points[index].card)
        self._groups.setdefault(key, Moments()).add(self._logs[index] - self._origin)
        self._fit = None

    def _uncount(self, index: int) -> None:
        key = (self.statuses[index].segment, self.points[index].card)
        self._groups[key].remove(self._logs[index] - self._origin)
        self._fit = None

    def _members(self, start: int) -> list[int]:
        """The runs of the current segment from `start` on that are samples of the cell."""
        return [s.index for s in self.statuses[start:] if s.state != EXCLUDED and s.segment == self.segment]

    def counted_runs(self) -> list[int]:
        """The runs that count, in order."""
        return [s.index for s in self.statuses if s.counts]

    def as_series(self) -> Series:
        """The runs fed so far, as a series."""
        return Series(self.series.gpu, self.series.test_id, self.series.figure, tuple(self.points))
