"""Periodic series (a checkpoint every N steps, a periodic load) are not read as change points; a change in
one still is."""

from __future__ import annotations

from typing import Any

import numpy as np

from streams.engine.detectors.seasonal import Deseason, period_of
from streams.engine.detectors.series_drift import SeriesDrift, series_key


def checkpoint(n: int, every: int, rng: np.random.Generator) -> np.ndarray:
    """Step time ~1 s with a checkpoint (+2.5 s) every ``every`` steps."""
    return 1.0 + 0.02 * rng.standard_normal(n) + np.where(np.arange(n) % every == every - 1, 2.5, 0.0)


def load(n: int, period: int, rng: np.random.Generator) -> np.ndarray:
    """A sine load of ``period`` samples over white noise (the change detector's noise model: autocorrelated
    noise is a matter of its own)."""
    x = 0.05 * rng.standard_normal(n)
    return 0.6 + 0.2 * np.sin(2 * np.pi * np.arange(n) / period) + x


def found(values: np.ndarray, learn: int = 128) -> list[dict[str, Any]]:
    detector = SeriesDrift(job="j", _season=Deseason(learn=learn))
    key = series_key("device:n0/gpu0", "util")
    out = []
    for i in range(0, len(values), 7):  # in batches, as a job's samples come
        chunk = values[i : i + 7]
        out += detector.update([key] * len(chunk), (10.0 * np.arange(i, i + len(chunk))).tolist(), chunk)
    return [f.as_dict() for f in out + detector.flush()]


def test_the_period_is_the_autocorrelation_s_true_peak_and_noise_has_none() -> None:
    rng = np.random.default_rng(1)
    assert period_of(checkpoint(128, 10, rng)) == 10
    assert period_of(load(128, 24, rng)) == 24
    ar = np.zeros(128)
    for i in range(1, 128):
        ar[i] = 0.9 * ar[i - 1] + rng.standard_normal()
    assert period_of(ar) == 0  # memory, not a season
    assert period_of(rng.standard_normal(128)) == 0
    assert period_of(np.linspace(0, 5, 128)) == 0  # a trend


def test_periodic_series_raise_nothing_after_their_period_is_learned() -> None:
    late, raw = [], []
    for seed in range(1, 6):
        rng = np.random.default_rng(seed)
        for x in [checkpoint(600, every, rng) for every in (7, 10, 25)] + [load(600, 24, rng)]:
            late += [f for f in found(x) if f["start"] >= 1280.0]
            raw += [f for f in found(x, learn=601) if f["start"] >= 1280.0]  # never deseasonalised
    # 20 series of 472 points after learning: the detector's own rate on noise (~9 per 100k) allows one
    assert len(late) <= 1, late
    assert len(raw) >= 20  # without it: measured 429 (with it: 1)


def test_a_level_shift_in_a_periodic_series_is_still_found_where_it_is() -> None:
    hits = 0
    for seed in range(1, 6):
        rng = np.random.default_rng(seed)
        x = load(600, 24, rng)
        x[400:] += 0.3
        after = [f for f in found(x) if f["start"] >= 1280.0]
        assert len(after) <= 1
        hits += sum(1 for f in after if abs(f["start"] - 4000.0) <= 50.0 and f["evidence"]["direction"] == "up")
    assert hits >= 4
