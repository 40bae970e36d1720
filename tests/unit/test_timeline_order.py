"""The canonical order of an epoch's samples: by event time, then by every other column — checked against
a sort by every column at once, on batches with many equal event times, strings, NaN and several parts."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from streams.contract.envelope import SampleBatch
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
