"""Each rank's own compute per step (the last few steps), to name the rank that slowed a step: the one whose
compute most exceeds the median of its position's peers (same pipeline stage and tensor index). It keeps the
``KEEP_STEPS`` newest steps it was given, however far apart their numbers are (profilers trace every N-th step)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine.codes import classes, few_keys
from streams.engine.medians import median

KEEP_STEPS = 8
MIN_EXCESS = 1.05


@dataclass
class RankCompute:
    _per_step: dict[int, dict[int, float]] = field(default_factory=dict)  # step -> rank -> seconds
    _position: dict[int, tuple[int, int]] = field(default_factory=dict)  # rank -> (pp, tp)

    def add(self, c: dict[str, Any]) -> None:
        """Op span columns of one job."""
        mask = classes(c["op_class"], ("compute",)) == 1
        if not mask.any():
            return
        steps, ranks = c["step"][mask], c["rank"][mask]
        key = steps * (int(ranks.max()) + 1) + ranks
        first, sums = _first_and_sums(key, c["duration"][mask])
        idx = np.flatnonzero(mask)[first]
        for step, rank, pp, tp, total in zip(c["step"][idx].tolist(), c["rank"][idx].tolist(),
                                             c["pp"][idx].tolist(), c["tp"][idx].tolist(), sums.tolist(),
                                             strict=True):  # fmt: skip
            per_rank = self._per_step.get(step)
            if per_rank is None:
                per_rank = self._per_step[step] = {}
                for old in sorted(self._per_step)[:-KEEP_STEPS]:  # the newest steps seen, however far apart
                    del self._per_step[old]
            per_rank[rank] = per_rank.get(rank, 0.0) + total
            self._position[rank] = (pp, tp)

    def root(self, step: int) -> int | None:
        """The rank whose compute in ``step`` most exceeds the median of its position's peers (> 5%)."""
        per_rank = self._per_step.get(step)
        if not per_rank:
            return None
        by_position: dict[tuple[int, int], list[float]] = {}
        for rank, total in per_rank.items():
            by_position.setdefault(self._position[rank], []).append(total)
        medians = {p: median(v) for p, v in by_position.items()}
        excess = {r: t / medians[self._position[r]] for r, t in per_rank.items() if medians[self._position[r]] > 0}
        top = max(sorted(excess), key=excess.__getitem__, default=None)
        return top if top is not None and excess[top] > MIN_EXCESS else None


def _first_and_sums(
    key: npt.NDArray[np.int64], weights: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64]]:
    """Per distinct key, ascending: the first row holding it and the sum of its rows' ``weights`` (added in
    row order), as ``np.unique``'s index and ``np.bincount`` over its inverse give them; a batch's few steps
    x its ranks (dense keys) binned without a sort."""
    lo, hi = int(key.min()), int(key.max())
    if not few_keys(hi - lo, len(key)):
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, np.asarray(np.bincount(inverse.ravel(), weights), np.float64)
    at = key - lo
    present = np.flatnonzero(np.bincount(at))
    first = np.full(hi - lo + 1, len(at), np.intp)
    np.minimum.at(first, at, np.arange(len(at)))
    return first[present], np.asarray(np.bincount(at, weights), np.float64)[present]
