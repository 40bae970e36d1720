"""Admission's screen tells the usual batch (every event time inside the window) by its ends: the masks and
the source's newest time it gives are those of looking at every row, on any event times (NaN, infinities,
-0.0, integers, float32, objects, empty and one-row batches), message after message."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from streams.contract.admission import Admission
from streams.contract.envelope import SampleBatch

SPECIAL = [math.nan, math.inf, -math.inf, -0.0, 0.0, 1e308, -1e308, 5e-324]


def by_rows(
    max_time: float, lateness: float, horizon: float, times: np.ndarray
) -> tuple[list[bool], list[bool], float]:
    """The masks of one batch, looked at row by row, and the newest time with its admitted rows."""
    future = times > horizon
    late = (times < max_time - lateness) & ~future
    admitted = times[~(late | future)]  # (a NaN among them: a NaN maximum, which no maximum takes)
    return late.tolist(), future.tolist(), float(admitted.max()) if len(admitted) else -math.inf


def random_times(rng: random.Random, base: float) -> np.ndarray:
    n = rng.choice([0, 1, 2, 5, 40])
    values = [rng.choice(SPECIAL) if rng.random() < 0.08 else base + rng.uniform(-400, 400) for _ in range(n)]
    kind = rng.choice(["f8", "f8", "i8", "f4", "O"])
    if kind == "i8":
        return np.nan_to_num(np.array(values), nan=0, posinf=2**62, neginf=-(2**62)).astype(np.int64)
    return np.array(values, dtype=object) if kind == "O" else np.array(values, np.float64).astype(kind)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (NaN and infinities compared)
@pytest.mark.parametrize("seed", range(3))
def test_the_screen_gives_the_masks_of_every_row(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        lateness, future_s = rng.choice([0.0, 1.0, 300.0, math.inf]), rng.choice([0.0, 10.0, 3600.0])
        admission, base = Admission(allowed_lateness=lateness, max_future=future_s), rng.choice([0.0, 1e9, -5.0])
        newest = -math.inf
        for _ in range(10):
            batches = [SampleBatch("op", np.arange(len(t)), {"start": t})
                       for t in (random_times(rng, base) for _ in range(rng.randint(0, 3)))]  # fmt: skip
            now = rng.choice([None, base, base + 100.0, math.nan])
            horizon = math.inf if now is None else now + future_s
            masks = admission.screen("s", batches, now)
            start = newest
            with np.errstate(invalid="ignore"):
                expected = [by_rows(start, lateness, horizon, b.columns["start"]) for b in batches]
            for (late, future), (want_late, want_future, admitted) in zip(masks, expected, strict=True):
                assert (late.tolist(), future.tolist()) == (want_late, want_future)
                assert late.dtype == future.dtype == np.bool_
                newest = max(newest, admitted)
            assert admission._sources["s"].max_time == newest or (
                math.isnan(newest) and math.isnan(admission._sources["s"].max_time)
            )
