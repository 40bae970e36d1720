"""The ideal step from peers: every node of a step's graph at the typical duration of its peers in the same
step, the graph evaluated on it = T(ideal), and the job's blocking slowdown T(actual) / T(ideal).

This is the structural baseline of the OSDI'25 what-if analysis of stragglers (ByteDance: "Understanding
Stragglers in Large Model Training Using What-if Analysis"): the step as it would have run had no worker
been slower than its peers. It needs no history, so a straggler present from the first step stands out.

Peers of a node (its *peer key*, fixed per structure):

- a compute span or collective member: the spans of the same op type, on the same pipeline stage, for the
  same microbatch and the same occurrence (n-th span of that op and microbatch on its rank) — on every
  data-parallel replica and tensor-parallel rank;
- a compute span that **every** stage of the step runs (the same op type, microbatch and occurrence on each
  stage: the homogeneous transformer layers of a pipeline; a profiler that cannot tell microbatches apart
  gives -1, and the occurrence — the k-th call — lines the layers up instead), also the other stages: its
  ideal is the lower of its stage's typical (above) and the *cross-stage typical*, the lower median over the
  stages of each stage's typical (one value per stage, however many of its ranks are traced). A stage slow
  in every replica from the first step has no faster peer within its stage; against the other stages doing
  the same work it is slow, which is the OSDI'25 study's *stage partitioning imbalance* cause (a stage given
  more than its share of work, or slower hardware under a whole stage). Work only some stages run (the
  embedding, the loss; an occurrence only some stages reach, when stages hold different numbers of layers)
  keeps its stage-only peers, so a stage that holds the loss as an op of its own is intrinsically heavier,
  never slow; so do collective members and transfers (communication, whose size need not match across
  stages). Taking the lower of the two never makes a node slower than its own stage's typical (a lighter
  stage stays light);
- a transfer: the transfers of the same kind (send, recv), direction (towards the next stage or the
  previous one), microbatch and occurrence, over every link of the job (a transfer's typical time does not
  depend on which stages it connects);
- a barrier: none (its duration is 0).

The typical duration is the *middle* of the peers (for an even count the mean of the two middle values)
other than the job's systematically slow ranks (work) and links (transfers), :mod:`systematic`: with two
peers, one of them slow, the typical one is the other; with two noisy ones, their middle, so the ideal keeps
the noise every rank has (the lower of two, as before, read one-sided noise as slowdown: a healthy torch job
at 1.11). A node without peers (one replica, one stage, one traced rank per stage) is its own typical: the
ideal then equals the step, a slowdown of 1, never a guess.

The *typical replica* (for the group cause ``spread:<job>/dp``) is each node at the same typical over the
data-parallel replicas only, per (stage, tensor index, place in the rank's program): healing it removes the
variation across replicas and keeps everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine.codes import compact, distinct_pairs
from streams.engine.stepgraph import BARRIER, CHAIN, MEMBER, TRANSFER_KINDS, Floats, Ints, StepGraph, dense
from streams.engine.systematic import NONE, Grouped, Slow, Unsystematic

LowMedian = Grouped  # the lower median per group (the default statistic)
Middles = tuple[Floats, Floats]  # each node at its work peers' middle, and at its transfer peers' middle
Evidence = tuple[tuple[Floats, Floats], tuple[Floats, Floats]]  # per rank and per link (:mod:`systematic`)
_FUSED = hasattr(native.core, "peer_layout")  # (native/src/peers.rs; without it, the definition)
_SLOW = _FUSED


class CrossStage:
    """Per structure: nodes grouped by their stage peers (``within``), and those groups by their cross-stage
    peers (``across``, -1: none); per node the lower of its stage peers' typical and the lower median, over
    the stages, of the stage peers' typicals."""

    def __init__(self, within: Ints, across: Ints, typical: PeerTypical) -> None:
        self.within = typical
        crossed = across >= 0
        _, first, inverse = np.unique(np.where(crossed, within, -1), return_index=True, return_inverse=True)
        self.rep = compact(first[inverse.ravel()])  # per node: the first node of its stage peer group (int32)
        rep_key = np.full(len(within), -1, np.int64)
        reps = first[crossed[first]]
        rep_key[reps] = across[reps]
        self.stages = LowMedian(rep_key)  # one value per stage peer group: every stage weighs the same
        self.crossed = np.flatnonzero(crossed)
        self._layout: Any = None  # (the groupings as the native core reads them: made at the first step asking)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_layout": None}  # (native, made again: not in a snapshot)

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({"_layout": None, **state})  # (a snapshot made before the layout: without it)

    def layout(self) -> Any:
        """The native core's layout of these groupings (native/src/peers.rs), made once."""
        if self._layout is None:
            self._layout = _peer_layout(self.within, (self.rep, self.crossed, self.stages.grouping()))
        return self._layout

    def typical(self, values: Floats, slow: Slow = (NONE, NONE), middles: Middles | None = None) -> Floats:
        """``values`` at their ideal: the stage peers' typical (without the units ``slow``, :mod:`systematic`),
        lowered to the cross-stage typical (``middles``: :meth:`PeerTypical.typical`'s)."""
        fused = _without(self.layout(), values, slow) if middles is None and _SLOW and native.core else None
        if fused is not None:  # (the same values, in one call)
            return fused
        out = self.within.typical(values, slow, middles)
        if len(self.crossed):
            across = self.stages.typical(out)[self.rep[self.crossed]]
            out[self.crossed] = np.minimum(out[self.crossed], across)
        return out


class PeerTypical:
    """Per structure: each node at the typical duration of its peers (``keys``): the middle of its peers
    other than the job's systematically slow units (:mod:`systematic`): for work (compute spans, collective
    members: ``work``) its rank, for a transfer its link (``link``, -1: unknown)."""

    def __init__(self, keys: Ints, work: npt.NDArray[np.bool_], rank: Ints, link: Ints) -> None:
        self.work = Unsystematic(np.where(work, keys, -1), rank)
        self.transfers = Unsystematic(np.where(work, -1, keys), link)
        self._layout: Any = None  # (native/src/peers.rs, without cross-stage peers: made at the first step asking)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_layout": None}  # (native, made again: not in a snapshot)

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({"_layout": None, **state})  # (a snapshot made before the layout: without it)

    def typical(self, values: Floats, slow: Slow = (NONE, NONE), middles: Middles | None = None) -> Floats:
        """``slow``: the systematically slow ranks and links; ``middles``: :meth:`middles` of ``values`` when
        already known (taken over: written into)."""
        # (the layout only for slow units to leave out: without any, each group's middle is one native call
        # already, and a 16k-rank job's layout would hold ~40 MB for nothing)
        asks = middles is None and _SLOW and native.core and any(map(len, slow))
        fused = _without(self.layout(), values, slow) if asks else None
        if fused is not None:  # (the same values, in one call)
            return fused
        work, transfers = (None, None) if middles is None else middles
        out = self.work.typical(values, slow[0], work)
        other = self.transfers.middle.members
        out[other] = self.transfers.typical(values, slow[1], transfers)[other]
        return out

    def middles(self, values: Floats) -> Middles:
        """Each node at its work peers' middle, and at its transfer peers' middle, over every unit."""
        return self.work.middle.typical(values), self.transfers.middle.typical(values)

    def layout(self) -> Any:
        """The native core's layout of these groupings, with no position crossed to other stages, made once."""
        if self._layout is None:
            n = self.work.middle.size
            self._layout = _peer_layout(self, (np.zeros(n, np.int32), NONE, Grouped(np.full(n, -1)).grouping()))
        return self._layout


@dataclass(frozen=True)
class Peers:
    """Per structure: who each node's peers are, for the ideal and for the typical replica."""

    ideal: CrossStage
    replica: PeerTypical

    def deviations(self, values: Floats, middles: Middles | None = None) -> Evidence:
        """Per rank and per link, the evidence of one step that it is systematically slow (:mod:`systematic`;
        ``middles``: ``self.ideal.within.middles(values)`` when already known)."""
        within = self.ideal.within
        work, transfers = (None, None) if middles is None else middles
        return within.work.deviations(values, work), within.transfers.deviations(values, transfers)

    def at_ideal(self, values: Floats) -> tuple[Floats, Evidence]:
        """``values`` at their ideal from every peer (:meth:`CrossStage.typical`) and their evidence
        (:meth:`deviations`): each peer group's middle found once for both."""
        fused = _at_ideal(self, values) if _FUSED and native.core is not None else None
        if fused is not None:  # (the same values, in one call)
            return fused
        middles = self.ideal.within.middles(values)
        evidence = self.deviations(values, middles)  # (before the ideal takes the middles over)
        return self.ideal.typical(values, middles=middles), evidence

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
        across = _every_stage(g, g.kind == CHAIN, dense(g.op, g.microbatch, occurrence))
        place = occurrences(np.where(g.kind == BARRIER, -1, dense(g.rank)))  # n-th node of the rank
        replica_key = np.where(g.span >= 0, dense(g.pp, g.tp, g.kind, direction, g.op, g.microbatch, place), -1)
        peer_pp = peer_stage(g, p2p)
        link = np.where(p2p & (peer_pp >= 0) & (peer_pp != g.pp), np.minimum(g.pp, peer_pp), -1)
        return cls(CrossStage(ideal_key, across, PeerTypical(ideal_key, chain, g.rank, link)),
                   PeerTypical(replica_key, chain, g.rank, link))  # fmt: skip


def _at_ideal(peers: Peers, values: Floats) -> tuple[Floats, Evidence] | None:
    """:meth:`Peers.at_ideal` in one native call (None: left to the definition, as ``grouped`` leaves it)."""
    layout = peers.ideal.layout()
    ranks, links = layout.units()
    sums = np.zeros(ranks), np.zeros(ranks), np.zeros(links), np.zeros(links)
    out = np.empty(len(values))
    if layout.at_ideal(np.ascontiguousarray(values, np.float64), out, sums):
        return out, ((sums[0], sums[1]), (sums[2], sums[3]))
    return None


def _peer_layout(typical: PeerTypical, cross: tuple[Ints, Ints, tuple[Ints, Ints, Ints, Ints]]) -> Any:
    """The native layout of ``typical``'s groupings and the cross-stage peers ``cross`` (per position the first
    of its stage peer group, the positions crossed, the stage peer groups by cross-stage key)."""
    assert native.core is not None
    units = typical.work, typical.transfers
    read = [(u.middle.grouping(), u.paired.view(np.uint8), u.unit.astype(np.int64)) for u in units]
    return native.core.peer_layout(typical.work.middle.size, *read, cross)


def _without(layout: Any, values: Floats, slow: Slow) -> Floats | None:
    """:meth:`CrossStage.typical` (or :meth:`PeerTypical.typical`, by its layout) in one native call (None:
    left to the definition, as ``grouped`` leaves it)."""
    out = np.empty(len(values))
    units = (np.ascontiguousarray(s, np.int64) for s in slow)
    if layout.without(np.ascontiguousarray(values, np.float64), *units, out):
        return out
    return None


def _every_stage(g: StepGraph, work: npt.NDArray[np.bool_], key: Ints) -> Ints:
    """``key`` where ``work`` and the key's nodes cover every stage of the step (at least two), else -1."""
    stages = np.unique(g.pp[g.span >= 0])
    if len(stages) < 2 or not work.any():
        return np.full(len(key), -1, np.int64)
    keys, _ = distinct_pairs(key[work], g.pp[work])  # a key per distinct (key, stage)
    covered = np.bincount(keys, minlength=int(key.max()) + 1) == len(stages)
    return np.where(work & covered[key], key, -1)


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
