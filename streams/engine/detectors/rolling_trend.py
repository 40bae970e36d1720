"""The early-warning indicators as the literature computes them, judged against surrogate series.

Dakos et al. (2012, "Methods for detecting early warnings of critical transitions in time series"): take
the series around its trend (here its least-squares line), compute its variance and lag-1
autocorrelation over a rolling window of half its length, and measure their rise as Kendall's tau of
each indicator against time. Rolling windows overlap, so the textbook distribution of tau does not
apply; the tau of the data is compared instead with the taus of ``surrogates`` series of the same
length drawn from the null hypothesis "one AR(1) process, no change in its memory" (the AR(1) fitted
to the residuals: lag-1 coefficient and innovation spread), each detrended and measured the same way.
The p-value is the share of surrogates whose tau is at least the data's, ``(1 + k) / (1 + surrogates)``
(it cannot be smaller than ``1 / (1 + surrogates)``: the level a test can reach is set by their number).

Everything is vectorised over the surrogates (cumulative sums for the rolling statistics, one boolean
comparison per pair of windows for tau); the draws come from a generator seeded with the input's bytes,
so the same points always give the same p-value. Cost: O(surrogates · n²/4) comparisons per test.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from streams.engine.detectors.lines import centred, line
from streams.engine.detectors.surrogates import draw, seeded

F = npt.NDArray[np.float64]
STATISTICS = ("variance", "autocorrelation", "both")  # ``both``: the sum of the two taus, one test


def around_line(x: F) -> F:
    """Each row of ``x`` (last axis: time) minus its least-squares line."""
    slope, mean = line(x)
    out: F = x - mean[..., None] - slope[..., None] * centred(x.shape[-1])
    return out


def rolling_indicators(r: F, window: int) -> tuple[F, F]:
    """(variance, lag-1 autocorrelation) of every ``window`` consecutive points of each row of ``r``, each
    window around its own mean (the autocorrelation as R's ``acf``: lag products over squares)."""
    n = r.shape[-1]
    k = n - window + 1
    zero = np.zeros((*r.shape[:-1], 1))
    c1 = np.concatenate([zero, np.cumsum(r, axis=-1)], axis=-1)
    c2 = np.concatenate([zero, np.cumsum(r * r, axis=-1)], axis=-1)
    cp = np.concatenate([zero, np.cumsum(r[..., 1:] * r[..., :-1], axis=-1)], axis=-1)
    mean = (c1[..., window:] - c1[..., :k]) / window
    squares = c2[..., window:] - c2[..., :k] - window * mean * mean
    head = c1[..., window - 1 : n] - c1[..., :k]  # the first points of each lag pair
    tail = c1[..., window:] - c1[..., 1 : k + 1]  # the second ones
    lagged = cp[..., window - 1 :] - cp[..., :k] - mean * (head + tail) + (window - 1) * mean * mean
    variance: F = squares / window
    autocorrelation: F = np.divide(lagged, squares, out=np.zeros_like(lagged), where=squares > 0)
    return variance, autocorrelation


def kendall_rows(u: F, chunk: int = 128) -> F:
    """Kendall's tau of each row of ``u`` against time (ties count as neither)."""
    k = u.shape[-1]
    upper = np.triu(np.ones((k, k), bool), 1)
    rows = u.reshape(-1, k)
    s = np.empty(len(rows))
    for lo in range(0, len(rows), chunk):
        part = rows[lo : lo + chunk]
        later, earlier = part[:, None, :], part[:, :, None]
        s[lo : lo + chunk] = np.count_nonzero((later > earlier) & upper, axis=(1, 2)) - np.count_nonzero(
            (later < earlier) & upper, axis=(1, 2)
        )
    out: F = (s / (k * (k - 1) / 2)).reshape(u.shape[:-1])
    return out


def taus(r: F) -> F:
    """Kendall's tau of the rolling variance and lag-1 autocorrelation (window: half the points) of each
    row of ``r``, and their sum: shape (..., 3), in the order of ``STATISTICS``."""
    variance, autocorrelation = rolling_indicators(r, r.shape[-1] // 2)
    tv, ta = kendall_rows(variance), kendall_rows(autocorrelation)
    out: F = np.stack([tv, ta, tv + ta], axis=-1)
    return out


def rolling_trend(x: F, surrogates: int = 999) -> tuple[F, F]:
    """(taus, one-sided p-values of a rise) of ``x``'s rolling indicators, each in the order of
    ``STATISTICS``, against ``surrogates`` AR(1) surrogates (``surrogates.draw`` without noise: the
    literature's null) drawn with a seed from ``x`` itself."""
    r = around_line(x)
    observed = taus(r)
    null = taus(around_line(draw(r, surrogates, seeded(x), noise=False)))
    p = (1.0 + (null >= observed - 1e-12).sum(axis=0)) / (1.0 + surrogates)
    return observed, p
