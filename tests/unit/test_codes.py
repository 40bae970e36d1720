"""The codes of string columns (streams/engine/codes.py): the native core's codes equal the definition's."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from streams.engine import codes
from streams.engine.codes import Codebook, classes, distinct_pairs

NAMES = ["", "forward", "backward", "allreduce", "send", "recv", "optimizer", "comm", "sync", "compute"]
CLASSES = ("comm", "sync", "compute")


def _column(rng: random.Random, n: int, names: list[Any]) -> np.ndarray:
    """Values drawn from ``names``, some the same object again and again (as the decoder makes them), some
    equal strings that are other objects, some numpy strings."""
    out = np.empty(n, object)
    for i in range(n):
        name = rng.choice(names)
        form = rng.random()
        if isinstance(name, str) and form < 0.3:
            name = "".join(list(name))  # an equal string, another object
        elif isinstance(name, str) and form < 0.4:
            name = np.str_(name)
        out[i] = name
    return out


def _definition(monkeypatch: pytest.MonkeyPatch, fn: Any, *args: Any) -> Any:
    with monkeypatch.context() as m:
        m.setattr(codes, "native_codes", False)
        return fn(*args)


@pytest.mark.parametrize("seed", range(6))
def test_a_codebook_gives_the_definitions_codes_and_names(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    native_book, book = Codebook(), Codebook()
    for size in (0, 1, 7, 300, 3000):  # later columns bring new names, and names seen before
        column = _column(rng, size, rng.sample(NAMES, rng.randint(1, len(NAMES))))
        got = native_book.encode(column)
        want = _definition(monkeypatch, book.encode, column)
        assert got.dtype == want.dtype == np.int64
        assert got.tolist() == want.tolist()
        assert native_book.names == book.names and native_book.codes == book.codes
        assert [native_book.names[i] for i in got] == column.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_classes_equal_the_comparisons(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(seed)
    for size in (0, 1, 50, 4000):
        column = _column(rng, size, [*NAMES, None, 3, "Comm", "comm "])
        got = classes(column, CLASSES)
        want = _definition(monkeypatch, classes, column, CLASSES)
        assert got.dtype == want.dtype == np.int64
        assert got.tolist() == want.tolist()
        assert got.tolist() == [CLASSES.index(v) + 1 if v in CLASSES else 0 for v in column.tolist()]


def test_classes_of_an_unhashable_value_are_the_comparisons() -> None:
    column = np.empty(3, object)
    column[:] = ["comm", ["sync"], "compute"]
    assert classes(column, CLASSES).tolist() == [1, 0, 3]


@pytest.mark.skipif(not codes.native_codes, reason="the native core is not built (or DRIFTLOG_NATIVE=0)")
def test_the_native_core_answers_known_names_and_defers_new_ones() -> None:
    book = Codebook()
    book.encode(np.array(["a", "b"], object))
    out = np.empty(3, np.int64)
    assert codes.native.core is not None
    assert codes.native.core.codes_of(["b", "a", "b"], book.codes, -1, out) and out.tolist() == [2, 1, 2]
    assert not codes.native.core.codes_of(["b", "c"], book.codes, -1, np.empty(2, np.int64))
    assert codes.native.core.codes_of(["b", "c"], book.codes, 0, out[:2]) and out[:2].tolist() == [2, 0]


@pytest.mark.skipif(not codes.native_codes, reason="the native core is not built (or DRIFTLOG_NATIVE=0)")
def test_the_native_core_reads_an_object_array_in_place_and_defers_one_not_all_str() -> None:
    """An object array of str is read without a list: the same codes, equal strings of distinct objects
    alike; an array holding anything else is answered None (the caller passes its list)."""
    book = Codebook()
    book.encode(np.array(["alpha", "beta"], object))
    assert codes.native.core is not None
    column = np.empty(4, object)
    column[:] = ["beta", "alpha", "".join(["be", "ta"]), "beta"]
    assert column[2] is not column[0]
    out = np.empty(4, np.int64)
    assert codes.native.core.codes_of(column, book.codes, -1, out) and out.tolist() == [2, 1, 2, 2]
    column[1] = "gamma"
    assert codes.native.core.codes_of(column, book.codes, -1, out) is False
    column[1] = 3
    assert codes.native.core.codes_of(column, book.codes, 0, out) is None
    with pytest.raises(ValueError, match="not a contiguous object array"):
        codes.native.core.codes_of(column[::2], book.codes, 0, out[:2])


@pytest.mark.parametrize("seed", range(8))
def test_same_str_is_the_definitions_answer(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Parts of one name, mostly one object (as the decoder makes them), sometimes with an equal string of
    another object, another name, a numpy string, None or a number; some parts empty or strided."""
    rng = random.Random(seed)
    for _ in range(40):
        name = rng.choice(NAMES[1:])
        parts = []
        for _ in range(rng.randint(1, 5)):
            part = np.empty(rng.choice((0, 1, 3, 200)), object)
            part[:] = name
            if len(part) and rng.random() < 0.5:
                part[rng.randrange(len(part))] = rng.choice(["".join(list(name)), "other", np.str_(name), None, 3])
            parts.append(part[::2] if rng.random() < 0.1 else part)
        got = codes.same_str(parts, name)
        with monkeypatch.context() as m:
            m.setattr(codes, "native_same", False)
            want = codes.same_str(parts, name)
        assert got is want
        assert want == all((p == name).all() for p in parts)


@pytest.mark.skipif(not codes.native_same, reason="the native core is not built (or DRIFTLOG_NATIVE=0)")
def test_the_native_same_str_defers_what_it_cannot_tell() -> None:
    assert codes.native.core is not None
    column = np.empty(3, object)
    column[:] = ["job", "job", "".join(["j", "ob"])]
    assert codes.native.core.same_str([column, column[:0]], "job") is True
    column[1] = None
    assert codes.native.core.same_str([column], "job") is None
    column[0] = "other"
    assert codes.native.core.same_str([column], "job") is False
    assert codes.native.core.same_str([column[::2]], "other") is None
    assert codes.native.core.same_str([column], 3) is None


@pytest.mark.parametrize("seed", range(4))
def test_key_sums_are_the_sums_over_the_distinct_keys(seed: int) -> None:
    """Keys ascending and each sum added in the input's order, as over np.unique's inverse: also with a
    negative key and keys far larger than their count (which take the sort)."""
    from streams.engine.codes import key_sums

    rng = np.random.default_rng(seed)
    for low, high in ((0, 40), (-1, 40), (0, 10**9)):
        keys = rng.integers(low, high, size=int(rng.integers(0, 2000)))
        weights = rng.random(len(keys)) * 10.0 ** rng.integers(-3, 6, len(keys))
        present, inverse = np.unique(keys, return_inverse=True)
        found = key_sums(keys, weights)
        assert np.array_equal(found[0], present)
        assert np.array_equal(found[1], np.bincount(inverse.ravel(), weights, minlength=len(present)))


@pytest.mark.parametrize("seed", range(4))
def test_dense_numbers_the_distinct_tuples_in_their_sorted_order(seed: int) -> None:
    """As np.unique's inverse over the tuples: with few possible keys (marked in a table) and with keys spread
    far wider than their count (sorted), narrow columns after wide ones (the tuples so far numbered again
    before a column: the same order), int32 columns, negative values and empty columns included."""
    from streams.engine.codes import dense

    rng = np.random.default_rng(seed)
    for high in (3, 50, 10**6):
        for width in (1, 2, 3, 5):
            n = int(rng.integers(0, 3000))
            cols = [rng.integers(-5, h, size=n) for h in rng.choice([high, 4, 2000], width)]
            if width > 1:
                cols[1] = cols[1].astype(np.int32)
            want = np.unique(np.stack(cols), axis=1, return_inverse=True)[1] if n else np.zeros(0, np.int64)
            got = dense(*cols)
            assert got.dtype == np.int64
            assert np.array_equal(got, np.asarray(want, np.int64).ravel())
    wide = [np.array([5, 5, -3, 5]), np.array([2**40, 0, 7, 2**40]), np.array([0, 2**40, 1, 0])]
    assert dense(*wide).tolist() == [2, 1, 0, 2]  # (one key of all three would not fit an int64)
    assert dense(*wide).tolist() == np.unique(np.stack(wide), axis=1, return_inverse=True)[1].tolist()
    extreme = np.iinfo(np.int64)
    for cols in (
        [np.array([2**61, 0, 2**61, 3]), np.array([0, 2**61, 0, 2**61])],  # (two numbered columns past one key)
        [np.array([extreme.max, extreme.min, 0, extreme.max]), np.array([1, 0, 1, 1])],  # (a difference past int64)
        [np.array([2**64 - 1, 0, 2**63, 0], np.uint64), np.array([-1, 2, 0, 3])],
    ):
        tuples = list(zip(*(c.tolist() for c in cols), strict=True))  # (Python ints: exact at any width)
        assert dense(*cols).tolist() == [sorted(set(tuples)).index(t) for t in tuples]


@pytest.mark.parametrize("scale", [1, 2**58])
def test_distinct_pairs_are_numpys_unique_of_columns_by_either_form(scale: int) -> None:
    """Values too wide for one int64 key per pair (``scale`` 2**58) take numpy's unique of columns instead."""
    rng = np.random.default_rng(5)
    first, second = rng.integers(-3, 40, 3_000), rng.integers(-1, 7, 3_000) * scale
    expected = np.unique(np.stack([first, second]), axis=1)
    for got, want in zip(distinct_pairs(first, second), expected, strict=True):
        assert got.dtype == np.int64 and np.array_equal(got, want)
    assert all(len(c) == 0 for c in distinct_pairs(first[:0], second[:0]))
