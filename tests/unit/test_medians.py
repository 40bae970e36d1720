"""The leave-one-row-out median gives np.nanmedian's values over the other rows, bit for bit: random and
tied values, absent cells, one row, a column only one row has; the native core's gives the numpy
definition's, zeros' signs and infinities included."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from audit import native
from streams.engine.medians import median, nanmedian, nanmedian_excluding_each_row


def definition(values: np.ndarray) -> np.ndarray:
    out = np.full(values.shape, np.nan)
    for g in range(len(values)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            out[g] = np.nanmedian(np.delete(values, g, axis=0), axis=0)
    return out


def test_each_rows_median_of_the_others_equals_nanmedian() -> None:
    rng = np.random.default_rng(3)
    for trial in range(600):
        rows, cols = int(rng.integers(1, 9)), int(rng.integers(1, 12))
        values = rng.choice([0.5, 1.0, 1.5, 3.25], (rows, cols)) if trial % 2 else rng.normal(1.0, 0.2, (rows, cols))
        values[rng.random((rows, cols)) < rng.random()] = np.nan
        assert np.array_equal(nanmedian_excluding_each_row(values), definition(values), equal_nan=True)


def test_a_value_no_other_row_has_is_not_healed() -> None:
    values = np.array([[1.0, 5.0], [2.0, np.nan], [4.0, np.nan]])
    got = nanmedian_excluding_each_row(values)
    assert got[:, 0].tolist() == [3.0, 2.5, 1.5]
    assert np.isnan(got[0, 1]) and got[1:, 1].tolist() == [5.0, 5.0]
    assert np.isnan(nanmedian_excluding_each_row(np.array([[1.0, 2.0]]))).all()


def test_the_native_core_and_the_numpy_definition_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    if native.core is None:
        pytest.skip("native core not built")
    rng = np.random.default_rng(4)
    for trial in range(600):
        rows, cols = int(rng.integers(1, 9)), int(rng.integers(0, 12))
        values = (
            rng.choice([0.0, -0.0, 1.5, np.inf, -np.inf], (rows, cols)) if trial % 2 else rng.normal(1, 1, (rows, cols))
        )
        values[rng.random((rows, cols)) < rng.random()] = np.nan
        fast = nanmedian_excluding_each_row(values)
        with monkeypatch.context() as m, np.errstate(invalid="ignore"):  # (inf - inf)
            m.setattr(native, "core", None)
            slow = nanmedian_excluding_each_row(values)
        assert np.array_equal(fast, slow, equal_nan=True)
        assert (np.signbit(fast) == np.signbit(slow)).all()  # the same zeros (and NaNs)


def few_values(rng: np.random.Generator, smallest: int) -> np.ndarray:
    """Up to 29 values: normal, small integers (ties), rounded (ties), or zeros of either sign and infinities."""
    n = int(rng.integers(smallest, 30))
    pick = int(rng.integers(0, 4))
    return [rng.normal(size=n), rng.integers(-2, 3, n).astype(float), np.round(rng.normal(size=n), 1),
            rng.choice([0.0, -0.0, 1.0, -np.inf, np.inf], n)][pick]  # fmt: skip


def assert_same_bits(got: float, want: float) -> None:
    assert np.array_equal(np.array([got]), np.array([want]), equal_nan=True)
    assert np.signbit(got) == np.signbit(want) or np.isnan(want)


def test_nanmedian_is_numpys_bit_for_bit() -> None:
    """The 1-D ``nanmedian`` gives np.nanmedian's value and type, with NaN, ties, zeros of either sign,
    infinities and all-NaN arrays."""
    rng = np.random.default_rng(11)
    for _ in range(3000):
        x = few_values(rng, 1)
        x[rng.random(len(x)) < 0.25] = np.nan
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            want, got = np.nanmedian(x), nanmedian(x)
        assert type(got) is type(want)
        assert_same_bits(got, want)


def test_median_is_numpys_bit_for_bit() -> None:
    """The 1-D ``median`` of a few values (an array or a list) gives ``float(np.median(x))``: odd and even
    counts, ties, zeros of either sign among the middle values, infinities, NaN and the empty array."""
    rng = np.random.default_rng(12)
    for trial in range(3000):
        x = few_values(rng, 0)
        if trial % 5 == 0:
            x[rng.random(len(x)) < 0.2] = np.nan
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the empty array's mean
            want = float(np.median(x))
            got = median(x if trial % 2 else x.tolist())
        assert type(got) is float
        assert_same_bits(got, want)
