"""A round of the change detector in the native core (``ChangePoint._round``: the bookkeeping, the tests and
their scores; ``ChangePoint._alarms``: the tests and scores of given series) gives the numpy definition's alarms
and state bit for bit: on windows of every valid length (the first ones of a segment, full ones, one of each in
one call), with steps, slopes, outliers, quantised, constant, huge and tiny values, values that are not finite
and short segments; and a whole detector fed the same series finds the same changes, with the same scores,
either way."""

from __future__ import annotations

import numpy as np
import pytest

from audit import native
from streams.engine.detectors.changepoint import Change, ChangePoint

pytestmark = pytest.mark.skipif(native.core is None or not hasattr(native.core, "change_round"),
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


THRESHOLDS = {  # line_a, line_b, var_a, var_b: the line test's statistic alone, the variance test's, both
    "line": (1e-3, 0.0, 1e30, 0.0),
    "variance": (1e30, 0.0, 1e-3, 0.0),
    "both": (0.5, 0.1, 0.5, 0.1),
}


def alarms_both_ways(detector: ChangePoint, rows: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Per threshold setting: the alarms of ``rows`` natively and by the definition, the same to the bit (the
    score's bits; the statistic's, over a threshold of 1e-3 and no growth with ``n``); how many each."""
    kept = detector.line_a, detector.line_b, detector.var_a, detector.var_b
    counts = []
    for thresholds in THRESHOLDS.values():
        detector.line_a, detector.line_b, detector.var_a, detector.var_b = thresholds
        got = detector._alarms(rows)
        with monkeypatch.context() as m:
            m.setattr(native, "core", None)
            expected = detector._alarms(rows)
        assert [(*a[:3], a.score.hex()) for a in got] == [(*a[:3], a.score.hex()) for a in expected]
        counts.append(len(got))
    detector.line_a, detector.line_b, detector.var_a, detector.var_b = kept
    return counts


@pytest.mark.parametrize("trial", range(32))
def test_the_native_alarms_equal_the_definition_bit_for_bit(trial: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(trial)
    rows = [1, 3, 17][trial % 3]
    detector = ChangePoint(rows, window=int(rng.choice([16, 40, 128])), min_side=int(rng.integers(2, 6)),
                           line_a=1e9, var_a=1e9)  # fmt: skip  # no alarm: every segment grows
    x = windows(rng, trial, rows, detector.window)
    alarms = 0
    for upto in sorted(rng.integers(2 * detector.min_side, x.shape[1], 6)):
        fed(detector, x, int(upto))
        ready = np.flatnonzero(np.isfinite(detector._sigma) & (detector._n >= 2 * detector.min_side))
        if ready.size == 0:
            continue
        n = int(detector._n[ready[0]])
        detector._n[ready[0]] = 2 * detector.min_side + int(rng.integers(0, 4))  # a short window (among others)
        alarms += sum(alarms_both_ways(detector, ready, monkeypatch))
        detector._n[ready[0]] = n
    assert alarms


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
def test_a_constant_zero_series_raises_no_alarm_either_way(
    window: int, min_side: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flat series of zeros (an idle counter): numpy's maximum and minimum give their second operand on a
    tie, so 0.0 against -0.0 keeps the sign the definition gives (a statistic of -0.0 raises no alarm either)."""
    detector = ChangePoint(1, window=window, min_side=min_side, line_a=1e9, var_a=1e9)
    row = np.array([0])
    compared = 0
    for _ in range(3 * window):
        detector.update(row, np.array([0.0]))
        if not (np.isfinite(detector._sigma[0]) and detector._n[0] >= 2 * min_side):
            continue
        assert not any(alarms_both_ways(detector, row, monkeypatch))
        compared += 1
    assert compared > window


@pytest.mark.parametrize("every", [1, 3])
def test_a_round_of_bookkeeping_leaves_the_state_of_the_definition(every: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ChangePoint._round`` (append, learn, which series are tested, their tests) in the native core: each call
    a random subset of the series, in random order, some values not finite; the changes, and the windows, counts
    and noise, bit for bit."""

    def run() -> tuple[list[tuple[object, ...]], list[bytes]]:
        rng = np.random.default_rng(every)
        x = np.concatenate([windows(rng, trial, 3, 64) for trial in range(6)])
        x[rng.random(x.shape) < 0.02] = np.nan
        return fed_at_random(ChangePoint(x.shape[0], window=64, warmup=12, every=every), x, rng)

    native_changes, native_state = run()
    monkeypatch.setattr(native, "core", None)
    assert len(native_changes) > 5
    assert run() == (native_changes, native_state)


def fed_at_random(
    detector: ChangePoint, x: np.ndarray, rng: np.random.Generator, restarts: bool = False
) -> tuple[list[tuple[object, ...]], list[bytes]]:
    """``x`` a column a round, each round to a random subset of the series in random order (with ``restarts``:
    3 series restarted every 37 rounds, which makes short segments): the changes (floats by their bits, NaN
    too) and the state."""
    changes: list[Change] = []
    for t in range(x.shape[1]):
        rows = rng.permutation(x.shape[0])[: int(rng.integers(1, x.shape[0] + 1))]
        changes += detector.update(rows, x[rows, t])
        if restarts and t % 37 == 0:
            detector.restart(rng.choice(x.shape[0], 3, replace=False))
    state = [detector._x, detector._y, detector._n, detector._seen, detector._sigma]
    exact = [tuple(v.hex() if isinstance(v, float) else v for v in c) for c in changes]
    return exact, [a.tobytes() for a in state]


def adversarial(rng: np.random.Generator, rows: int, n: int) -> np.ndarray:
    """Series that are hard on the arithmetic, ``rows`` x ``n``: constant (zeros, a huge constant), quantised to
    a few levels, near the largest and the smallest doubles (differences that overflow, subnormal ones), with
    NaN and infinite values among them, and steps of every size."""
    kinds = [
        np.zeros(n),
        np.full(n, 3e300),
        np.round(rng.standard_normal(n) * 0.3),  # mostly zeros, some ±1
        np.where(rng.random(n) < 0.5, 1.5e308, -1.5e308),  # differences of ±inf
        rng.standard_normal(n) * 1e-310,  # subnormal
        np.repeat(rng.standard_normal(n // 7 + 1) * 10.0 ** rng.integers(-3, 4), 7)[:n],  # constant runs
        rng.standard_normal(n) + np.where(np.arange(n) > n // 2, 1e6, 0.0),
        rng.standard_normal(n) * np.where(np.arange(n) % 50 < 25, 1.0, 1e3),
    ]
    x = np.array([kinds[i % len(kinds)] for i in range(rows)])
    x[rng.random(x.shape) < 0.03] = np.nan
    x[rng.random(x.shape) < 0.01] = np.inf
    x[rng.random(x.shape) < 0.01] = -np.inf
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (huge values: the reports overflow, either way)
@pytest.mark.parametrize(("seed", "every"), [(1, 1), (2, 1), (3, 2)])
def test_adversarial_series_give_the_same_changes_and_state_either_way(
    seed: int, every: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole rounds (``update``) on adversarial series, some restarted at random (short segments), with thresholds
    low enough that many rounds alarm: the same changes, scores and state natively and by the definition."""

    def run() -> tuple[list[tuple[object, ...]], list[bytes]]:
        rng = np.random.default_rng(seed)
        x = adversarial(rng, 24, 400)
        detector = ChangePoint(x.shape[0], window=48, warmup=6, min_side=2, line_a=4.0, var_a=6.0, every=every)
        return fed_at_random(detector, x, rng, restarts=True)

    native_changes, native_state = run()
    monkeypatch.setattr(native, "core", None)
    assert len(native_changes) > 20
    assert run() == (native_changes, native_state)
