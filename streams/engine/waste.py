"""Waste roll-ups: per window of analysed steps (:class:`~streams.engine.structural.JobDerivations` closes
them), the job's accelerator-seconds by cause of waste (:mod:`economics`), its allocated and its useful
compute accelerator-seconds."""

from __future__ import annotations

from streams.engine import elements
from streams.engine.economics import WASTE_CAUSES, StepCost
from streams.engine.rollup import Rollup

WasteRow = tuple[float, float, StepCost]  # (step start, observed step seconds, its cost)


def waste_rollups(job: str, rows: list[WasteRow]) -> list[Rollup]:
    """The roll-ups of one window of steps (``rows`` non-empty, in step order)."""
    start, end = rows[0][0], rows[-1][0] + rows[-1][1]
    costs = [cost for _, _, cost in rows]
    series = {
        elements.cause(cause): ("wasted_accel_s", tuple(c.waste_s[cause] for c in costs)) for cause in WASTE_CAUSES
    }
    series[elements.job(job)] = ("allocated_accel_s", tuple(c.allocated_s for c in costs))
    out = [Rollup(job, entity, name, start, end, v, sum(v)) for entity, (name, v) in series.items()]
    compute = tuple(c.compute_s for c in costs)
    out.append(Rollup(job, elements.job(job), "compute_accel_s", start, end, compute, sum(compute)))
    return out
