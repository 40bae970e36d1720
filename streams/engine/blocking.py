"""The job's blocking slowdown per roll-up window, recorded whether or not anything drifted: per analysed
step the ideal step from peers (``step_ideal_s``), the step as modelled from its own spans
(``step_modelled_s``, the T(actual) of the ratio) and their ratio (``blocking_slowdown``), entity
``job:<j>``; both times are the step's period on the job's actual and ideal timelines (:mod:`carry`; a
step after a gap: its span). A window's blocking slowdown is total modelled over total ideal
(sql/queries/blocking_slowdown.sql).
"""

from __future__ import annotations

from streams.engine import elements
from streams.engine.detectors.structural_slowdown import IdealStep
from streams.engine.rollup import Rollup


def blocking_rollups(job: str, steps: list[IdealStep]) -> list[Rollup]:
    """The roll-ups of one window of analysed steps (oldest first; none when empty)."""
    if not steps:
        return []
    entity, window = elements.job(job), (steps[0].t0, steps[-1].end)
    ideal = tuple(s.ideal_s for s in steps)
    actual = tuple(s.actual_s for s in steps)
    ratio = tuple(s.slowdown for s in steps)
    each = (tuple(s.step for s in steps), tuple(s.t0 for s in steps))
    return [
        Rollup(job, entity, "step_ideal_s", *window, ideal, sum(ideal), *each),
        Rollup(job, entity, "step_modelled_s", *window, actual, sum(actual), *each),
        Rollup(job, entity, "blocking_slowdown", *window, ratio, sum(ratio), *each),
    ]
