"""Small integers for the graph's columns: a codebook for strings and dense ids for tuples of integers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass
class Codebook:
    """Stable small integers for strings (op names, group names), in first-seen order; "" is 0."""

    codes: dict[str, int] = field(default_factory=lambda: {"": 0})
    names: list[str] = field(default_factory=lambda: [""])

    def encode(self, values: npt.NDArray[Any]) -> Ints:
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


def dense(*cols: Ints) -> Ints:
    """One small integer per distinct tuple of the integer columns (0, 1, ... in the tuples' sorted order)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    _, inverse = np.unique(radix_key(*cols), return_inverse=True)
    return np.asarray(inverse, np.int64).ravel()


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
