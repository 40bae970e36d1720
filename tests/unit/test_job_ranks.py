"""A job's new ranks join its operator graph once each: in the order they first appear, with the position
(dp, pp, tp) of their last row in the batch — the definition a dict built row by row gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from streams.engine.job import JobState
from streams.engine.options import EngineConfig


@pytest.mark.parametrize("seed", range(20))
def test_new_ranks_join_in_first_appearance_order_with_their_last_rows_position(seed: int) -> None:
    rng = np.random.default_rng(seed)
    job = JobState("j", EngineConfig())
    joined: list[dict[int, tuple[int, int, int]]] = []
    job.graph.add_ranks = joined.append  # type: ignore[method-assign]
    expected: dict[int, tuple[int, int, int]] = {}
    for _ in range(4):
        n = int(rng.integers(1, 80))
        c: dict[str, Any] = {k: rng.integers(0, 40, n) for k in ("rank", "dp", "pp", "tp")}
        new = {int(r): (int(d), int(p), int(t)) for r, d, p, t in zip(c["rank"], c["dp"], c["pp"], c["tp"], strict=True)
               if int(r) not in expected}  # fmt: skip
        assert job._add_ranks(c) == bool(new)
        if new:
            assert list(joined[-1].items()) == list(new.items())
        expected.update(new)
    assert job._ranks_seen == set(expected)


def test_a_batch_of_sparse_ranks_all_seen_before_adds_none_and_a_new_one_between_them_joins() -> None:
    """A job traced on some of its ranks (one tensor index per stage): batches of ranks seen before, with
    untraced ranks between them, add nothing; a rank between them seen for the first time joins."""
    job = JobState("j", EngineConfig())
    joined: list[dict[int, tuple[int, int, int]]] = []
    job.graph.add_ranks = joined.append  # type: ignore[method-assign]

    def batch(ranks: list[int]) -> dict[str, Any]:
        r = np.array(ranks * 5, np.int64)
        return {"rank": r, "dp": r // 8, "pp": r % 8 // 2, "tp": r % 2}

    assert job._add_ranks(batch([0, 2, 4, 6]))
    assert not job._add_ranks(batch([6, 4, 2, 0]))
    assert not job._add_ranks(batch([2, 6]))
    assert job._add_ranks(batch([2, 3, 6]))
    assert list(joined[-1]) == [3]
    assert job._ranks_seen == {0, 2, 3, 4, 6}
