"""Medians of the what-if and the ideal step: leaving one row out, for every row at once (the what-if's
"healed by the other groups"), and per group of a grouping prepared once (:func:`grouped`, native).

``np.nanmedian`` over all rows but one, once per row, sorts the same column G times (and takes numpy's
masked-array path for small inputs, which costs far more than the sort). Each column is sorted once
here instead; leaving out the value at sorted position p shifts the positions at and after p by one, so
the median of the rest is read off the same sorted column (in the native core when it is built, the
same values). Same values as the loop: the median of an even count is the mean of its two middle values,
``(a + b) / 2``, as numpy computes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from audit import native

Floats = npt.NDArray[np.float64]


def nanmedian_excluding_each_row(values: Floats) -> Floats:
    """Per row g and column k of ``values`` (rows x columns, NaN: absent): the median of column k over the
    rows other than g, ignoring NaN (NaN where no other row has a value), i.e.
    ``np.nanmedian(np.delete(values, g, axis=0), axis=0)`` for every g."""
    rows = values.shape[0]
    if rows == 0:
        return np.empty_like(values)
    if native.core is not None and hasattr(native.core, "medians_excluding_each_row"):  # the same values
        medians: Floats = np.empty(values.shape)
        native.core.medians_excluding_each_row(np.ascontiguousarray(values, np.float64), rows, medians)
        return medians
    order = np.argsort(values, axis=0, kind="stable")  # NaN last
    ordered = np.take_along_axis(values, order, axis=0)
    position = np.empty_like(order)
    np.put_along_axis(position, order, np.broadcast_to(np.arange(rows)[:, None], order.shape), axis=0)
    present = ~np.isnan(values)
    rest = present.sum(axis=0)[None, :] - present  # how many values the other rows hold, per (row, column)

    def at(j: npt.NDArray[np.int64]) -> Floats:
        """The j-th smallest of the other rows' values (a row's own value skipped)."""
        skip = present & (j >= position)
        return np.take_along_axis(ordered, np.clip(j + skip, 0, rows - 1), axis=0)

    out: Floats = (at((rest - 1) // 2) + at(rest // 2)) / 2
    out[rest == 0] = np.nan
    return out


def nanmedian(values: Floats) -> np.float64:
    """``np.nanmedian`` of a 1-D array (the same value and type), without numpy's masked-array path for small
    inputs (~15 times its cost); a zero among the middle values (whose sign numpy's order decides) and an
    array of NaN only go to numpy."""
    v = np.sort(values[~np.isnan(values)])
    n = len(v)
    if not n or v[(n - 1) // 2] == 0 or v[n // 2] == 0:
        return np.float64(np.nanmedian(values))
    middle: np.float64 = v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2
    return middle


def median(values: Floats | Sequence[float]) -> float:
    """``float(np.median(values))`` of a 1-D array (the same value), without numpy's per-call cost (several
    times a sort of the few values a detector takes it of); a zero among the middle values (whose sign
    numpy's selection decides), NaN and an empty array go to numpy."""
    v = np.sort(values)
    n = len(v)
    if not n:
        return float(np.median(values))
    low, high = float(v[(n - 1) // 2]), float(v[n // 2])
    if low == 0 or high == 0 or np.isnan(v[-1]):
        return float(np.median(values))
    return high if n % 2 else (low + high) / 2


LOWER, MIDDLE, NUMPY = range(3)  # what grouped() computes per group (see native/src/median.rs)
_NONE = np.zeros(0, np.int64)
_I32 = hasattr(native.core, "GROUPED_MEDIANS_READ_INT32")  # (an extension built before it: int64 copies)


def grouped(
    values: Floats, order: npt.NDArray[np.integer], starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64],
    how: int, through: npt.NDArray[np.integer] = _NONE,
) -> Floats | None:  # fmt: skip
    """Per group (the values at ``order[starts[g]:starts[g] + counts[g]]``, each index mapped through
    ``through`` when given) its ``LOWER`` median, ``MIDDLE`` (the mean of its two middle values) or ``NUMPY``
    (``np.median``), from the native core, in the order a stable sort puts NaN last; None when the native
    core is not built (or ``DRIFTLOG_NATIVE=0``) or cannot give the definition's bits (-0.0, NaNs of
    different bits): the caller then computes its numpy definition."""
    if native.core is None or not hasattr(native.core, "grouped_medians"):
        return None
    out = np.empty(len(starts))
    f64, i64 = np.ascontiguousarray(values, np.float64), [np.ascontiguousarray(a, np.int64) for a in (starts, counts)]
    narrow = order.dtype == np.int32 and (through.dtype == np.int32 or not len(through)) and _I32  # (kept so)
    indices = (np.ascontiguousarray(a, np.int32 if narrow else np.int64) for a in (order, through))
    return out if native.core.grouped_medians(f64, *indices, *i64, how, out) else None
