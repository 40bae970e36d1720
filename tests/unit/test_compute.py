"""RankCompute's per-(step, rank) sums: the same rows and bits as numpy's unique and bincount define them."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine.compute import _first_and_sums


@pytest.mark.parametrize("span", [3, 64 * 4, 10**7])  # dense keys (binned), and sparse ones (sorted)
def test_first_rows_and_sums_are_uniques_index_and_bincounts_sums(span: int) -> None:
    rng = np.random.default_rng(span)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        key = rng.integers(-5, span, n).astype(np.int64)
        weights = rng.random(n) * rng.choice([1.0, -1.0, 0.0], n)
        weights[rng.random(n) < 0.05] = -0.0
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        found, sums = _first_and_sums(key, weights)
        np.testing.assert_array_equal(found, first)
        assert sums.tobytes() == np.bincount(inverse.ravel(), weights).tobytes()
