"""Systematically slow ranks (streams/engine/systematic.py): a sign-flip test over a job's last steps, at a
stated significance. On synthetic peer groups with noise of several shapes (one-sided oversleeps, heavy
tails, symmetric jitter; two and four peers per group), never the traces the engine is checked on: noise alone
calls a rank systematic no more often than the significance allows, a slow rank is called within a few steps
and its peers are not, and the typical duration leaves only the called ranks out."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from streams.engine import systematic
from streams.engine.codes import compact
from streams.engine.medians import LOWER
from streams.engine.systematic import ALPHA, WINDOW, Grouped, Persistence, Unsystematic

Noise = Callable[[np.random.Generator, int], np.ndarray]
NOISES: dict[str, Noise] = {
    "oversleep": lambda rng, n: rng.exponential(0.08, n),  # a host waking late from a device wait: only later
    "heavy": lambda rng, n: rng.pareto(2.5, n) * 0.05,
    "jitter": lambda rng, n: rng.uniform(-0.02, 0.02, n),
}


def layout(ranks: int, peers: int, ops: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node: its peer group, its rank and its base duration (``ops`` nodes per rank, groups of ``peers``
    ranks doing the same work)."""
    rank = np.repeat(np.arange(ranks), ops)
    place = np.tile(np.arange(ops), ranks)
    keys = (rank // peers) * ops + place
    base = 0.001 + 0.02 * (place % 5)  # small host ops beside 10-40 ms device ops
    return keys, rank, base


def run(steps: int, ranks: int, peers: int, noise: Noise, rng: np.random.Generator,
        slow: dict[int, float] | None = None) -> list[np.ndarray]:  # fmt: skip
    """The ranks called systematic after each step."""
    keys, rank, base = layout(ranks, peers, 40)
    peer_typical = Unsystematic(keys, rank)
    persistence = Persistence()
    factor = np.ones(ranks)
    for r, f in (slow or {}).items():
        factor[r] = f
    called = []
    for _ in range(steps):
        values = base * factor[rank] * (1 + noise(rng, len(base)))
        called.append(persistence.update(*peer_typical.deviations(values)))
    return called


@pytest.mark.parametrize("peers", [2, 4])
@pytest.mark.parametrize("shape", sorted(NOISES))
def test_noise_alone_calls_a_rank_no_more_often_than_the_significance_allows(shape: str, peers: int) -> None:
    rng = np.random.default_rng(5)
    jobs, steps = 150, 12
    wrong = sum(any(len(c) for c in run(steps, 8, peers, NOISES[shape], rng)) for _ in range(jobs))
    # every step is a test at ALPHA family-wise: at most jobs * steps * ALPHA expected (Hoeffding: fewer)
    assert wrong <= jobs * steps * ALPHA, wrong


@pytest.mark.parametrize("peers", [2, 4])
@pytest.mark.parametrize("shape", sorted(NOISES))
def test_a_slow_rank_is_called_within_a_few_steps_and_its_peers_are_not(shape: str, peers: int) -> None:
    rng = np.random.default_rng(7)
    called = run(WINDOW + 5, 8, peers, NOISES[shape], rng, slow={3: 1.3})
    first = next(i for i, c in enumerate(called) if 3 in c)
    assert first <= 3, first
    assert all(c.tolist() == [3] for c in called[first:]), called


def test_a_rank_slow_by_a_few_percent_is_called_once_the_window_holds_enough_steps() -> None:
    rng = np.random.default_rng(9)
    called = run(3 * WINDOW, 8, 2, NOISES["oversleep"], rng, slow={5: 1.05})
    assert all(c.tolist() == [5] for c in called[WINDOW:]), called


def test_the_typical_duration_leaves_out_only_the_called_ranks() -> None:
    keys = np.array([0, 0, 1, 1, 1, 1, 2, -1])
    rank = np.array([0, 1, 0, 1, 2, 3, 1, 0])
    values = np.array([1.0, 3.0, 2.0, 8.0, 4.0, 6.0, 5.0, 7.0])
    peers = Unsystematic(keys, rank)
    # the middle of every group (two peers: their mean, not the faster one); a node without a group: itself
    assert peers.typical(values).tolist() == [2.0, 2.0, 5.0, 5.0, 5.0, 5.0, 5.0, 7.0]
    # rank 1 left out: each group's middle over the others
    assert peers.typical(values, np.array([1])).tolist() == [1.0, 1.0, 4.0, 4.0, 4.0, 4.0, 5.0, 7.0]
    # every member of a group left out: its lower median
    assert peers.typical(values, np.array([0, 1])).tolist() == [1.0, 1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 7.0]


def test_the_lower_median_shares_the_middles_groups_and_keys_are_kept_compact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per structure, one grouping serves both statistics (its arrays not copied), and keys and units are
    kept as int32 with the same values (wider integers as they are), with the same typical values."""
    rng = np.random.default_rng(3)
    keys = np.where(rng.random(500) < 0.1, -1, rng.integers(0, 40, 500))
    unit = rng.integers(-1, 8, 500)
    values = rng.lognormal(0.0, 0.5, 500)
    u = Unsystematic(keys, unit)
    assert u.lower.order is u.middle.order and u.lower.members is u.middle.members
    assert np.array_equal(u.lower.typical(values), Grouped(keys, LOWER).typical(values))
    assert u.keys.dtype == np.int32 and np.array_equal(u.keys, keys)
    assert np.array_equal(u.unit, np.maximum(unit, 0))
    wide = np.array([0, 2**40], np.int64)
    assert compact(wide) is wide and compact(wide[:1]).dtype == np.int32
    with monkeypatch.context() as m:
        m.setattr(systematic, "compact", lambda a: a)  # as int64
        wide_keys = Unsystematic(keys, unit)
    assert wide_keys.keys.dtype == np.int64
    for slow in (np.array([3]), np.array([0, 5, 7])):
        assert np.array_equal(u.typical(values, slow), wide_keys.typical(values, slow))
    assert all(np.array_equal(a, b) for a, b in zip(u.deviations(values), wide_keys.deviations(values), strict=True))


def test_the_windows_sums_are_each_units_values_added_in_order() -> None:
    """Per unit, the steps' values added one after another from 0.0 (a step without the unit adds nothing):
    equal values (a zero of either sign), NaN where a step's is, inf, and sums that round differently in
    another order."""
    rng = np.random.default_rng(4)
    for units in [(16,) * WINDOW, (16,) * 3, (1,) * WINDOW, (8, 16, 16, 12), (5,)]:
        steps = [rng.normal(size=n) * rng.choice([1e-3, 1.0, 1e16], n) for n in units]
        steps[0][0] = -0.0
        steps[-1][-1] = np.nan if len(steps) > 2 else np.inf
        expected = np.zeros(max(units))
        for a in steps:
            for i, v in enumerate(a.tolist()):
                expected[i] += v
        got = systematic._sums(steps)
        assert np.array_equal(got, expected, equal_nan=True), units
