"""A step's critical path summed per key of several columns in one pass (``steps._totals``) is each column's
:func:`codes.key_sums`, bit for bit: the same keys in the same order, each key's weights added in order."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine.codes import key_sums
from streams.engine.steps import _totals


def _bits(totals: dict[int, float]) -> list[tuple[int, int]]:
    return [(k, int(np.float64(v).view(np.int64))) for k, v in totals.items()]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf - inf among the sums)
@pytest.mark.parametrize("length", [0, 1, 9, 300])
def test_totals_of_columns_side_by_side_are_each_columns_key_sums(length: int) -> None:
    rng = np.random.default_rng(length)
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e308])
    for trial in range(24):
        weights = rng.lognormal(0.0, 2.0, length) * rng.choice([-1.0, 1.0], length)
        if trial % 2:
            odd = rng.random(length) < 0.2
            weights[odd] = rng.choice(special, int(odd.sum()))
        high = [1, 5, 64, 5000][trial % 4]  # (5000: wider than the path, to key_sums' sort at 9 nodes)
        columns = [rng.integers(0, high, length), rng.integers(0, 3, length).astype(np.int8), np.zeros(length, int)]
        if trial % 6 == 5 and length:
            columns[1][0] = -1  # (a negative key: each column on its own)
        got = _totals(weights, *columns)
        for column, totals in zip(columns, got, strict=True):
            keys, sums = key_sums(np.asarray(column, np.int64), weights)
            assert _bits(totals) == _bits(dict(zip(keys.tolist(), sums.tolist(), strict=True))), trial
            assert list(totals) == sorted(totals)
