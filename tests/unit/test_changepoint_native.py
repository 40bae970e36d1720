"""The change detector's tests in the native core (``ChangePoint._statistics``) give the numpy definition's
values bit for bit: on windows of every valid length (the first ones of a segment, full ones, one of each in
one call), with steps, slopes, outliers, quantised and constant values and huge or tiny scales; and a whole
detector fed the same series finds the same changes, with the same scores, either way."""

from __future__ import annotations

import numpy as np
import pytest

from audit import native
from streams.engine.detectors.changepoint import ChangePoint

pytestmark = pytest.mark.skipif(native.core is None or not hasattr(native.core, "change_tests"),
                                reason="native core not built")  # fmt: skip


def windows(rng: np.random.Generator, trial: int, rows: int, w: int) -> np.ndarray:
    """Series of a few kinds, ``rows`` x ``3 w``."""
    n = 3 * w
    x = rng.standard_normal((rows, n))
    kind = trial % 6
    if kind == 1:  # a step
        x[:, n // 2 :] += rng.uniform(-6, 6, (rows, 1))
    elif kind == 2:  # a hinge
        x += np.maximum(np.arange(n) - n // 3, 0) * rng.uniform(-0.2, 0.2, (rows, 1))
    elif kind == 3:  # outliers
        x[rng.random(x.shape) < 0.05] *= 40
    elif kind == 4:  # quantised, some constant
        x = np.round(x * 0.7)
        x[0] = 5.0
    elif kind == 5:  # a change of noise
        x[:, n // 2 :] *= rng.uniform(0.2, 5, (rows, 1))
    scale = 10.0 ** rng.integers(-6, 7)
    return np.asarray(scale * x + rng.uniform(-1e3, 1e3) * scale)


def fed(detector: ChangePoint, x: np.ndarray, upto: int) -> None:
    """``x``'s values up to column ``upto`` that the detector has not seen yet."""
    rows = np.arange(x.shape[0])
    for t in range(int(detector._seen[0]), upto):
        detector.update(rows, x[:, t])


@pytest.mark.parametrize("trial", range(24))
def test_the_native_statistics_equal_the_definition_bit_for_bit(trial: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(trial)
    rows = [1, 3, 17][trial % 3]
    detector = ChangePoint(rows, window=int(rng.choice([16, 40, 128])), min_side=int(rng.integers(2, 6)),
                           line_a=1e9, var_a=1e9)  # fmt: skip  # no alarm: every segment grows
    x = windows(rng, trial, rows, detector.window)
    checked = 0
    for upto in sorted(rng.integers(2 * detector.min_side, x.shape[1], 6)):
        fed(detector, x, int(upto))
        ready = np.flatnonzero(np.isfinite(detector._sigma) & (detector._n >= 2 * detector.min_side))
        if ready.size == 0:
            continue
        k = np.minimum(detector._n[ready], detector.window)
        k[0] = min(int(k[0]), 2 * detector.min_side)  # a short window among full ones
        got = detector._statistics(ready, k)
        with monkeypatch.context() as m:
            m.setattr(native, "core", None)
            expected = detector._statistics(ready, k)
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes()
        checked += 1
    assert checked


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_detector_finds_the_same_changes_with_and_without_the_native_core(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    x = np.concatenate([windows(rng, trial, 4, 128) for trial in range(6)])
    native_changes = []
    detector = ChangePoint(x.shape[0])
    rows = np.arange(x.shape[0])
    for t in range(x.shape[1]):
        native_changes += detector.update(rows, x[:, t])
    monkeypatch.setattr(native, "core", None)
    python_changes = []
    detector = ChangePoint(x.shape[0])
    for t in range(x.shape[1]):
        python_changes += detector.update(rows, x[:, t])
    assert len(native_changes) > 5  # the series change: there is something to compare
    assert native_changes == python_changes


@pytest.mark.parametrize(("window", "min_side"), [(40, 1), (128, 1), (128, 5)])
def test_a_constant_zero_series_gives_the_same_signed_zeros(
    window: int, min_side: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flat series of zeros (an idle counter): numpy's maximum and minimum give their second operand on a
    tie, so 0.0 against -0.0 keeps the sign the definition gives."""
    detector = ChangePoint(1, window=window, min_side=min_side, line_a=1e9, var_a=1e9)
    row = np.array([0])
    compared = 0
    for _ in range(3 * window):
        detector.update(row, np.array([0.0]))
        if not (np.isfinite(detector._sigma[0]) and detector._n[0] >= 2 * min_side):
            continue
        k = np.minimum(detector._n[row], window)
        got = detector._statistics(row, k)
        with monkeypatch.context() as m:
            m.setattr(native, "core", None)
            expected = detector._statistics(row, k)
        assert [a.tobytes() for a in got] == [b.tobytes() for b in expected]
        compared += 1
    assert compared > window


@pytest.mark.parametrize("every", [1, 3])
def test_a_round_of_bookkeeping_leaves_the_state_of_the_definition(every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ChangePoint._round`` (append, learn, which series are tested) in the native core: each call a random
    subset of the series, in random order, some values not finite; the windows, counts and noise bit for bit."""

    def run() -> tuple[list[object], list[bytes]]:
        rng = np.random.default_rng(every)
        x = np.concatenate([windows(rng, trial, 3, 64) for trial in range(6)])
        detector = ChangePoint(x.shape[0], window=64, warmup=12, every=every)
        changes: list[object] = []
        for t in range(x.shape[1]):
            rows = rng.permutation(x.shape[0])[: int(rng.integers(1, x.shape[0] + 1))]
            values = x[rows, t].copy()
            values[rng.random(rows.size) < 0.02] = np.nan
            changes += detector.update(rows, values)
        state = [detector._x, detector._y, detector._n, detector._seen, detector._sigma]
        return changes, [a.tobytes() for a in state]

    native_changes, native_state = run()
    monkeypatch.setattr(native, "core", None)
    python_changes, python_state = run()
    assert len(native_changes) > 5
    assert native_changes == python_changes
    assert native_state == python_state
