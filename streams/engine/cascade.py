"""Straggler cascade: for a straggler finding, the ranks whose last span would have ended earlier by more
than ``CASCADE_MIN`` of the step had the root been healed (what-if), grouped by the edge the delay
travelled: the root's tensor-parallel peers, its pipeline (same replica, other stages), and everyone else
(through collectives)."""

from __future__ import annotations

import numpy as np

from streams.engine import elements
from streams.engine.findings import Finding
from streams.engine.steps import StepReport

CASCADE_MIN = 0.01


def cascade_root(r: StepReport) -> str | None:
    """The rank the step's what-if heals first (the straggler a cascade starts from), when it was healed."""
    top = next((c for c in r.whatif.candidates if c.dimension == "rank"), None)
    if top is None or r.whatif.top_rank is None:
        return None
    return top.element


def cascade(straggler: Finding, r: StepReport) -> Finding | None:
    """The ranks the straggler's rank (its first subject, the step's :func:`cascade_root`) delays in step
    ``r``, by the edge the delay travelled; None when it delays no other rank."""
    w = r.whatif
    healed = w.healed_rank_ends()
    if healed is None:
        return None
    traced = np.isfinite(w.rank_ends) & np.isfinite(healed)  # ranks that sent spans (partial tracing: not all)
    moved = np.where(traced, w.rank_ends, 0.0) - np.where(traced, healed, 0.0)
    affected = np.flatnonzero(traced & (moved > CASCADE_MIN * w.step_s))
    root = elements.index_of(straggler.subjects[0], "rank")
    others = affected[affected != root]
    if not len(others):
        return None
    pos = r.positions
    dp, pp, _ = pos[root]
    same_replica = pos[others, 0] == dp
    tensor = same_replica & (pos[others, 1] == pp)
    pipeline = same_replica & ~tensor
    gain = w.step_s - float(np.max(healed))
    return Finding(
        kind="straggler_cascade",
        subjects=(elements.rank(r.job, root), *straggler.subjects[1:]),
        start=straggler.start,
        end=r.t0 + w.observed_s,
        severity=round(len(others) / max(1, int(traced.sum()) - 1), 6),  # of the traced ranks it could delay
        evidence={
            "root": elements.rank(r.job, root),
            "affected_ranks": len(others),
            "via_tensor_parallel": int(tensor.sum()),
            "via_pipeline": int(pipeline.sum()),
            "via_collectives": int((~same_replica).sum()),
            "affected_sample": [int(a) for a in others[:64]],
            "step": r.step,
            "measure": f"ranks whose last span ends > {CASCADE_MIN:.0%} of the step earlier with the root healed",
        },
        cost={"accel_s_per_step": round(r.ranks * max(0.0, gain), 6)},
    )
