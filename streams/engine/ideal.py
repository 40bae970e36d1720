"""The ideal step from peers: every node of a step's graph at the typical duration of its peers in the same
step, the graph evaluated on it = T(ideal), and the job's blocking slowdown T(actual) / T(ideal).

This is the structural baseline of the OSDI'25 what-if analysis of stragglers (ByteDance: "Understanding
Stragglers in Large Model Training Using What-if Analysis"): the step as it would have run had no worker
been slower than its peers. It needs no history, so a straggler present from the first step stands out.

Peers of a node (its *peer key*, fixed per structure):

- a compute span or collective member: the spans of the same op type, on the same pipeline stage, for the
  same microbatch and the same occurrence (n-th span of that op and microbatch on its rank) — on every
  data-parallel replica and tensor-parallel rank. The stage is part of the key: a stage that does more work
  than the others (the last one computes the loss) is intrinsically heavier, not a straggler, so stages are
  never each other's peers here;
- a transfer: the transfers of the same kind (send, recv), direction (towards the next stage or the
  previous one), microbatch and occurrence, over every link of the job (a transfer's typical time does not
  depend on which stages it connects);
- a barrier: none (its duration is 0).

The typical duration is the *lower* median of the peers (for an even count the lower of the two middle
values): with two peers, one of them slow, the typical one is the other. A node without peers (one replica,
one stage, one traced rank per stage) is its own typical: the ideal then equals the step, a slowdown of 1,
never a guess.

The *typical replica* (for the group cause ``spread:<job>/dp``) is each node at the lower median over the
data-parallel replicas only, per (stage, tensor index, place in the rank's program): healing it removes the
variation across replicas and keeps everything else.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from streams.engine.stepgraph import BARRIER, CHAIN, MEMBER, TRANSFER_KINDS, Floats, Ints, StepGraph, dense


class LowMedian:
    """Positions grouped by an integer key (negative: no group), prepared once per structure; per position
    the lower median of its group's values."""

    def __init__(self, keys: Ints) -> None:
        self.members = np.flatnonzero(keys >= 0)
        k = keys[self.members]
        self.order = np.argsort(k, kind="stable")
        sk = k[self.order]
        self.starts = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, np.int64)
        self.counts = np.diff(np.r_[self.starts, len(sk)])
        self.group = np.repeat(np.arange(len(self.starts)), self.counts)
        self.pick = self.starts + (self.counts - 1) // 2
        self.size = len(keys)

    def typical(self, values: Floats) -> Floats:
        """``values`` with each grouped position replaced by its group's lower median."""
        out = values.copy()
        if not len(self.members):
            return out
        v = values[self.members][self.order]
        ranked = v[np.lexsort((v, self.group))]
        out[self.members[self.order]] = np.repeat(ranked[self.pick], self.counts)
        return out


@dataclass(frozen=True)
class Peers:
    """Per structure: who each node's peers are, for the ideal and for the typical replica."""

    ideal: LowMedian
    replica: LowMedian

    @classmethod
    def of(cls, g: StepGraph) -> Peers:
        chain = (g.kind == CHAIN) | (g.kind == MEMBER)
        p2p = np.isin(g.kind, TRANSFER_KINDS)  # a blocking transfer's own time is transfer time too
        direction = _direction(g, p2p)
        occurrence = occurrences(dense(g.rank, g.kind, g.op, direction, g.microbatch))
        work = dense(np.where(chain, g.pp, -1), g.op, g.microbatch, occurrence)
        transfer = dense(g.kind, direction, g.microbatch, occurrence)
        offset = int(work.max(initial=-1)) + 1
        ideal_key = np.where(chain, work, np.where(p2p, offset + transfer, -1))
        place = occurrences(np.where(g.kind == BARRIER, -1, dense(g.rank)))  # n-th node of the rank
        replica_key = np.where(g.span >= 0, dense(g.pp, g.tp, g.kind, direction, g.op, g.microbatch, place), -1)
        return cls(LowMedian(ideal_key), LowMedian(replica_key))


def peer_stage(g: StepGraph, p2p: npt.NDArray[np.bool_]) -> Ints:
    """Per transfer: the pipeline stage of its peer (-1 for other nodes, or a peer that sent no spans)."""
    ranks = int(max(g.rank.max(initial=0), g.peer.max(initial=0))) + 1
    pp_of = np.full(ranks, -1, np.int64)
    spans = g.span >= 0
    pp_of[g.rank[spans]] = g.pp[spans]
    return np.where(p2p & (g.peer >= 0), pp_of[np.clip(g.peer, 0, ranks - 1)], -1)


def _direction(g: StepGraph, p2p: npt.NDArray[np.bool_]) -> Ints:
    """Per transfer: 1 towards a later stage, 0 towards an earlier one (or unknown); -1 for other nodes."""
    return np.where(p2p, (peer_stage(g, p2p) > g.pp).astype(np.int64), -1)


def occurrences(keys: Ints) -> Ints:
    """Per position: how many earlier positions (in node order) share its key."""
    by_key = np.argsort(keys, kind="stable")
    sk = keys[by_key]
    first = np.flatnonzero(np.r_[True, sk[1:] != sk[:-1]]) if len(sk) else np.zeros(0, np.int64)
    out = np.zeros(len(keys), np.int64)
    out[by_key] = np.arange(len(sk)) - np.repeat(first, np.diff(np.r_[first, len(sk)]))
    return out
