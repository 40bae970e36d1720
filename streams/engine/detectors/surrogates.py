"""Surrogate series for a test of "no change in the memory": one AR(1) process seen through white noise.

The null hypothesis of an early-warning test is a series whose memory does not change. Its simplest
model is an AR(1) process; measured series also carry measurement noise (and outliers, after
winsorising: noise of another shape), and an AR(1) process seen through white noise is an ARMA(1,1)
whose lag-1 autocorrelation understates its memory. The null fitted here is that one: residuals ``r``
(mean zero) with autocorrelations ``rho1 = c·phi`` and ``rho2 = c·phi²`` (``phi``: the AR coefficient of
the hidden process, ``c``: its share of the variance, the rest white noise), so ``phi = rho2 / rho1``,
clipped to ``rho1..MAX_PHI`` (noise only lowers the autocorrelation) and ``c = rho1 / phi``; with no
positive ``rho1`` and ``rho2`` it is a plain AR(1) (``phi = max(rho1, 0)``, ``c = 1``). Surrogates are
drawn from it with the same variance as ``r``, started in the stationary state, vectorised over the
draws, from a generator seeded with the bytes of the input: the same points give the same draws.
"""

from __future__ import annotations

import zlib

import numpy as np
import numpy.typing as npt

from streams.engine.detectors.lines import lag_products

F = npt.NDArray[np.float64]
MAX_PHI = 0.99


def seeded(x: F) -> np.random.Generator:
    """A generator whose seed is the input itself (same points, same draws)."""
    return np.random.default_rng(zlib.crc32(np.ascontiguousarray(x, np.float64).tobytes()))


def hidden_ar1(r: F, noise: bool = True) -> tuple[float, float]:
    """(phi, c): the hidden AR(1) coefficient and its share of the variance of ``r`` (mean zero); with
    ``noise`` False a plain AR(1) (``c`` 1, ``phi`` the lag-1 autocorrelation)."""
    energy, rho1, rho2 = map(float, lag_products(r, 3))
    if energy <= 0.0:
        return 0.0, 1.0
    rho1, rho2 = rho1 / energy, rho2 / energy
    if not noise or rho1 <= 0.0 or rho2 <= 0.0:
        return min(max(rho1, 0.0), MAX_PHI), 1.0
    phi = min(max(rho2 / rho1, rho1), MAX_PHI)
    return phi, rho1 / phi


def draw(r: F, count: int, rng: np.random.Generator, noise: bool = True) -> F:
    """``count`` surrogates of ``r`` (rows), from the null fitted by ``hidden_ar1``."""
    n = len(r)
    phi, share = hidden_ar1(r, noise)
    spread = float(np.std(r)) or 1.0
    e = rng.standard_normal((n, count)) * np.sqrt(1.0 - phi * phi)
    hidden = np.empty((n, count))
    hidden[0] = rng.standard_normal(count)
    for i in range(1, n):
        hidden[i] = phi * hidden[i - 1] + e[i]
    white = rng.standard_normal((n, count))
    out: F = (spread * (np.sqrt(share) * hidden + np.sqrt(1.0 - share) * white)).T
    return out
