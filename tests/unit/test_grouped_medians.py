"""The native grouped medians (streams/engine/medians.py ``grouped``) give the numpy definitions' values bit
for bit (whatif.Grouping.medians: np.median for groups of one size, else the mean of the two middle values
after a stable sort; ideal.LowMedian.typical: the lower median), with ties, NaN and inf; and they decline
(None: the definition runs) where a selection could pick another zero's sign or NaN's bits."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from audit import native
from streams.engine import medians
from streams.engine.ideal import LowMedian
from streams.engine.whatif import Grouping

pytestmark = pytest.mark.skipif(medians.grouped(np.zeros(1), np.zeros(1, np.int64), np.zeros(1, np.int64),
                                                np.ones(1, np.int64), medians.LOWER) is None,
                                reason="native core not built")  # fmt: skip


def without_native(
    monkeypatch: pytest.MonkeyPatch, compute: Callable[[np.ndarray], np.ndarray], values: np.ndarray
) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(native, "core", None)
        return np.asarray(compute(values))


def cases(rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for trial in range(400):
        n = int(rng.integers(1, 40))
        keys = rng.integers(-1 if trial % 3 == 0 else 0, int(rng.integers(1, 8)), n)
        if trial % 4 == 1:  # every group the same size (np.median's path in Grouping)
            keys = np.repeat(np.arange(int(rng.integers(1, 5))), int(rng.integers(1, 6)))
            n = len(keys)
        values = rng.choice([0.0, 0.5, 1.0, 1.5, 3.25], n) if trial % 2 else rng.normal(1.0, 0.2, n)
        odd = rng.random(n)
        values[odd < 0.1] = np.nan
        values[(odd >= 0.1) & (odd < 0.15)] = np.inf
        values[(odd >= 0.15) & (odd < 0.18)] = -np.inf
        if trial % 5 == 0:
            values[:] = np.nan if trial % 10 == 0 else values
        out.append((keys, values))
    return out


def test_grouping_medians_equal_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    for keys, values in cases(np.random.default_rng(11)):
        grouping = Grouping(np.maximum(keys, 0))
        native = grouping.medians(values)
        assert np.array_equal(native, without_native(monkeypatch, grouping.medians, values), equal_nan=True)


def test_lower_medians_equal_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    for keys, values in cases(np.random.default_rng(12)):
        low = LowMedian(keys)
        native = low.typical(values)
        assert np.array_equal(native, without_native(monkeypatch, low.typical, values), equal_nan=True)


def test_a_selection_that_could_differ_in_bits_is_left_to_the_definition() -> None:
    order, starts, counts = np.arange(3), np.zeros(1, np.int64), np.full(1, 3, np.int64)
    assert medians.grouped(np.array([0.0, -0.0, 1.0]), order, starts, counts, medians.LOWER) is None
    nans = np.array([np.nan, -np.nan, 1.0])
    assert medians.grouped(nans, order, starts, counts, medians.LOWER) is None
    got = medians.grouped(np.array([2.0, np.nan, 1.0]), order, starts, counts, medians.MIDDLE)
    assert got is not None and got.tolist() == [2.0]  # NaN last: the middle of (1, 2, NaN) is 2
    got = medians.grouped(np.array([2.0, np.nan, 1.0]), order, starts, counts, medians.NUMPY)
    assert got is not None and np.isnan(got).all()  # np.median: a NaN makes the median NaN


def test_int32_groupings_give_the_int64_ones_values() -> None:
    """Groupings kept as int32 (half the memory per structure) are read as they are, with the same values."""
    assert medians._I32  # the core built here reads int32 orders (else this compares two int64 calls)
    for keys, values in cases(np.random.default_rng(13)):
        members = np.flatnonzero(keys >= 0)
        order = np.argsort(keys[members], kind="stable")
        ordered = keys[members][order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if len(ordered) else order
        counts = np.diff(np.r_[starts, len(ordered)])
        for how in (medians.LOWER, medians.MIDDLE, medians.NUMPY):
            wide = medians.grouped(values, order, starts, counts, how, members)
            narrow = medians.grouped(values, order.astype(np.int32), starts, counts, how, members.astype(np.int32))
            assert (wide is None) == (narrow is None)
            assert wide is None or narrow is None or np.array_equal(wide, narrow, equal_nan=True)
    assert LowMedian(np.array([1, 0, 1, -1])).order.dtype == np.int32  # kept narrow
