"""A job's ranks' compute taken over a batch's columns, a step at a time: the same state as one row at a time (the
definition this replaced, written here as the reference), whatever repeats, gaps and orders."""

from __future__ import annotations

from typing import Any

import numpy as np

from streams.engine.compute import KEEP_STEPS, RankCompute


def compute_by_rows(c: dict[str, Any], per_step: dict[int, dict[int, float]],
                    position: dict[int, tuple[int, int]]) -> None:  # fmt: skip
    mask = c["op_class"] == "compute"
    steps, ranks = c["step"][mask], c["rank"][mask]
    key = steps * (int(ranks.max()) + 1) + ranks
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    sums = np.bincount(inverse.ravel(), c["duration"][mask])
    idx = np.flatnonzero(mask)[first]
    for step, rank, pp, tp, total in zip(c["step"][idx].tolist(), c["rank"][idx].tolist(), c["pp"][idx].tolist(),
                                         c["tp"][idx].tolist(), sums.tolist(), strict=True):  # fmt: skip
        per_rank = per_step.get(step)
        if per_rank is None:
            per_rank = per_step[step] = {}
            for old in sorted(per_step)[:-KEEP_STEPS]:
                del per_step[old]
        per_rank[rank] = per_rank.get(rank, 0.0) + total
        position[rank] = (pp, tp)


def test_compute_of_a_batch_adds_up_as_row_by_row() -> None:
    rng = np.random.default_rng(11)
    compute = RankCompute()
    per_step: dict[int, dict[int, float]] = {}
    position: dict[int, tuple[int, int]] = {}
    newest = 0
    for _ in range(60):
        n = int(rng.integers(1, 40))
        newest += int(rng.integers(0, 3))
        step = newest - rng.integers(0, 12, n)  # a step seen in an earlier batch, one too old to keep
        rank = rng.integers(0, 8, n)
        c = {"step": step, "rank": rank, "pp": rank // 4, "tp": rank % 2, "duration": rng.uniform(0.0, 1.0, n),
             "op_class": np.array(rng.choice(["compute", "comm"], n), object)}  # fmt: skip
        if not (c["op_class"] == "compute").any():
            continue
        compute.add(c)
        compute_by_rows(c, per_step, position)
        assert repr(compute._per_step) == repr(per_step)  # (the same floats, the steps in the same order)
        assert repr(compute._position) == repr(position)
