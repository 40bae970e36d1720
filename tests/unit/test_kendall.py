"""Kendall's tau against time with a p-value that holds for autocorrelated points (the early-warning
indicators: rising variance, rising lag-1 autocorrelation)."""

from __future__ import annotations

import numpy as np

from streams.engine.detectors.kendall import autocorrelation_trend, joint_trend, trend, variance_trend


def ar1(phi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    x, e = np.zeros(len(phi)), rng.standard_normal(len(phi))
    for i in range(1, len(phi)):
        x[i] = phi[i] * x[i - 1] + e[i]
    return x - x.mean()


def test_without_a_trend_the_p_values_hold_where_the_textbook_ones_do_not() -> None:
    rng = np.random.default_rng(3)
    for phi in (0.3, 0.9):
        ours, naive = [], []
        for _ in range(300):
            r = ar1(np.full(150, phi), rng)
            ours.append(variance_trend(r)[1])
            ours.append(autocorrelation_trend(r)[1])
            naive.append(trend(np.abs(r), np.zeros(149))[1])  # as if the points were independent
        assert np.mean(np.array(ours) <= 0.05) < 0.08  # measured: 0.03-0.06
        if phi == 0.9:
            assert np.mean(np.array(naive) <= 0.05) > 0.15  # measured: 0.27


def test_a_rising_variance_and_a_rising_memory_are_seen() -> None:
    rng = np.random.default_rng(4)
    louder = rng.standard_normal(300) * np.linspace(1.0, 4.0, 300)
    tau, p = variance_trend(louder)
    assert tau > 0.1 and p < 0.001  # measured: tau 0.24
    assert variance_trend(louder[::-1])[1] > 0.5  # a falling one is not a rise
    slower = [autocorrelation_trend(ar1(np.linspace(0.0, 0.9, 300), rng))[1] for _ in range(50)]
    assert np.median(slower) < 0.05


def test_short_or_constant_series_give_no_trend() -> None:
    assert trend(np.ones(3), np.zeros(3)) == (0.0, 1.0)
    assert variance_trend(np.zeros(50)) == (0.0, 0.5)  # no rise, no fall


def test_outliers_on_a_persistent_series_do_not_make_a_rise() -> None:
    """The null's memory comes from the signs of the lag products: a tenth of the points 5 spreads off
    neither lowers it nor, with it, the widening (the products' own estimate gave 7-10% at 0.01, phi 0.9)."""
    rng = np.random.default_rng(9)
    for phi in (0.5, 0.9):
        p = []
        for _ in range(300):
            x = ar1(np.full(150, phi), rng)
            x = x + np.where(rng.random(150) < 0.1, 5 * np.std(x) * rng.standard_normal(150), 0.0)
            p += [autocorrelation_trend(x - x.mean())[1], variance_trend(x - x.mean())[1]]
        assert np.mean(np.array(p) <= 0.05) < 0.09  # measured: 0.053-0.067
        assert np.mean(np.array(p) <= 0.01) < 0.03  # measured: 0.007-0.017


def test_the_variance_tau_and_the_joint_test_keep_their_level_on_steady_series_seen_through_noise_or_outliers() -> None:
    """Steady AR(1) series (coefficient 0, 0.6, 0.9; 150 points, started in the stationary state) with
    white measurement noise as large as their spread, with a tenth of the points 5 spreads off, or with
    Student-t (3) innovations, around their line and winsorised as the detector tests them. The variance's
    tau is near its level (the null's memory read from the signs is an AR(1)'s, and noise on a persistent
    series makes it an ARMA(1,1) whose memory lasts longer: at 0.9 with noise 6.1% at 0.05, 1.8% at 0.01,
    2,000 series). The joint test is below its level where each tau holds its own, whatever their
    correlation; with noise at 0.9 it inherits their excess (5.9% at 0.05, 1.1% at 0.01)."""
    from streams.engine.detectors.early_warning import detrended, winsorised

    rng = np.random.default_rng(12)
    for kind in ("noise", "outliers", "t3"):
        variance, joint = [], []
        for phi in (0.0, 0.6, 0.9):
            for _ in range(300):
                e = rng.standard_t(3, 150) if kind == "t3" else rng.standard_normal(150)
                x = np.zeros(150)
                x[0] = e[0] / np.sqrt(1 - phi * phi)
                for i in range(1, 150):
                    x[i] = phi * x[i - 1] + e[i]
                spread = np.std(x)
                if kind == "noise":
                    x = x + spread * rng.standard_normal(150)
                elif kind == "outliers":
                    x = x + np.where(rng.random(150) < 0.1, 5 * spread * rng.standard_normal(150), 0.0)
                y = winsorised(detrended(x))
                variance.append(variance_trend(y)[1])
                joint.append(joint_trend(y)[1])
        v, j = np.array(variance), np.array(joint)
        assert 0.025 < np.mean(v <= 0.05) < 0.075, kind  # measured: 0.046-0.052
        assert np.mean(v <= 0.01) < 0.025, kind  # measured: 0.009-0.014
        assert np.mean(j <= 0.05) < 0.05 and np.mean(j <= 0.01) < 0.015, kind  # measured: 0.024-0.032, 0.001-0.009
