"""Early warning of a regime shift: critical slowing down in one series, before it tips.

A system that is about to lose its stable state recovers from small perturbations ever more slowly: a
deviation is still there one point later, more and more of it (its lag-1 autocorrelation rises towards
1, and with it the series' variance), while its level may not have moved yet. Every ``every`` (2) points
the detector takes the points since it last started (at most ``span``, at least ``min_span``), removes
their least-squares line (a trend or a level is not slowing down) and winsorises the residuals at
``CLIP`` (4) robust standard deviations (an outlier is one point far off, not memory). Two tests of a
rise in memory (``TRIGGER``) are applied to those residuals, and a warning is raised when either reaches
its level:

- ``variance_autocorrelation_tau``, the issue's two indicators as one test (:mod:`kendall`): Kendall's tau
  against time of the point-wise variance ``|r[t]|`` and of the point-wise lag-1 autocovariance
  ``r[t]·r[t-1]`` (the variance times the lag-1 autocorrelation), each with a z-score whose variance is
  widened for the autocorrelation those values have under a steady AR(1) (Hamed & Rao 1998; the AR(1)'s
  coefficient read from the signs of the lag products); the test is the mean of the two z-scores against
  the standard normal (``kendall.joint_trend``), within the level when the two z-scores are each
  standard normal and jointly normal, whatever their correlation (measured -0.05 to 0.98 on steady AR(1)
  series), and with the excess of either where it is wider: a slowing down raises both, a rise of one
  alone counts half;
- ``ar_trend``: an autoregression whose coefficient may change linearly over the span,
  ``y[t] = c + (a + b·s[t])·y[t-1] + e`` (``s``: time scaled to -½..½); the trend ``b`` over its standard
  error is a z-score, standard normal when the coefficient does not change.

Each test is at ``alpha`` (0.001), the level the autoregression's trend had alone, so a look at which it
would have warned warns (while the detector is armed: it re-arms once every test's statistic has fallen
below zero) and the indicators' are added; the total level is ``alpha`` times the number of tests, 0.002
(Bonferroni). That is the principle, and its price is stated, not tuned away: when each test holds its
level, the chance that one look at a span without slowing down warns is at most that total, and a run of
n points is looked at n / ``every`` times, so its false-alarm bound is 0.002 · n / ``every`` (0.001 per
point). The two indicators are one test, not two at half the level each, because that keeps the total
of the trigger before (the autocovariance's tau or the autoregression) and because a Bonferroni split
over the variance's tau, which warned of fewer ramps and of more steady series than the autocovariance's
(``bench_early_warning.py --indicators``), loses more than it adds.

Measured (``bench_early_warning.py``, seeds 1-40, against the trigger before): on ``serving-saturation``
13 of 40 transitions warned of as is (the same), 6 sampled every second window (5), 7 with noise (7), 20
with outliers (19); the healthy twin 0 / 0 / 0 / 1 false alarms (0 / 1 / 0 / 1); on the AR(1) families
drawn outside the simulator 3 fewer ramps with outliers and one more false alarm on a steady AR(1).
Held out (seeds 41-80, run once after the choice): 14 as is (16), 5 sampled (5), 10 with noise (8), 20
with outliers (20), the healthy twin 1 / 0 / 0 / 5 (the same): as many in all, not more.
Offline, every look and no hold (``--indicators``; ramps warned of 160 / runs without slowing down warned
of 200): the trigger 64 / 16 at 0.002 in all (before: 68 / 15), the joint test alone 20 / 2 at 0.001, the
autocovariance's 34 / 2, the variance's 19 / 7. The point-wise variance's and autocovariance's taus are
each a test too (``trigger``: ``variance_tau``, ``autocorrelation_tau``). The rolling indicators of
:mod:`rolling_trend` (Dakos et al. 2012: a rolling window of half the span, tau against 999 AR(1)
surrogates; 17-100 ms a look) were measured as tests as well: weaker at every false-alarm count
(README), so they are evidence only.

Measurement noise and outliers on a persistent series make the z-score wider than standard normal
(residuals of an AR(1) seen through noise are correlated): there the stated level does not hold (a tenth
of the points 5 spreads off an AR(1) of coefficient 0.5: about 2% of tests warn at 0.001,
``tests/unit/test_early_warning.py``). With ``surrogates`` > 0 a warning of the autoregression must also
reach its level against that many surrogates of an AR(1) seen through white noise (``calibrated``,
:mod:`surrogates`): measured, it did not warn of more transitions without more false alarms on the
simulator's healthy twin (README), so it is off. The taus' level holds better (``tests/unit/test_kendall.py``:
steady AR(1) of coefficient 0-0.95 with noise, outliers or Student-t innovations, 60 and 150 points,
about 5% at 0.05 for the variance's tau), except with white noise on a very persistent series, where the
signs' AR(1) understates the memory of what is an ARMA(1,1): at 0.9 and 150 points 1.8% of spans at 0.01
for the variance's tau, 2.5% for the autocovariance's, 1.1% for the joint test. Reading an ARMA(1,1)
memory from the signs at lags 1 and 2 holds the level there but halved the joint test's warnings of the
simulator's slowing down (the rise itself lengthens the memory read from the span): not taken.

Each warning also carries the indicators as the literature computes them (``rolling_trend``: rolling
variance and lag-1 autocorrelation over half the span, Kendall's tau against 999 AR(1) surrogate series
seeded from the span itself), and the point-wise variance's tau.

A step in the series also looks like memory while it is in the span, and the change detector needs a few
points to confirm it: so a warning is held for ``min_side + 2`` points and dropped if a shift is found
meanwhile. A level shift of more than ``jump`` times the spread of the span before it
(``changepoint.ChangePoint`` on the same series; slowing down wanders further and further, not that far)
is the regime shift itself, or another one: the span is forgotten and learned again after it.

The finding's ``start`` is the time of the span's first point, its ``end`` the point that confirmed the
warning (``raised_at`` in the evidence: the one that raised it); ``evidence`` has ``raised_by`` (the
tests of the trigger that reached their level, the smallest p-value first), ``alpha`` (each test's
level) and ``total_level``, the autoregression's z-score and p-value (``z``, ``p_value``; ``severity``
is the z-score of the test that raised it), the autoregression coefficient at the span's start and end,
the variance and lag-1 autocorrelation of its first and last thirds, Kendall's tau and one-sided p-value
of the variance's and the lag-1 autocovariance's trend on the winsorised residuals (``variance_tau``,
``variance_p``, ``autocorrelation_tau``, ``autocorrelation_p``), the joint test's z-score and p-value
(``variance_autocorrelation_z``, ``variance_autocorrelation_p``), the same of the rolling indicators
against surrogates (``rolling_variance_tau``, ``rolling_variance_p``, ``rolling_autocorrelation_tau``,
``rolling_autocorrelation_p``; 35-200 ms per warning) and ``since_points``. The lead time of a warning
is how long before the shift it came. One warning per rise: the detector re-arms once every test's
statistic has fallen below zero. State: at most ``span`` points (and times) and the change detector's
window.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from streams import fpmath
from streams.engine.detectors.base import Detector
from streams.engine.detectors.changepoint import ChangePoint
from streams.engine.detectors.kendall import (
    autocorrelation_trend,
    autocorrelation_z,
    joint_of,
    joint_trend,
    one_sided,
    variance_trend,
    variance_z,
)
from streams.engine.detectors.rolling_trend import around_line, rolling_trend
from streams.engine.detectors.surrogates import draw, seeded
from streams.engine.findings import Finding

F = npt.NDArray[np.float64]
CLIP = 4.0  # robust standard deviations: a Gaussian point is further off once in 16,000
INDICATORS = {
    "variance_autocorrelation_tau": joint_trend,  # both indicators' taus as one test (kendall.joint_trend)
    "variance_tau": variance_trend,
    "autocorrelation_tau": autocorrelation_trend,
}
TESTS = ("ar_trend", *INDICATORS)
TRIGGER = ("variance_autocorrelation_tau", "ar_trend")  # each at alpha, 2·alpha in all (Bonferroni): the docstring


def indicators(x: F) -> tuple[float, float]:
    """(variance, lag-1 autocorrelation) of ``x`` around its least-squares line."""
    r = detrended(x)
    var = float(np.mean(r * r))
    if var <= 0.0:
        return 0.0, 0.0
    return var, float(np.mean(r[1:] * r[:-1]) / var)


def detrended(x: F) -> F:
    """``x`` minus its least-squares line (each row, if ``x`` has several)."""
    return around_line(x)


def winsorised(r: F, clip: float = CLIP) -> F:
    """``r`` (around its line; each row) clipped at ``CLIP`` robust standard deviations: an outlier is one
    point far off, not memory. The robust spread is the MAD of ``r`` or of its differences over √2, the
    larger (slow wandering and fast alternation are both kept)."""
    d = np.diff(r, axis=-1)
    level = np.median(np.abs(r - np.median(r, axis=-1, keepdims=True)), axis=-1)
    step = np.median(np.abs(d - np.median(d, axis=-1, keepdims=True)), axis=-1) / math.sqrt(2)
    limit = (clip * 1.4826 * np.maximum(level, step))[..., None]
    out: F = np.where(limit > 0, np.clip(r, -limit, limit), r)
    return out


def ar_trend(x: F, clip: float = CLIP) -> tuple[F, F, F]:
    """Per row of ``x``: (z-score of the trend of the lag-1 autoregression coefficient, the coefficient
    at the start, at the end), ``x`` around its least-squares line, outliers winsorised at ``clip``."""
    return ar_fit(winsorised(detrended(x), clip))


def ar_fit(y: F) -> tuple[F, F, F]:
    """``ar_trend`` of residuals ``y`` (each row) already around their line and winsorised."""
    n = y.shape[-1]
    s = np.arange(1, n, dtype=np.float64) / n - 0.5
    lag, out = y[..., :-1], y[..., 1:]
    columns = (np.ones_like(lag), lag, s * lag)
    gram = np.empty((*y.shape[:-1], 3, 3))
    moments = np.empty((*y.shape[:-1], 3))
    for i, u in enumerate(columns):
        moments[..., i] = (u * out).sum(-1)
        for j in range(i, 3):
            gram[..., i, j] = gram[..., j, i] = (u * columns[j]).sum(-1)
    adjugate, det = _adjugate(gram)
    singular = np.abs(det) < 1e-12 * fpmath.power(np.abs(gram).max(axis=(-2, -1)), 3)
    det[singular] = 1.0
    adjugate[singular] = np.eye(3)
    beta = (adjugate * moments[..., None, :]).sum(-1) / det[..., None]
    e = out - beta[..., :1] - beta[..., 1:2] * lag - beta[..., 2:] * columns[2]
    se = np.sqrt((e * e).sum(-1) / max(n - 4, 1) * (adjugate[..., 2, 2] / det))
    z = np.divide(beta[..., 2], se, out=np.zeros_like(se), where=(se > 0) & ~singular)
    a, b = np.where(singular, 0.0, beta[..., 1]), np.where(singular, 0.0, beta[..., 2])
    return z, a + b * s[0], a + b * s[-1]


def _adjugate(g: F) -> tuple[F, F]:
    """(adjugate, determinant) of each symmetric 3 x 3 matrix ``g`` (its inverse: adjugate / determinant),
    by cofactors: element-wise, not LAPACK, whose result depends on the CPU (``lines``)."""
    a, b, c, d, e, f = g[..., 0, 0], g[..., 0, 1], g[..., 0, 2], g[..., 1, 1], g[..., 1, 2], g[..., 2, 2]
    adjugate = np.empty_like(g)
    adjugate[..., 0, 0] = d * f - e * e
    adjugate[..., 0, 1] = adjugate[..., 1, 0] = c * e - b * f
    adjugate[..., 0, 2] = adjugate[..., 2, 0] = b * e - c * d
    adjugate[..., 1, 1] = a * f - c * c
    adjugate[..., 1, 2] = adjugate[..., 2, 1] = b * c - a * e
    adjugate[..., 2, 2] = a * d - b * b
    det: F = a * adjugate[..., 0, 0] + b * adjugate[..., 0, 1] + c * adjugate[..., 0, 2]
    return adjugate, det


def slowing_down(x: F, clip: float = CLIP) -> tuple[float, float, float]:
    """``ar_trend`` of the one series ``x``."""
    z, then, now = ar_trend(x[None, :], clip)
    return float(z[0]), float(then[0]), float(now[0])


def tests(y: F, names: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """(statistic, one-sided p-value of a rise) of each test in ``names`` (``TESTS``) on the residuals ``y``
    (around their line, winsorised): the AR trend's z, or Kendall's tau of a point-wise indicator."""
    out: dict[str, tuple[float, float]] = {}
    for name in names:
        if name == "ar_trend":
            z = float(ar_fit(y[None, :])[0][0])
            out[name] = (z, one_sided(z))
        else:
            out[name] = INDICATORS[name](y)
    return out


def calibrated(x: F, z: float, surrogates: int) -> float:
    """One-sided p-value of the AR trend's z-score ``z`` of ``x`` against ``surrogates`` series drawn from
    the null fitted to its winsorised residuals (``surrogates.draw``: one AR(1) seen through white noise)."""
    y = winsorised(detrended(x))
    null, _, _ = ar_trend(draw(y, surrogates, seeded(x)))
    return float((1 + np.count_nonzero(null >= z)) / (1 + surrogates))


@dataclass
class EarlyWarning(Detector):
    """One series of one subject (``subject``: an operator-graph element id; ``metric``: its name)."""

    subject: str
    metric: str = "value"
    span: int = 150
    min_span: int = 60
    every: int = 2
    alpha: float = 0.001  # the level of each test of the trigger; in all alpha · len(trigger) (Bonferroni)
    jump: float = 4.0
    surrogates: int = 0  # > 0: a warning's z must also reach ``alpha`` against this many noise-aware surrogates
    trigger: tuple[str, ...] = TRIGGER  # the tests (``TESTS``) that raise a warning, each at ``alpha``
    job: str = ""  # the key whose state it holds
    _points: deque[float] = field(default_factory=deque)
    _times: deque[float] = field(default_factory=deque)
    _count: int = 0
    _armed: bool = True
    _shifts: ChangePoint = field(default_factory=lambda: ChangePoint(1))
    _pending: Finding | None = None  # raised, waiting to be sure it was not a shift's own first points
    _wait: int = 0

    def _forget(self) -> None:
        """A regime shift happened: the points before it say nothing about the new regime."""
        self._points.clear()
        self._times.clear()
        self._armed, self._pending = True, None

    def update(self, time: float, value: float) -> Finding | None:
        if not np.isfinite(value):
            return None
        shifts = self._shifts.update(np.zeros(1, np.int64), np.array([value]))
        if any(
            c.kind == "level" and abs(c.after - c.before) > self.jump * self._spread(c.detected - c.at) for c in shifts
        ):
            self._forget()  # and a warning still waiting for confirmation was the shift itself
            return None
        found = self._observe(time, value)
        if found is not None:
            self._pending, self._wait = found, 0
            return None
        if self._pending is None:
            return None
        self._wait += 1
        if self._wait < self._shifts.min_side + 2:  # no shift found for as long as one needs to be confirmed
            return None
        pending, self._pending = self._pending, None
        return replace(pending, end=time, evidence={**pending.evidence, "raised_at": pending.end})

    def _spread(self, after: int) -> float:
        """Standard deviation of the span before its last ``after`` points (those after a change)."""
        before = list(self._points)[: max(0, len(self._points) - after)]
        return float(np.std(before)) if len(before) > 2 else 0.0

    def _observe(self, time: float, value: float) -> Finding | None:
        self._points.append(value)
        self._times.append(time)
        if len(self._points) > self.span:
            self._points.popleft()
            self._times.popleft()
        self._count += 1
        if len(self._points) < self.min_span or self._count % self.every:
            return None
        x = np.fromiter(self._points, np.float64, len(self._points))
        y = winsorised(detrended(x))
        judged = tests(y, self.trigger)
        if not self._armed:
            self._armed = all(statistic < 0.0 for statistic, _ in judged.values())
            return None
        reached = [name for name in self.trigger if judged[name][1] <= self.alpha]
        z = judged["ar_trend"][0] if "ar_trend" in reached else 0.0
        if "ar_trend" in reached and self.surrogates and calibrated(x, z, self.surrogates) > self.alpha:
            reached.remove("ar_trend")
        if not reached:
            return None
        self._armed = False
        raised_by = sorted(reached, key=lambda name: judged[name][1])  # the smallest p-value first
        z, ar_then, ar_now = (float(v[0]) for v in ar_fit(y[None, :]))
        p_value = one_sided(z)
        first = raised_by[0]  # the severity: the z-score of the test that raised it with the smallest p-value
        severity = z if first == "ar_trend" else -NormalDist().inv_cdf(min(max(judged[first][1], 1e-300), 0.5))
        third = len(x) // 3
        (var_then, ac_then), (var_now, ac_now) = indicators(x[:third]), indicators(x[-third:])
        (var_tau, var_z), (ac_tau, ac_z) = variance_z(y), autocorrelation_z(y)  # each once: p-values and joint
        var_p, ac_p = one_sided(var_z), one_sided(ac_z)
        joint_z, joint_p = joint_of(var_z, ac_z)
        rolling_tau, rolling_p = rolling_trend(x)
        return Finding(
            kind="early_warning",
            subjects=(self.subject,),
            series=self.metric,
            start=self._times[0],
            end=time,
            severity=round(severity, 6),
            evidence={
                "metric": self.metric,
                "z": round(z, 6),
                "p_value": float(f"{p_value:.6g}"),
                "alpha": self.alpha,
                "ar1_then": round(float(ar_then), 6),
                "ar1_now": round(float(ar_now), 6),
                "variance_then": var_then,
                "variance_now": var_now,
                "autocorrelation_then": round(ac_then, 6),
                "autocorrelation_now": round(ac_now, 6),
                "variance_tau": round(var_tau, 6),
                "variance_p": float(f"{var_p:.6g}"),
                "autocorrelation_tau": round(ac_tau, 6),
                "autocorrelation_p": float(f"{ac_p:.6g}"),
                "variance_autocorrelation_z": round(joint_z, 6),
                "variance_autocorrelation_p": float(f"{joint_p:.6g}"),
                "rolling_variance_tau": round(float(rolling_tau[0]), 6),
                "rolling_variance_p": float(f"{rolling_p[0]:.6g}"),
                "rolling_autocorrelation_tau": round(float(rolling_tau[1]), 6),
                "rolling_autocorrelation_p": float(f"{rolling_p[1]:.6g}"),
                "since_points": len(x),
                "raised_by": raised_by,
                "total_level": self.alpha * len(self.trigger),
            },
        )
