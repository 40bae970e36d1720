"""The literature's early-warning indicators (rolling variance and lag-1 autocorrelation, Kendall's tau,
surrogate series) and the surrogates' null model."""

from __future__ import annotations

import numpy as np

from streams.engine.detectors.rolling_trend import around_line, kendall_rows, rolling_indicators, rolling_trend
from streams.engine.detectors.surrogates import draw, hidden_ar1, seeded


def ar1(phi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x, e = np.zeros(len(phi)), rng.standard_normal(len(phi))
    for i in range(1, len(phi)):
        x[i] = phi[i] * x[i - 1] + e[i]
    return x


def test_rolling_indicators_are_those_of_each_window() -> None:
    r = around_line(ar1(np.full(90, 0.7), np.random.default_rng(1)))
    variance, autocorrelation = rolling_indicators(r[None, :], 30)
    for i in (0, 17, 60):
        w = r[i : i + 30] - r[i : i + 30].mean()
        assert np.isclose(variance[0, i], np.mean(w * w))
        assert np.isclose(autocorrelation[0, i], (w[1:] @ w[:-1]) / (w @ w))
    assert variance.shape == (1, 61)


def test_kendall_rows_counts_concordant_pairs() -> None:
    u = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0], [1.0, 3.0, 2.0, 4.0], [2.0, 2.0, 2.0, 2.0]])
    assert np.allclose(kendall_rows(u), [1.0, -1.0, 4 / 6, 0.0])


def test_without_a_change_in_memory_the_surrogate_p_values_hold() -> None:
    rng = np.random.default_rng(2)
    p = np.array([rolling_trend(ar1(np.full(100, phi), rng), 199)[1] for phi in (0.3, 0.8) for _ in range(60)])
    assert np.all(np.mean(p <= 0.1, axis=0) < 0.2)  # measured: 0.04-0.06 at 0.1 (120 draws)


def test_a_slowing_down_is_seen_and_the_same_points_give_the_same_p_values() -> None:
    rng = np.random.default_rng(3)
    runs = [ar1(np.linspace(0.1, 0.95, 150), rng) for _ in range(30)]
    p = np.array([rolling_trend(x, 199)[1] for x in runs])
    assert np.median(p[:, 1]) < 0.1  # the autocorrelation's rise (measured: median 0.025)
    assert np.array_equal(rolling_trend(runs[0], 199)[1], p[0])


def test_the_null_model_finds_the_memory_behind_white_noise() -> None:
    rng = np.random.default_rng(4)
    hidden = ar1(np.full(20_000, 0.8), rng)
    seen = hidden + np.std(hidden) * rng.standard_normal(20_000)  # half the variance is noise
    phi, share = hidden_ar1(seen - seen.mean())
    assert abs(phi - 0.8) < 0.05 and abs(share - 0.5) < 0.05
    assert hidden_ar1(seen - seen.mean(), noise=False)[1] == 1.0
    part = seen[:200] - seen[:200].mean()
    drawn = draw(part, 4, seeded(part))
    assert drawn.shape == (4, 200) and np.array_equal(drawn, draw(part, 4, seeded(part)))
