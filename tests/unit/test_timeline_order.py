"""The canonical order of an epoch's samples: by event time, then by every other column — checked against
a sort by every column at once, on batches with many equal event times, strings, NaN and several parts."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from streams.contract.envelope import SampleBatch
from streams.engine import timeline
from streams.engine.timeline import canonical


def full_sort(kind: str, parts: list[SampleBatch]) -> dict[str, npt.NDArray[Any]]:
    """The definition: one lexsort over event time, then every column by name."""
    names = sorted(parts[0].columns)
    cols = {n: np.concatenate([p.columns[n] for p in parts]) for n in names}
    keys: list[npt.NDArray[Any]] = []
    for n in reversed(names):
        v = cols[n]
        if v.dtype.kind == "O":
            keys.append(np.unique(v.astype(str), return_inverse=True)[1].ravel())
        else:
            keys.append(np.nan_to_num(v, nan=-np.inf) if v.dtype.kind == "f" else v)
    keys.append(cols["start"])
    order = np.lexsort(keys)
    return {k: v[order] for k, v in cols.items()}


def batch(rng: np.random.Generator, n: int, distinct_times: int) -> SampleBatch:
    duration = rng.choice([0.5, 0.25, np.nan], n)
    cols = {
        "job": rng.choice(np.array(["b", "a", "c"], dtype=object), n),
        "rank": rng.integers(0, 4, n),
        "start": np.round(rng.integers(0, distinct_times, n) * 0.001, 3),
        "duration": duration,
        "op": rng.choice(np.array(["x", "allreduce", "y"], dtype=object), n),
    }
    return SampleBatch("op", np.arange(n, dtype=np.int64), cols)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("distinct_times", [1, 3, 50, 10_000])
def test_canonical_is_the_sort_by_every_column(seed: int, distinct_times: int) -> None:
    rng = np.random.default_rng(seed)
    parts = [batch(rng, int(rng.integers(1, 200)), distinct_times) for _ in range(int(rng.integers(1, 4)))]
    got = canonical("op", parts).columns
    want = full_sort("op", parts)
    for name, values in want.items():
        assert np.array_equal(got[name].astype(str), values.astype(str)), name


def test_the_order_does_not_depend_on_how_rows_were_split() -> None:
    rng = np.random.default_rng(9)
    whole = batch(rng, 300, 20)
    shuffled = whole.select(rng.permutation(300))
    parts = [shuffled.select(slice(0, 100)), shuffled.select(slice(100, 300))]
    one, two = canonical("op", [whole]).columns, canonical("op", parts).columns
    for name in one:
        assert np.array_equal(one[name].astype(str), two[name].astype(str)), name


def every_type(rng: np.random.Generator, n: int) -> SampleBatch:
    """Columns of every type the engine sorts, with the values a sort can get wrong: NaN (event time: last;
    elsewhere: as -inf), ±inf, -0.0 beside 0.0, non-ASCII strings (code point order), booleans."""
    floats = np.array([np.nan, -np.inf, np.inf, -0.0, 0.0, 1.5, -2.0])
    names = np.array(["", "a", "b", "é", "Z", "ab", "\U0001f600", "a\x00"], dtype=object)
    cols = {
        "start": rng.choice(floats, n),
        "blocking": rng.random(n) < 0.5,
        "device": rng.choice(names, n),
        "duration": rng.choice(floats, n),
        "rank": rng.integers(-2, 3, n),
        "group": np.array([str(s) for s in rng.choice(names, n)], dtype=object),  # equal strings, other objects
    }
    return SampleBatch("op", np.arange(n, dtype=np.int64), cols)


def by_definition(kind: str, parts: list[SampleBatch], monkeypatch: pytest.MonkeyPatch) -> SampleBatch:
    with monkeypatch.context() as m:
        m.setattr(timeline, "_NATIVE_SORT", False)
        return canonical(kind, parts)


@pytest.mark.skipif(not timeline._NATIVE_SORT, reason="native core not built")
@pytest.mark.parametrize("seed", range(8))
def test_the_native_sort_gives_the_definitions_order(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(seed)
    parts = [every_type(rng, int(rng.integers(1, 400))) for _ in range(int(rng.integers(1, 4)))]
    got, want = canonical("op", parts).columns, by_definition("op", parts, monkeypatch).columns
    for name, values in want.items():
        assert got[name].dtype == values.dtype
        assert np.array_equal(got[name].astype(str), values.astype(str)), name
        if values.dtype.kind == "f":  # the same bits: -0.0 and 0.0 (equal as keys) keep their input order
            assert np.array_equal(np.signbit(got[name]), np.signbit(values)), name


def test_a_column_the_native_sort_does_not_read_is_ordered_by_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    part = every_type(rng, 200)
    part.columns["device"][::7] = None  # not a str: ordered by its text
    part.columns["rank"] = part.columns["rank"].astype(np.int32)
    got, want = canonical("op", [part]).columns, by_definition("op", [part], monkeypatch).columns
    for name, values in want.items():
        assert np.array_equal(got[name].astype(str), values.astype(str)), name


def test_columns_of_one_value_are_written_out_as_they_sort() -> None:
    """A column of one value in every row (a job's name, spelled by other objects in each row; an unused flag
    or peer) is written out whole, not sorted: the same batch; a float column of 0.0 and -0.0 (equal, not the
    same) is still ordered."""
    rng = np.random.default_rng(4)
    parts = []
    for n in (50, 1, 120):
        part = batch(rng, n, 5)
        part.columns["job"] = np.array(["".join(["l", "l", "m"]) for _ in range(n)], dtype=object)
        part.columns["blocking"] = np.zeros(n, np.bool_)
        part.columns["peer"] = np.full(n, -1, np.int64)
        part.columns["duration"] = rng.choice([0.0, -0.0], n)
        parts.append(part)
    got, want = canonical("op", parts).columns, full_sort("op", parts)
    assert list(got) == list(want)
    for name, values in want.items():
        assert got[name].dtype == values.dtype, name
        assert np.array_equal(got[name].astype(str), values.astype(str)), name


@pytest.mark.parametrize("values", [[1, True, 1.0], [0, -0.0, False], [np.str_("a"), "a"]])
def test_objects_equal_but_not_alike_keep_their_own_rows(values: list[Any]) -> None:
    """A column of objects that are equal by ``==`` but not alike (not the contract's ``str``) is not taken
    for one value written out once: each row keeps its own object, as a sort keeps it."""
    rng = np.random.default_rng(5)
    part = batch(rng, len(values), 1)
    column = np.empty(len(values), object)
    column[:] = values
    part.columns["peer"] = column
    got = canonical("op", [part]).columns["peer"]
    assert sorted(map(repr, got.tolist())) == sorted(map(repr, values))


def same_batch(got: SampleBatch, want: SampleBatch) -> None:
    assert list(got.columns) == list(want.columns)
    for name, values in want.columns.items():
        assert got.columns[name].dtype == values.dtype, name
        assert np.array_equal(got.columns[name].astype(str), values.astype(str)), name
        if values.dtype.kind == "f":  # the same bits: -0.0 and 0.0 (equal as keys) keep their input order
            assert np.array_equal(np.signbit(got.columns[name]), np.signbit(values)), name


@pytest.mark.skipif(not timeline._NATIVE_GATHER, reason="native core not built")
@pytest.mark.parametrize("seed", range(8))
def test_the_native_join_and_gather_gives_the_definitions_batch(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts joined, ordered and gathered in one native call: the definition's batch, columns of one value
    (a job's name spelled by other objects, an unused flag) included, however many parts."""
    rng = np.random.default_rng(seed)
    parts = [every_type(rng, int(rng.integers(1, 300))) for _ in range(int(rng.integers(1, 5)))]
    for part in parts:
        n = len(part)
        part.columns["job"] = np.array(["".join(["l", "l", "m"]) for _ in range(n)], dtype=object)
        part.columns["peer"] = np.full(n, -1, np.int64)
    calls = []
    gather = timeline.native.core.canonical_gather  # type: ignore[union-attr]
    monkeypatch.setattr(timeline.native.core, "canonical_gather", lambda *a: calls.append(1) or gather(*a))
    got = canonical("op", parts)
    assert calls and sum(map(len, parts)) == len(got)
    same_batch(got, by_definition("op", parts, monkeypatch))


@pytest.mark.skipif(not timeline._NATIVE_GATHER, reason="native core not built")
def test_parts_of_another_type_or_not_contiguous_are_joined_by_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part whose column is of another type than the first part's (joined, numpy promotes it), or not
    contiguous, or booleans beside integers: the native call leaves the batch to the definition."""
    rng = np.random.default_rng(6)
    for change in ("int32", "strided", "bool_as_int", "float_times_as_int"):
        parts = [every_type(rng, 120), every_type(rng, 80)]
        second = parts[1].columns
        if change == "int32":
            second["rank"] = second["rank"].astype(np.int32)
        elif change == "strided":
            second["duration"] = np.repeat(second["duration"], 2)[::2]
        elif change == "bool_as_int":
            second["blocking"] = second["blocking"].astype(np.int64)
        else:
            second["start"] = np.arange(80, dtype=np.int64)
        same_batch(canonical("op", parts), by_definition("op", parts, monkeypatch))


@pytest.mark.skipif(not timeline._NATIVE_GATHER, reason="native core not built")
def test_a_large_epoch_is_joined_by_the_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above ``NATIVE_GATHER_ROWS`` the native call (which holds the parts, its copy and the output at once)
    is not made: the definition, consuming the parts, holds an epoch's rows about once."""
    rng = np.random.default_rng(9)
    parts = [every_type(rng, 150), every_type(rng, 150)]
    calls = []
    gather = timeline.native.core.canonical_gather  # type: ignore[union-attr]
    monkeypatch.setattr(timeline.native.core, "canonical_gather", lambda *a: calls.append(1) or gather(*a))
    monkeypatch.setattr(timeline, "NATIVE_GATHER_ROWS", 299)
    want = by_definition("op", parts, monkeypatch)
    same_batch(canonical("op", list(parts)), want)
    assert not calls
    monkeypatch.setattr(timeline, "NATIVE_GATHER_ROWS", 300)
    same_batch(canonical("op", list(parts)), want)
    assert calls


@pytest.mark.skipif(not timeline._NATIVE_GATHER, reason="native core not built")
def test_the_native_gather_is_safe_with_odd_buffers() -> None:
    """An output that is one of the inputs gets the inputs' objects, none freed before it is read (run under
    PYTHONMALLOC=debug it crashed); a buffer of floats at an address not a multiple of 8 is not read as floats
    (the call leaves it to the definition)."""
    assert timeline.native.core is not None
    n = 500
    names = np.empty(n, object)
    names[:] = [f"v{n - i:06d}" + "x" * 50 for i in range(n)]  # (each held by the array alone)
    before = sorted(names.tolist())
    times = np.zeros(n)
    outs = [np.empty(n), names]
    assert timeline.native.core.canonical_gather([{"time": times, "s": names}], ["time", "s"], "fs", outs)
    assert sorted(names.tolist()) == before  # (the same strings, each once: alive)
    odd = memoryview(bytearray(8 * 3 + 1))[1:].cast("d")
    assert not timeline.native.core.canonical_gather([{"time": odd}], ["time"], "f", [np.empty(3)])
