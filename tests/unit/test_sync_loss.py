"""Partial synchronisation loss on sampled steps: profilers trace every N-th step, so step numbers jump by
hundreds; lag is counted in the job's own sequence of observed steps, so gaps never read as ranks falling
behind, while a replica that really falls further behind is still found."""

from __future__ import annotations

import pickle
from itertools import accumulate

import numpy as np

from streams.engine.detectors import sync_loss
from streams.engine.detectors.sync_loss import PhaseDrift, SyncLoss

RANKS = np.arange(8)
REPLICAS = RANKS // 4  # two replicas of four ranks


def feed(traced: list[int], behind: list[int]) -> list[str]:
    """Each traced step reported by replica 0, then replica 1 reports the step ``behind[i]`` observed steps
    before it (0: the same step, a moment later). Returns the subjects of the findings."""
    detector, found = SyncLoss("j"), []
    first, second = RANKS[REPLICAS == 0], RANKS[REPLICAS == 1]
    for i, step in enumerate(traced):
        lagging = traced[max(0, i - behind[i])]
        for ranks, at in ((first, step), (second, lagging)):
            f = detector.update(ranks, np.full(len(ranks), at), REPLICAS[ranks], float(i))
            found.extend(f.subjects if f is not None else ())
    return found


def test_gaps_between_traced_steps_never_read_as_lag() -> None:
    # traced every 100, 200, 300, ... steps (growing gaps): in step numbers, replica 1 lags further each time
    traced = list(accumulate(range(100, 61 * 100, 100)))
    assert feed(traced, [0] * len(traced)) == []  # replica 1 reports each step a moment after replica 0
    bursts = [100 * (i // 3) ** 2 + i % 3 for i in range(60)]  # three steps in a row, then a growing gap
    assert feed(bursts, [0] * len(bursts)) == []


def test_a_replica_falling_behind_in_observed_steps_is_found_on_sampled_steps() -> None:
    traced = [i * 500 for i in range(60)]
    behind = [0] * 20 + [1 + i // 4 for i in range(40)]  # from the 20th traced step on, further and further
    assert feed(traced, behind) == ["dp:j/1"]


def test_a_restored_detector_keeps_numpys_own_dtype_and_its_state() -> None:
    """A detector restored from a snapshot holds its per-rank steps in numpy's own int64 (a copied dtype, as
    unpickling makes, sends ``np.maximum.at`` down its slow loop) and goes on as the one never pickled."""
    kept = SyncLoss("j")
    kept.update(RANKS, np.arange(8), REPLICAS, 0.0)
    restored = pickle.loads(pickle.dumps(kept))
    assert restored._latest.dtype is np.dtype(np.int64)
    for detector in (kept, restored):
        detector.update(RANKS[:4], np.full(4, 9), REPLICAS[:4], 1.0)
    assert restored._latest.tolist() == kept._latest.tolist() == [9, 9, 9, 9, 4, 5, 6, 7]


def test_the_observed_steps_are_numpys_union_of_every_batch() -> None:
    """Batches whose steps ascend from the newest observed on are appended without a sort; any other batch
    (unsorted, older steps, repeats) goes through ``np.union1d``: the same steps either way."""
    rng = np.random.default_rng(5)
    observed, expected = np.full(0, -1, np.int64), np.full(0, -1, np.int64)
    for _ in range(2000):
        low = int(expected[-1]) if len(expected) and rng.random() < 0.8 else int(rng.integers(0, 400))
        steps = np.sort(rng.integers(low, low + 4, int(rng.integers(1, 6))))
        steps = steps if rng.random() < 0.9 else rng.permutation(steps)
        observed = sync_loss._observed(observed, steps)
        expected = np.union1d(expected, steps)[-sync_loss.KEEP_OBSERVED :]
        assert observed.tolist() == expected.tolist()
        assert observed.dtype == expected.dtype


def test_a_replica_absent_from_steps_never_counts_as_drifting() -> None:
    """PhaseDrift: a replica without spans in a step (its phase NaN) is not drifting, whatever the others do;
    two of six replicas drifting further each step are found, the absent one not among them."""
    detector = PhaseDrift("j", warmup=3, persistence=3)
    for step in range(3):
        assert detector.update(step, float(step), 1.0, np.zeros(6)) is None
    found = None
    for step in range(3, 8):
        phases = np.array([0.0, 0.0, 0.0, np.nan, 0.1 * step, 0.1 * step])
        found = detector.update(step, float(step), 1.0, phases) or found
    assert found is not None
    assert found.evidence["replicas_drifting"] == [4, 5]
