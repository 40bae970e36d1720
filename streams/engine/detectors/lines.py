"""Least-squares lines and sums of products without BLAS or LAPACK.

``x @ t``, ``np.polyfit`` and ``np.linalg`` go to OpenBLAS, which picks its kernels by CPU (Haswell on
this machine, Prescott or Sandybridge on others; SkylakeX with AVX-512): their sums come out in another
order and differ in the last bits, and so would the records made from them. Here every sum is numpy's
pairwise summation of element-wise products (``np.sum``: fixed C code, the same on every x86-64 CPU), so a
record is a function of its input on any machine.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F = npt.NDArray[np.float64]


def centred(n: int) -> F:
    """Positions ``0 .. n - 1`` minus their mean (exact in float64)."""
    return np.arange(n, dtype=np.float64) - (n - 1) / 2


def line(x: F) -> tuple[F, F]:
    """(slope, mean) of the least-squares line through each row of ``x`` (last axis: positions 0, 1, ...):
    its value at position ``i`` is ``mean + slope * (i - (n - 1) / 2)``. Closed form on centred positions
    and values (a high level does not cancel in the slope's sum)."""
    t = centred(x.shape[-1])
    mean: F = np.mean(x, axis=-1)
    slope: F = np.sum((x - mean[..., None]) * t, axis=-1) / np.sum(t * t)
    return slope, mean


def lag_products(r: F, lags: int) -> F:
    """``sum(r[i] * r[i + k])`` over the one series ``r`` for each lag ``k`` in ``0 .. lags - 1`` (lag 0: its
    sum of squares)."""
    n = len(r)
    return np.array([np.add.reduce(r[k:] * r[: n - k]) for k in range(lags)])
