"""The what-if over the job's timeline: each rank's ideal end of step N-1 carried into its start in step N.

A step analysed alone (:mod:`whatif`) starts every rank at its observed start, so its ideal inherits the
lateness the previous steps left (a rank that finished step N-1 late starts step N late, in the ideal too),
and its step time is the span from the first start to the last end over every rank, which in a pipeline
without an end-of-step synchronisation is longer than the period the job's steps repeat at. The OSDI'25
what-if analysis simulates the whole timeline instead. Here consecutive analysed steps are chained:

- each rank's *lead* after a step is its last span's end in the ideal less its end as observed (how much
  earlier it would have finished had every step been ideal);
- in step N, every observed start the graph starts a node at (its *floor*: a rank's first span, a
  barrier's arrival, a launch) is moved by its rank's lead from step N-1 (:class:`Owners`), for the ideal and
  for every *leave only X unhealed* row; the actual and every *heal only X* row keep the observed starts
  (healing X in this step, from where every rank actually was);
- a step's time, actual or ideal, is then its *period*: the end of the step (over every rank) less the end
  of the step before on the same timeline. Over consecutive steps the periods add up to the timeline, and
  the job's blocking slowdown is T(actual timeline) / T(ideal timeline).

A step whose predecessor was not analysed (the first, a sampled step after a gap of step numbers, a step
after one whose spans formed no graph) starts fresh: observed starts, and the span as its step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from audit import native
from streams.engine.stepgraph import Floats, Ints, StepGraph

# per rank its last end in one native pass: np.maximum.at is slow, and some 18 times slower still on an array
# whose dtype came out of a pickle (a restored snapshot's), numpy's fast path taking its own float64 only
_LAST_ENDS = hasattr(native.core, "rank_last_ends")


@dataclass(frozen=True)
class Owners:
    """Per structure: the rank whose clock each finite floor of a step's graph is on, as (node, rank) pairs.
    A span's floor is its own rank's; a virtual node's (a barrier, a launch) is the ranks of the nodes it
    starts that are their rank's first program span (their arrival is its floor), or, with none, of every
    node it starts. A node with several moves by the largest of their leads (the latest of their arrivals,
    when the leads are alike)."""

    nodes: Ints
    ranks: Ints

    @classmethod
    def of(cls, g: StepGraph) -> Owners:
        finite = np.isfinite(g.floor)
        own = np.flatnonzero(finite & (g.rank >= 0))
        dst = np.repeat(np.arange(g.nodes), np.diff(g.indptr))
        src = g.indices
        virtual = finite[src] & (g.rank[src] < 0) & (g.rank[dst] >= 0)
        src, dst = src[virtual], dst[virtual]
        rank_start = np.r_[True, g.rank[1 : g.n_chain] != g.rank[: g.n_chain - 1]] if g.n_chain else np.zeros(0, bool)
        first = np.zeros(g.nodes, bool)
        first[: g.n_chain] = rank_start
        has_first = np.zeros(g.nodes, bool)
        has_first[src[first[dst]]] = True
        keep = first[dst] | ~has_first[src]
        return cls(np.r_[own, src[keep]].astype(np.int64), np.r_[g.rank[own], g.rank[dst[keep]]].astype(np.int64))

    def starts(self, g: StepGraph) -> Floats:
        """Per rank: its first observed start in the step (+inf: none)."""
        out = np.full(int(g.rank.max(initial=0)) + 1, np.inf)
        np.minimum.at(out, self.ranks, g.floor[self.nodes])
        return out

    def floors(self, g: StepGraph, shift: Floats) -> Floats:
        """The graph's floors with each moved by its rank's ``shift``."""
        by_node = np.full(g.nodes, -np.inf)
        np.maximum.at(by_node, self.nodes, shift[self.ranks])
        out: Floats = np.where(np.isfinite(by_node), g.floor + by_node, g.floor)
        return out


@dataclass(frozen=True)
class Chained:
    """How one step sits on the timelines: ``floor`` for its ideal rows (None: the observed starts, a fresh
    step), and where the step before ended, relative to this step's first start, on the actual timeline
    (for the actual and heal-only rows) and on the ideal one (the ideal and leave-only rows): a row's
    period is its end less that (a fresh step: 0, its period is its span)."""

    floor: Floats | None
    actual_before: float = 0.0
    ideal_before: float = 0.0


@dataclass
class Timeline:
    """Per job: where its last analysed step ended on the actual and the ideal timeline, and each rank's lead."""

    step: int = -2
    t0: float = 0.0
    actual_end: float = 0.0  # relative to t0
    ideal_end: float = 0.0  # relative to t0, on the ideal timeline
    lead: Floats = field(default_factory=lambda: np.zeros(0))

    def chain(self, step: int, t0: float, g: StepGraph, owners: Owners) -> Chained:
        """Step ``step`` (starting at ``t0``) on the timelines: fresh unless it follows the last one."""
        if step != self.step + 1:
            return Chained(None)
        since = t0 - self.t0
        actual_before, ideal_before = self.actual_end - since, self.ideal_end - since
        starts = owners.starts(g)
        lead = np.zeros(len(starts))
        lead[: min(len(lead), len(self.lead))] = self.lead[: len(lead)]
        after = starts >= actual_before - g.tolerance  # may have waited for the whole step before to end
        shift = np.where(after, ideal_before - actual_before, lead)
        return Chained(owners.floors(g, shift), actual_before, ideal_before)

    def advance(self, step: int, t0: float, ends: tuple[float, float], rank_ends: tuple[Floats, Floats]) -> None:
        """Record step ``step``'s actual and ideal end (relative to its ``t0``) and its ranks' leads, from each
        rank's actual and ideal last end (-inf: a rank without spans, which gets none)."""
        self.step, self.t0, (self.actual_end, self.ideal_end) = step, t0, ends
        actual, ideal = rank_ends
        known = np.isfinite(actual) & np.isfinite(ideal)
        self.lead = np.where(known, ideal - np.where(known, actual, 0.0), 0.0)


def last_end_per_rank(g: StepGraph, ends: Floats) -> Floats:
    """Per rank: its last span's end in one row of end times (-inf: a rank without spans in the step)."""
    out = np.full(int(g.rank.max(initial=0)) + 1, -np.inf)
    columns = g.rank, g.span
    if _LAST_ENDS and native.core is not None and all(c.dtype == np.int32 and c.flags.c_contiguous for c in columns):
        native.core.rank_last_ends(g.rank, g.span, np.ascontiguousarray(ends, np.float64), out)  # (one pass)
        return out
    spans = g.span >= 0
    np.maximum.at(out, g.rank[spans], ends[spans])
    return out
