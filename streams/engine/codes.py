"""Small integers for the graph's columns: a codebook for strings and dense ids for tuples of integers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
native_codes = hasattr(native.core, "codes_of")  # (the same codes from native/src/codes.rs, with fewer lookups)
native_same = hasattr(native.core, "same_str")  # (the same answer from native/src/codes.rs, in one call)


@dataclass
class Codebook:
    """Stable small integers for strings (op names, group names), in first-seen order; "" is 0."""

    codes: dict[str, int] = field(default_factory=lambda: {"": 0})
    names: list[str] = field(default_factory=lambda: [""])

    def encode(self, values: npt.NDArray[Any]) -> Ints:
        known = _native(values, self.codes, -1)
        if known is not None:
            return known
        items = values.tolist()
        try:
            return np.fromiter(map(self.codes.__getitem__, items), np.int64, len(items))
        except KeyError:
            for v in dict.fromkeys(items):
                if v not in self.codes:
                    self.codes[v] = len(self.names)
                    self.names.append(v)
            return np.fromiter(map(self.codes.__getitem__, items), np.int64, len(items))

    def of(self, names: Iterable[str]) -> Ints:
        return np.array([self.codes[n] for n in names if n in self.codes], np.int64)


def classes(values: npt.NDArray[Any], names: tuple[str, ...]) -> Ints:
    """Per value: 1 + the index in ``names`` of the name it equals, 0 when none (a column's few classes,
    compared once instead of once per name)."""
    try:
        known = _native(values, {name: i + 1 for i, name in enumerate(names)}, 0)
    except TypeError:  # an unhashable value: the comparisons say it equals none
        known = None
    if known is not None:
        return known
    out = np.zeros(len(values), np.int64)
    for i, name in enumerate(names):
        out[values == name] = i + 1
    return out


def same_str(parts: list[npt.NDArray[Any]], value: str) -> bool:
    """Whether every row of every part (object arrays) is ``value`` (a str) as :func:`classes` tells it: from
    the native core in one call when it can tell (a column of one name is mostly one object), else as
    defined."""
    if native_same and native.core is not None:
        answer = native.core.same_str(parts, value)
        if answer is not None:
            return bool(answer)
    return all((classes(p, (value,)) == 1).all() for p in parts)


def _native(values: npt.NDArray[Any], codes: dict[str, int], missing: int) -> Ints | None:
    """``codes[value]`` per value (``missing`` for a value that is not a key, or None when ``missing`` is
    negative) from the native core; None also without it. An object array of ``str`` is read in place;
    anything else as its list."""
    if not native_codes or native.core is None:
        return None
    out = np.empty(len(values), np.int64)
    answer = None
    if values.dtype == object and values.ndim == 1 and values.flags.c_contiguous:
        answer = native.core.codes_of(values, codes, missing, out)
    if answer is None:
        answer = native.core.codes_of(values.tolist(), codes, missing, out)
    return out if answer else None


def few_keys(largest: int, rows: int) -> bool:
    """Whether keys up to ``largest`` (from 0) over ``rows`` rows are few enough to be marked in a table of
    them rather than sorted (a few steps x ranks, stages, codes)."""
    return largest <= 4 * rows + 1024


def dense(*cols: Ints) -> Ints:
    """One small integer per distinct tuple of the integer columns (0, 1, ... in the tuples' sorted order).
    The columns are combined one at a time, the tuples so far numbered again (:func:`_ranks`) before a column
    would make their key too wide for a table: a step's five or seven columns of 1.2 M nodes (16k ranks)
    in a few tables, where one key of all of them would be sorted."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    key, span = _offsets(cols[0])
    for col in cols[1:]:
        more, width = _offsets(col)
        if not few_keys(span * width, len(key)):
            key = _ranks(key, span)
            span = int(key.max()) + 1
        if span * width >= 1 << 62:  # (too wide for one int64 key: numpy's unique of the two columns)
            pairs = np.unique(np.stack([key, more]), axis=1, return_inverse=True)[1]
            key, span = np.asarray(pairs, np.int64).ravel(), len(key)
            continue
        key, span = key * width + more, span * width
    return _ranks(key, span)


def _offsets(col: Ints) -> tuple[Ints, int]:
    """The column less its lowest value, and how many values it may take; a column spread wider than an
    int64 key may hold (its difference would wrap) numbered by its distinct values instead (the same order)."""
    low, high = int(col.min()), int(col.max())
    if high - low >= 1 << 62:
        _, inverse = np.unique(col, return_inverse=True)
        ranked = np.asarray(inverse, np.int64).ravel()
        return ranked, int(ranked.max()) + 1
    return col.astype(np.int64) - low, high - low + 1


def _ranks(key: Ints, span: int) -> Ints:
    """Per key (0 <= key < span): how many distinct keys are below it."""
    if few_keys(span, len(key)):
        seen = np.zeros(span, bool)
        seen[key] = True
        below = np.cumsum(seen, dtype=np.int64) - 1  # per possible key: the distinct keys below it
        return below[key]
    _, inverse = np.unique(key, return_inverse=True)
    return np.asarray(inverse, np.int64).ravel()


def distinct_pairs(first: Ints, second: Ints) -> tuple[Ints, Ints]:
    """The distinct (first, second) pairs in ascending order, as two columns: numpy's 1-D unique of one key per
    pair (:func:`radix_key`; ~15x faster than its unique of columns, ``axis=1``, on 1.2 M nodes of 16k ranks),
    or the unique of columns for values too wide for one key."""
    first, second = first.astype(np.int64, copy=False), second.astype(np.int64, copy=False)
    try:
        keys = np.unique(radix_key(first, second))
    except OverflowError:
        both = np.unique(np.stack([first, second]), axis=1)
        return both[0], both[1]
    if not len(keys):
        return keys, keys
    width = int(second.max()) - int(second.min()) + 1
    return keys // width + int(first.min()), keys % width + int(second.min())


def radix_key(*cols: Ints) -> Ints:
    """One integer per row that orders rows like the tuples of the integer columns (the first column first)."""
    key = np.zeros(len(cols[0]), np.int64)
    if not len(key):
        return key
    radix = 1
    for col in cols:
        lo, hi = int(col.min()), int(col.max())
        width = hi - lo + 1
        radix *= width
        if radix >= 1 << 62:
            raise OverflowError("too many distinct values to combine into one key")
        key = key * width + (col - lo)
    return key


def key_sums(keys: Ints, weights: Floats) -> tuple[Ints, Floats]:
    """The distinct keys, ascending, and the sum of ``weights`` over each (added in the input's order, as
    ``np.bincount`` over ``np.unique``'s inverse adds them): small non-negative keys (ranks, stages, codes)
    without a sort."""
    sums: Floats
    if not len(keys) or keys.min() < 0 or not few_keys(int(keys.max()), len(keys)):
        present, inverse = np.unique(keys, return_inverse=True)
        sums = np.asarray(np.bincount(inverse.ravel(), weights, minlength=len(present)), np.float64)
        return present, sums
    distinct: Ints = np.flatnonzero(np.bincount(keys))
    sums = np.asarray(np.bincount(keys, weights), np.float64)[distinct]
    return distinct, sums


def fits_int32(*cols: npt.NDArray[Any]) -> bool:
    """Whether every value of ``cols`` (integer or bool arrays, read as they are) fits an int32."""
    return all(not len(c) or (int(c.min()) >= -(2**31) and int(c.max()) < 2**31) for c in cols)


def compact(a: Ints) -> Ints:
    """Integers ``a`` (keys, ranks, node ids: far below 2^31) as int32 when they fit, else as they are: half
    the memory of a column kept across steps, the same values."""
    return a.astype(np.int32) if fits_int32(a) else a
