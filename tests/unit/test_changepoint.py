"""The scale-free change detector: two-sided, located at the best split, restarting, scale-free, vectorised."""

from __future__ import annotations

import pickle
import warnings
from fractions import Fraction

import numpy as np
import pytest

from streams.engine.detectors.changepoint import Change, ChangePoint, _fit, _nanmedian_of_tails


def run(x: np.ndarray) -> list[Change]:
    """Feed each row of ``x`` (series × time) as one series, all series together."""
    detector = ChangePoint(x.shape[0])
    rows = np.arange(x.shape[0])
    return [c for t in range(x.shape[1]) for c in detector.update(rows, x[:, t])]


def noise(n: int = 400, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_level_shift_up_or_down_is_found_at_its_start(sign: float) -> None:
    x = noise()
    x[200:] += sign * 3.0
    changes = run(x[None, :])
    assert [(c.kind, c.direction) for c in changes] == [("level", "up" if sign > 0 else "down")]
    assert abs(changes[0].at - 200) <= 5  # the margin change-point scores allow
    assert 200 < changes[0].detected <= 215  # found after the fact, placed at the best split
    assert changes[0].after - changes[0].before == pytest.approx(3.0 * sign, abs=0.5)


@pytest.mark.parametrize("scale, level", [(1e-6, 0.0), (1.0, -50.0), (1e6, 3e9), (1e-3, -1e-3)])
def test_the_same_shape_gives_the_same_changes_at_any_scale_and_level(scale: float, level: float) -> None:
    x = noise()
    x[150:] += 2.5
    x[300:] -= 4.0
    reference = [(c.at, c.kind, c.direction) for c in run(x[None, :])]
    assert [(c.at, c.kind, c.direction) for c in run(level + scale * x[None, :])] == reference
    assert [c[0] for c in reference] == [150, 300]  # restarted after the first and found the second


def test_stationary_noise_raises_nothing() -> None:
    x = np.random.default_rng(3).standard_normal((20, 1000))
    assert run(x) == []


def test_a_steady_trend_is_one_change_of_slope_not_an_alarm_per_step() -> None:
    x = noise(600)
    x[200:] += 0.08 * np.arange(400)  # from 200 on, up by 0.08 noise units per step
    changes = run(x[None, :])
    assert len(changes) == 1
    assert changes[0].kind in ("slope", "level") and changes[0].direction == "up"
    assert abs(changes[0].at - 200) <= 30


def test_a_change_of_noise_is_found() -> None:
    x = noise(600)
    x[300:] *= 4.0
    changes = run(x[None, :])
    assert changes and changes[0].kind == "variance" and changes[0].direction == "up"
    assert abs(changes[0].at - 300) <= 20


def test_a_single_outlier_is_not_a_change() -> None:
    x = noise()
    x[250] += 40.0
    assert run(x[None, :]) == []


def test_series_are_independent_of_each_other_and_of_their_order() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 300))
    x[2, 120:] += 3.0
    x[5, 200:] -= 3.0
    together = {(c.series, c.at, c.kind) for c in run(x)}
    alone = {(i, c.at, c.kind) for i in range(6) for c in run(x[i : i + 1])}
    assert together == alone
    assert sorted((series, kind) for series, _, kind in together) == [(2, "level"), (5, "level")]
    assert all(abs(at - {2: 120, 5: 200}[series]) <= 5 for series, at, _ in together)


def test_state_is_a_fixed_size_however_long_it_runs() -> None:
    detector = ChangePoint(50)
    rows = np.arange(50)
    rng = np.random.default_rng(5)
    for _ in range(300):
        detector.update(rows, rng.standard_normal(50))
    size = len(pickle.dumps(detector))
    for _ in range(3000):
        detector.update(rows, rng.standard_normal(50))
    assert len(pickle.dumps(detector)) == size


@pytest.mark.parametrize("k", [10, 37, 128])
def test_terms_kept_per_length_equal_those_computed_per_series(k: int) -> None:
    """The tests' terms that depend on the windows' lengths only are kept per length (one column for all
    series): element for element the values computed for each series apart."""
    from streams.engine.detectors.changepoint import _line_terms, _mean_terms, _per_column

    lengths = np.full(5, k, np.int64)
    for terms in (_line_terms, _mean_terms):
        kept, apart = _per_column(terms, 128, lengths, 5), terms(128, lengths, 5)
        for one, each in zip(kept, apart, strict=True):
            assert np.array_equal(np.broadcast_to(one, np.broadcast_shapes(one.shape, each.shape)),
                                  np.broadcast_to(each, np.broadcast_shapes(one.shape, each.shape)),
                                  equal_nan=one.dtype.kind == "f")  # fmt: skip


def test_the_kept_terms_are_read_only() -> None:
    """Terms kept per length are shared by every test of that length: none of them can be written."""
    from streams.engine.detectors.changepoint import _line_terms, _mean_terms, _per_column

    lengths = np.full(3, 40, np.int64)
    for terms in (_line_terms, _mean_terms):
        kept = _per_column(terms, 64, lengths, 5)
        assert not any(a.flags.writeable for a in kept if isinstance(a, np.ndarray))


def test_a_series_tested_alone_gives_the_bits_it_gives_tested_with_others() -> None:
    """Which series share a test depends on how the input was batched into messages: a series' statistic,
    split and kind must not (numpy adds a lone column pairwise, several columns row after row)."""
    from streams.engine.detectors.changepoint import _line_glr

    rng = np.random.default_rng(11)
    for _ in range(200):
        w, n = 64, int(rng.integers(2, 9))
        k = rng.integers(12, w + 1, n)
        z = rng.standard_normal((w, n)) * rng.uniform(0.1, 1e3) + rng.uniform(-1e3, 1e3)
        valid = np.arange(w)[:, None] >= (w - k)[None, :]
        z = np.where(valid, z, 0.0)
        together = _line_glr(z, valid, k, 5)
        for j in range(n):
            alone = _line_glr(np.ascontiguousarray(z[:, j : j + 1]), valid[:, j : j + 1], k[j : j + 1], 5)
            assert alone[0][0].tobytes() == together[0][j].tobytes()
            assert (alone[1][0], alone[2][0]) == (together[1][j], together[2][j])


def test_changes_do_not_depend_on_how_series_were_batched_into_updates() -> None:
    """The same values per series, updated all at once or one series per call: the same changes."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal((400, 6)) * 7.0 + 100.0
    values[250:, 2] += 40.0  # a level shift in one series
    values[180:, 4] += np.linspace(0.0, 60.0, 220)  # a slope in another
    together, apart = ChangePoint(6), ChangePoint(6)
    found_together: list[tuple[int, int, bytes]] = []
    found_apart: list[tuple[int, int, bytes]] = []
    for t in range(values.shape[0]):
        for c in together.update(np.arange(6), values[t]):
            found_together.append((t, c.series, pickle.dumps(c)))
        for row in range(6):
            for c in apart.update(np.array([row]), values[t, row : row + 1]):
                found_apart.append((t, c.series, pickle.dumps(c)))
    assert found_together, "the shifts were found"
    assert sorted(found_together) == sorted(found_apart)


def test_the_noise_medians_equal_nanmedian_bit_for_bit() -> None:
    """The windows' medians (rows whose values are their last ``count``) equal ``np.nanmedian``'s: ties,
    quantised values, rows of several counts at once, an empty row and a stray NaN."""
    rng = np.random.default_rng(0)
    for trial in range(600):
        rows, w = int(rng.integers(1, 40)), int(rng.choice([16, 40, 128]))
        a = rng.standard_normal((rows, w - 1)) * 10.0 ** rng.integers(-8, 8)
        if trial % 3 == 0:
            a = np.round(a)
        count = rng.integers(0, w, rows) if trial % 2 else np.full(rows, int(rng.integers(1, w)))
        a[np.arange(w - 1)[None, :] < (w - 1 - count)[:, None]] = np.nan
        if trial % 7 == 0:
            a[0, -1] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows, as np.nanmedian warns of them
            assert _nanmedian_of_tails(a, count).tobytes() == np.nanmedian(a, axis=1).tobytes()


@pytest.mark.parametrize("every", [1, 4])
def test_a_series_updated_alone_is_updated_as_among_others(every: int) -> None:
    """One series a call (a job's step time) takes a path of its own: the same windows, noise and changes,
    bit for bit, as the same series updated with others, through steps, a change of noise, NaN and a run of
    equal values."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 700))
    x[:, 200:] += 4.0
    x[:, 400:] *= 3.0
    x[:, 500:540] = 7.0
    x[0, 300] = np.nan
    alone, together = ChangePoint(1, every=every), ChangePoint(3, every=every)
    found_alone, found_together = [], []
    for t in range(x.shape[1]):
        found_alone += alone.update(np.array([0]), x[:1, t])
        found_together += [c for c in together.update(np.arange(3), x[:, t]) if c.series == 0]
    assert len(found_alone) >= 3  # the changes were found: there is something to compare
    assert found_alone == found_together
    for name in ("_x", "_y", "_n", "_seen", "_sigma"):
        assert getattr(alone, name)[0].tobytes() == getattr(together, name)[0].tobytes(), name


def test_changes_not_kept_restart_their_series_all_the_same() -> None:
    """``update(..., keep)`` reports the changes ``keep`` keeps, the same ones (slopes included) as without it,
    and leaves the detector in the same state: a change not kept still restarts its series."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 600))
    x[:, 150:] += 5.0
    x[1:3, 300:] += np.linspace(0.0, 40.0, 300)
    x[:, 450:] *= 4.0
    picky, plain = ChangePoint(4, every=2), ChangePoint(4, every=2)

    def keep(c: Change) -> bool:
        assert np.isnan(c.slope_before) and np.isnan(c.slope_after)  # not fitted before it is kept
        return c.series % 2 == 0

    kept, every = [], []
    for t in range(x.shape[1]):
        kept += picky.update(np.arange(4), x[:, t], keep)
        every += plain.update(np.arange(4), x[:, t])
    assert {c.series for c in every} == {0, 1, 2, 3}  # changes in every series: some not kept
    assert kept == [c for c in every if c.series % 2 == 0]
    for name in ("_x", "_y", "_n", "_seen", "_sigma"):
        assert getattr(picky, name).tobytes() == getattr(plain, name).tobytes(), name


def test_a_reports_line_is_the_exact_least_squares_line_to_rounding() -> None:
    """The slope and value of ``_fit`` against the exact (rational) least-squares line. (It was polyfit's bit
    for bit, but polyfit's LAPACK call gives other bits on other CPUs: tests/unit/test_cpu_independent.py.)"""
    rng = np.random.default_rng(4)
    for n in [2, 3, 7, 40, 128]:
        for x in (rng.random(n) * 1e9 + 1e6, rng.random(n) * 1e-9, np.ones(n), np.zeros(n)):
            for at in (-0.5, n - 1.0):
                values, middle = [Fraction(v) for v in x], Fraction(n - 1, 2)
                mean = sum(values) / n
                slope = sum((v - mean) * (i - middle) for i, v in enumerate(values))
                slope /= sum((i - middle) ** 2 for i in range(n))
                got = _fit(x, at)
                scale = float(np.abs(x).max())
                assert abs(Fraction(got[0]) - slope) <= 4e-16 * scale / n
                assert abs(Fraction(got[1]) - mean - slope * (Fraction(at) - middle)) <= 4e-16 * scale
