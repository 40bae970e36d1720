"""The nodes of each value of a column (a rank, a replica, a stage, a link, an op), found once per structure.

A step's what-if and decomposition name up to a few hundred elements, each by its nodes: a comparison of a
whole column per element (``g.rank == r``) reads every node once per element, step after step, though an
element's nodes are the same in every step of a structure. Here one stable sort of the column gives every
element's nodes, in node order (the nodes the comparison's ``np.flatnonzero`` gives).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streams.engine.codes import compact
from streams.engine.ideal import peer_stage
from streams.engine.stepgraph import TRANSFER_KINDS, Floats, Ints, StepGraph

_NONE: Ints = np.zeros(0, np.int64)


class Members:
    """Per value of a column: the indices of the positions holding it, ascending."""

    def __init__(self, column: Ints) -> None:
        order = compact(np.argsort(column, kind="stable"))  # (kept per structure: int32)
        k = column[order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        parts: list[Ints] = np.split(order, starts[1:])
        self._of: dict[int, Ints] = dict(zip(k[starts].tolist(), parts, strict=True)) if len(k) else {}

    def __call__(self, value: int) -> Ints:
        """The positions holding ``value`` (none: an empty array)."""
        return self._of.get(value, _NONE)


@dataclass(frozen=True)
class StepElements:
    """Per structure: the nodes of each rank, replica, stage and op type of a step's graph, and of each link
    between two stages (the transfers crossing it, both directions: ``link``, the lower stage, -1 for other
    nodes)."""

    rank: Members
    dp: Members
    pp: Members
    op: Members
    link: Ints
    links: Members

    @classmethod
    def of(cls, g: StepGraph) -> StepElements:
        p2p = np.isin(g.kind, TRANSFER_KINDS)
        peer_pp = peer_stage(g, p2p)
        link = compact(np.where(p2p & (peer_pp >= 0) & (peer_pp != g.pp), np.minimum(g.pp, peer_pp), -1))
        return cls(Members(g.rank), Members(g.dp), Members(g.pp), Members(g.op), link, Members(link))


class LastEnds:
    """Per structure: the spans by rank, for each rank's last span's end in a row of end times
    (:func:`carry.last_end_per_rank`: the same maxima, by one ``reduceat`` over the spans sorted by rank
    instead of an unbuffered ``np.maximum.at``)."""

    def __init__(self, g: StepGraph) -> None:
        spans = np.flatnonzero(g.span >= 0)
        self.order = compact(spans[np.argsort(g.rank[spans], kind="stable")])
        ranks = g.rank[self.order]
        self.starts = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]]) if len(ranks) else spans
        self.ranks = ranks[self.starts]
        self.size = int(g.rank.max(initial=0)) + 1

    def __call__(self, ends: Floats) -> Floats:
        """Per rank: its last span's end (-inf: a rank without spans in the step)."""
        out = np.full(self.size, -np.inf)
        if len(self.order):
            out[self.ranks] = np.maximum.reduceat(ends[self.order], self.starts)
        return out
