"""Seasonality: a series that repeats every ``p`` samples (a checkpoint every N steps, a periodic batch
job) is not a series of change points. Its period is taken from its first ``learn`` samples and its
seasonal profile removed from every later sample, before the change detector sees it.

Per series (numpy rows): the first ``learn`` values are kept; then the autocorrelation of those values
(their least-squares line removed) at lags 2 .. ``learn // 3`` is computed and the period is the lag of
its highest peak, if that peak is a real one: higher than both neighbours, with a trough before it (an
AR process' autocorrelation only falls), and above ``4 / √learn`` (four standard errors of a white-noise
autocorrelation) and 0.3 (a pattern that explains less than a tenth of the variance is left in). The
profile is the mean of the values at each phase (sample count modulo the period), made to sum to zero,
and it keeps learning: each later value moves its phase's mean by 1/k (k: the values seen at that phase,
at most ``cycles``), so the profile's error shrinks and a slow change of the pattern is followed; every
value has its phase's profile subtracted, so the level is unchanged and a level shift, which moves every
phase alike, still shows. ``adjust`` says which series became seasonal in this call: the
change detector restarts them (what it learned included the pattern). Phases count samples, so the
series must be sampled regularly; a period longer than ``learn // 3`` samples (a diurnal cycle of 10-s
samples) is not found. State per series: ``learn`` values, ``learn // 3`` profile values and two ints.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streams.engine.detectors.lines import lag_products
from streams.engine.detectors.rolling_trend import around_line
from streams.engine.detectors.rows import with_rows

F = npt.NDArray[np.float64]
I = npt.NDArray[np.int64]  # noqa: E741
_NONE = np.zeros(0, np.int64)


def period_of(x: F) -> int:
    """The period of ``x`` (0: none), from the highest true peak of its autocorrelation."""
    n = len(x)
    r = around_line(x)
    products = lag_products(r, n // 3 + 2)
    var = float(products[0])
    if var <= n * (4 * np.finfo(np.float64).eps * float(np.abs(x).max())) ** 2:
        return 0  # (residuals no larger than the values' rounding: a line, and its rounding has no season)
    acf = products[1:] / var  # acf[k]: lag k + 1
    best, height = 0, max(0.3, 4 / math.sqrt(n))
    for k in range(1, len(acf) - 1):
        if acf[k] > height and acf[k] >= acf[k - 1] and acf[k] > acf[k + 1] and acf[:k].min() < acf[k] - height:
            best, height = k + 1, acf[k]
    return best


@dataclass
class Deseason:
    learn: int = 128
    cycles: int = 32
    _first: F = field(init=False, repr=False)  # the first ``learn`` values of each series
    _profile: F = field(init=False, repr=False)  # the mean of each phase
    _count: F = field(init=False, repr=False)  # values behind each phase's mean
    _period: I = field(init=False, repr=False)  # 0: none (or not yet known)
    _seen: I = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._first = np.zeros((0, self.learn))
        self._profile = np.zeros((0, self.learn // 3 + 1))
        self._count = np.zeros((0, self.learn // 3 + 1))
        self._period = np.zeros(0, np.int64)
        self._seen = np.zeros(0, np.int64)

    def grow(self, count: int) -> None:
        self._first = with_rows(self._first, count)
        self._profile = with_rows(self._profile, count)
        self._count = with_rows(self._count, count)
        self._period = with_rows(self._period, count)
        self._seen = with_rows(self._seen, count)

    def keep(self, rows: I) -> None:
        """Only the series of ``rows`` (ascending), numbered from 0 in that order."""
        self._first, self._profile, self._count = self._first[rows], self._profile[rows], self._count[rows]
        self._period, self._seen = self._period[rows], self._seen[rows]

    def adjust(self, rows: I, values: F) -> tuple[F, I]:
        """Each value (one per listed row, rows unique) without its seasonal part, and the rows whose
        period was found in this call."""
        seen = self._seen[rows]
        period = self._period[rows]
        out = self._deseasoned(rows, values, seen, period) if period.any() else values
        self._seen[rows] = seen + 1
        learning = seen < self.learn
        if not learning.any():
            return out, _NONE
        self._first[rows[learning], seen[learning]] = values[learning]
        found = []
        for row in rows[seen + 1 == self.learn].tolist():
            p = period_of(self._first[row])
            if p:
                self._period[row] = p
                x = self._first[row]
                self._profile[row, :p] = [x[k::p].mean() for k in range(p)]
                self._count[row, :p] = [len(x[k::p]) for k in range(p)]
                found.append(row)
        return out, np.array(found, np.int64)

    def _deseasoned(self, rows: I, values: F, seen: I, period: I) -> F:
        """Each value less its phase's part of its series' profile (series with a period), which learns it."""
        phase = np.where(period > 0, seen % np.maximum(period, 1), 0)
        mean = self._profile.sum(axis=1)[rows] / np.maximum(period, 1)
        out: F = np.where(period > 0, values - (self._profile[rows, phase] - mean), values)
        on = rows[period > 0]
        k = np.minimum(self._count[on, phase[period > 0]] + 1, self.cycles)
        self._count[on, phase[period > 0]] = k
        self._profile[on, phase[period > 0]] += (values[period > 0] - self._profile[on, phase[period > 0]]) / k
        return out
