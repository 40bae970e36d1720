import pickle

import numpy as np

from streams.engine.detectors.rows import with_rows


def test_rows_are_added_after_the_arrays_own() -> None:
    a = np.arange(6.0).reshape(3, 2)
    b = with_rows(a, 2, np.nan)
    assert b.shape == (5, 2)
    np.testing.assert_array_equal(b[:3], a)
    assert np.isnan(b[3:]).all()
    c = with_rows(np.array([1, 2], np.int64), 3, np.array([7, 8, 9]))
    assert c.tolist() == [1, 2, 7, 8, 9]
    assert c.dtype == np.int64


def test_a_few_rows_more_take_the_room_without_a_copy() -> None:
    a = with_rows(np.zeros((0, 4)), 64)
    a[:] = 1.0
    b = with_rows(a, 3, 2.0)
    assert np.shares_memory(a, b)  # the room of a's buffer (64 + 64 // 8 rows)
    assert b[:64].sum() == 256 and (b[64:] == 2.0).all()
    full = with_rows(b, 64)
    assert not np.shares_memory(b, full)
    np.testing.assert_array_equal(full[:67], b)
    assert (full[67:] == 0).all()


def test_a_restored_array_grows_as_its_own() -> None:
    a = with_rows(np.ones((0, 2)), 16, 1.0)
    restored = pickle.loads(pickle.dumps(a))
    grown = with_rows(restored, 1, 5.0)
    np.testing.assert_array_equal(grown, np.r_[np.ones((16, 2)), [[5.0, 5.0]]])
    assert (a == 1.0).all()
