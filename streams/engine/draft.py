"""A step graph under construction (:mod:`stepgraph`): the floors, intrinsic durations and edges that a step's
times decide, on its layout (:mod:`layouts`).

What the layout alone decides (which chain positions are barrier members, follow one another, send or
receive, compute; which nodes are partners, launch nodes, barriers) is its :class:`Plan`, made on the first
step laid out on it and read by every later one: a step then gathers its times at those positions instead of
finding them again. A plan holds positions and nodes, never rows (each step's own, in whatever order its
spans arrived): rows are read through the step's node order.

With the native core built, a plan is kept :class:`Packed` (int32, all it keeps) and a step's draft is made
in one call (native/src/draft.rs, equal to the definitions below bit for bit:
tests/unit/test_stepgraph_draft.py), except on a layout with a blocking transfer whose peer is not traced
(its typical transfer time is the definition's median over the step). A plan is derived data: a layout
without one (a restored snapshot keeps none: layouts are not in it) makes it again, the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine.codes import Floats, Ints, fits_int32
from streams.engine.transfers import FROM, TO

Mask = npt.NDArray[np.bool_]
native_drafts = hasattr(native.core, "step_plan_check")  # (the same drafts from native/src/draft.rs)


@dataclass(frozen=True)
class Plan:
    """What a step's draft reads that its layout decides (chain positions: its program spans in node order;
    p2p positions: its asynchronous transfers in node order; member positions: in ``members``)."""

    n_barrier: int
    n: int  # nodes
    n_chain: int
    sync: Mask  # per chain position: a sync without a group (it only waits)
    rank: Ints  # per chain position
    mb: Ints  # per chain position
    prev: Ints  # per chain position: its rank's previous program span's, -1 for none
    member: Mask  # per chain position: a barrier member
    pairs: Ints  # chain positions followed by one of their rank
    launch_of: Ints  # per p2p position: its launch node, -1 for none
    plain: Ints  # chain positions that follow their previous span (not members)
    barrier_node: Ints  # per member
    has_prev: Mask  # per member: it has a previous span
    gate: Ints  # per member: the node that gates its external arrival, -1 for none
    ungated: Ints  # member positions without a gate
    transfer: Ints  # member positions of blocking transfers
    async_peer: Ints  # member positions whose peer's end is an asynchronous send
    async_peer_node: Ints  # per such member: its peer's node
    lone: Ints  # member positions of blocking transfers whose peer is not traced
    source: Ints  # chain positions that start the graph (no previous span, not members)
    after: Ints  # chain positions with a previous span
    onto: Ints  # members with a previous span (their gap goes onto it)
    sends: Ints  # p2p positions of sends
    recvs: Ints  # p2p positions of receives
    send_rank: Ints  # per send
    matched: Ints  # recv positions (in ``recvs``) whose send is traced
    matched_from: Ints  # per such recv: its send's node
    comp: Ints  # chain positions of compute spans
    comp_group: Ints  # per compute span: its (rank, microbatch) key (``width`` microbatches per rank)
    recv_group: Ints  # per recv: the (rank, microbatch) key of the compute span that consumes it
    recv_rank: Ints
    recv_mb: Ints
    width: int


class MalformedPlan(ValueError):
    """A plan whose indices are not within what they index (inconsistent with the step it was made from)."""


@dataclass(frozen=True)
class Packed:
    """A plan as the native core reads it (native/src/draft.rs), all it keeps: a head (nodes, chain
    positions, barriers, then where each array begins in ``arrays``) and the plan's arrays, joined as int32
    in the order of its ``P``."""

    n: int
    n_chain: int
    pairs: Ints  # chain positions followed by one of their rank
    head: Ints
    arrays: npt.NDArray[np.int32]
    most_edges: int  # a bound on a step's edges


def packed(p: Plan, mi: Ints, barrier_of: Ints) -> Packed | None:
    """``p`` as the native core reads it, when it has no typical transfer time to find (a blocking transfer
    whose peer is not traced) and its values fit int32; :class:`MalformedPlan` when an index is out of range
    (checked here, once: the native draft of each step on it reads it unchecked)."""
    if len(p.lone):
        return None
    arrays = [
        p.sync, p.prev, p.member, p.rank, p.mb, mi, barrier_of, p.barrier_node, p.has_prev, p.gate, p.ungated,
        p.async_peer, p.async_peer_node, p.plain, p.source, p.after, p.onto, p.sends, p.launch_of[p.sends],
        p.send_rank, p.recvs, p.matched, p.matched_from, p.comp, p.comp_group, p.recv_group, p.recv_rank, p.recv_mb,
    ]  # fmt: skip
    if not fits_int32(*arrays):
        return None
    bounds = np.cumsum([0, *(len(a) for a in arrays)])
    head = np.concatenate([[p.n, p.n_chain, p.n_barrier], bounds]).astype(np.int64)
    most_edges = len(p.plain) + 3 * len(mi) + 2 * len(p.sends) + len(p.recvs) + len(p.matched)
    # (cast while joined: no int64 copy of the whole plan beside it, ~50 MB at 16k ranks; the values fit)
    values = np.concatenate(arrays, dtype=np.int32, casting="same_kind")
    head.flags.writeable = values.flags.writeable = False  # (checked once: every step reads it unchecked)
    assert native.core is not None
    try:
        native.core.step_plan_check(head, values)
    except ValueError as exc:
        raise MalformedPlan(str(exc)) from None
    return Packed(p.n, p.n_chain, p.pairs, head, values, most_edges)


def plan(
    rows: tuple[Ints, Ints, Ints, Mask, Mask, Mask], partner: Ints, chain: Ints, p2p: Ints, node_of: Ints,
    members: tuple[Ints, Ints],
) -> Plan | Packed:  # fmt: skip
    """A layout's plan (:class:`Packed`, all it keeps, when the native core can read it) from a step laid out
    on it (``rows``: rank, microbatch, direction, blocks, compute and sync per row; ``partner``: per row, the
    other end of its transfer or -1; ``chain``, ``p2p``: the rows of the program spans and asynchronous
    transfers in node order; ``members``: the chain positions of barrier members and their barriers)."""
    rank, mb, direction, blocks, compute, sync = rows
    mi, barrier_of = members
    n_chain, n_p2p = len(chain), len(p2p)
    n_barrier = int(barrier_of.max()) + 1 if len(mi) else 0
    async_sends = np.flatnonzero(direction[p2p] == TO)  # each has a launch node after the barriers
    n = n_chain + n_p2p + n_barrier + len(async_sends)
    launch_of = np.full(n_p2p, -1, np.int64)
    launch_of[async_sends] = np.arange(n_chain + n_p2p + n_barrier, n)
    rc = rank[chain]
    same_rank = rc[1:] == rc[:-1]
    prev = np.arange(-1, n_chain - 1)
    prev[1:][~same_rank] = -1
    member = np.zeros(n_chain, bool)
    member[mi] = True
    barrier_node = n_chain + n_p2p + barrier_of
    m_rows = chain[mi]
    other = partner[m_rows]
    transfer = blocks[m_rows]
    async_peer = transfer & (other >= 0)
    async_peer[async_peer] = ~blocks[other[async_peer]]
    gate = np.full(len(mi), -1, np.int64)
    gate[async_peer] = launch_of[node_of[other[async_peer]] - n_chain]
    recv = direction[p2p] == FROM
    sends, recvs = np.flatnonzero(~recv), np.flatnonzero(recv)
    r_rows = p2p[recvs]
    matched = np.flatnonzero(partner[r_rows] >= 0)
    comp = np.flatnonzero(compute[chain])
    width = int(max(mb.max(initial=0), 0)) + 2
    made = Plan(
        n_barrier=n_barrier,
        n=n,
        n_chain=n_chain,
        sync=sync[chain],
        rank=rc,
        mb=mb[chain],
        prev=prev,
        member=member,
        pairs=np.flatnonzero(same_rank),
        launch_of=launch_of,
        plain=np.flatnonzero(~member & (prev >= 0)),
        barrier_node=barrier_node,
        has_prev=prev[mi] >= 0,
        gate=gate,
        ungated=np.flatnonzero(gate < 0),
        transfer=np.flatnonzero(transfer),
        async_peer=np.flatnonzero(async_peer),
        async_peer_node=np.asarray(node_of[other[async_peer]], np.int64),
        lone=np.flatnonzero(transfer & (other < 0)),
        source=np.flatnonzero((prev < 0) & ~member),
        after=np.flatnonzero(prev >= 0),
        onto=np.flatnonzero(member & (prev >= 0)),
        sends=sends,
        recvs=recvs,
        send_rank=rank[p2p[sends]],
        matched=matched,
        matched_from=np.asarray(node_of[partner[r_rows[matched]]], np.int64),
        comp=comp,
        comp_group=rc[comp] * width + mb[chain[comp]] + 1,
        recv_group=rank[r_rows] * width + mb[r_rows] + 1,
        recv_rank=rank[r_rows],
        recv_mb=mb[r_rows],
        width=width,
    )
    return (packed(made, mi, barrier_of) if native_drafts else None) or made


@dataclass
class Draft:
    """A graph under construction: span columns (times relative to the step start), node layout, edges."""

    start: Floats
    end: Floats
    direction: Ints  # per span row (transfers.TO / FROM / BOTH / NONE)
    partner: Ints  # per span row: the other end of its transfer, -1 when none
    chain: Ints  # span rows of the program spans, in node order
    p2p: Ints  # span rows of the asynchronous transfers, in node order
    order: Ints  # span rows in node order (``chain``, then ``p2p``)
    plan: Plan | Packed
    tol: float
    floor: Floats = field(init=False)
    intrinsic: Floats = field(init=False)
    gap: Floats = field(init=False)  # per chain position: host time since the rank's previous program span
    host: Floats = field(init=False)  # per chain position: the host time added to its intrinsic duration
    pushed: Floats = field(init=False)  # per chain position: of that, the next member's gap (after its end)
    src: list[Ints] = field(default_factory=list)
    dst: list[Ints] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.floor = np.full(self.plan.n, -np.inf)
        self.intrinsic = np.zeros(self.plan.n)
        self.gap = np.zeros(len(self.chain))
        self.host = np.zeros(len(self.chain))
        self.pushed = np.zeros(len(self.chain))

    def edges(self, src: Ints, dst: Ints) -> None:
        self.src.append(np.asarray(src, np.int64))
        self.dst.append(np.asarray(dst, np.int64))


def drafted(d: Draft, mi: Ints, barrier_of: Ints, blocks: Mask) -> None:
    """The step's floors, intrinsic durations and edges (``mi``, ``barrier_of``: its barrier members' chain
    positions and barriers; ``blocks``: per row, a blocking transfer)."""
    if isinstance(d.plan, Packed):
        _native(d, d.plan)
        return
    p, chain, start, end = d.plan, d.chain, d.start, d.end
    d.intrinsic[: len(chain)] = np.where(p.sync, 0.0, end[chain] - start[chain])  # a sync without a group waits
    arrivals = external_arrivals(d, p, mi, blocks)
    program_order(d, p, mi, barrier_of, arrivals)
    transfers(d, p)


def _native(d: Draft, p: Packed) -> None:
    """:func:`drafted` by the native core."""
    assert native.core is not None
    src, dst = np.empty(p.most_edges, np.int64), np.empty(p.most_edges, np.int64)
    span_len = float(d.end.max()) + 1.0  # (as :func:`transfers` reads it)
    m = native.core.step_draft(
        p.head, p.arrays, d.start, d.end, d.order, d.tol, span_len, d.floor, d.intrinsic, src, dst
    )
    d.edges(src[:m], dst[:m])


def external_arrivals(d: Draft, p: Plan, mi: Ints, blocks: Mask) -> Floats:
    """Per barrier member: an arrival at its barrier from outside its program spans (-inf: none); the node
    that gates it is the plan's ``gate`` (-1: none, the arrival is then a fixed floor). A blocking transfer
    whose peer's end is asynchronous waits for that send's launch (so healing the sender moves it); one
    whose peer is not traced waits until its end less the step's typical transfer time."""
    out = np.full(len(mi), -np.inf)
    if len(p.async_peer):
        out[p.async_peer] = d.start[d.order[p.async_peer_node]]
    if len(p.lone):
        out[p.lone] = d.end[d.chain[mi[p.lone]]] - typical_transfer(d, blocks)
    return out


def launched_after(d: Draft, p: Plan, rows: Ints) -> Ints:
    """Per asynchronous send row (``rows``: the plan's sends'): the chain position of its rank's last
    program span that had ended when it started (within the tolerance), or -1."""
    if not len(d.chain) or not len(rows):
        return np.full(len(rows), -1, np.int64)
    span_len = float(d.end.max()) + 1.0  # keeps (rank, time) keys exact
    rc, rank = p.rank, p.send_rank
    key = rc * span_len + d.end[d.chain]
    j = np.searchsorted(key, rank * span_len + d.start[rows] + d.tol, side="right") - 1
    ok = (j >= 0) & (rc[np.maximum(j, 0)] == rank)
    return np.where(ok, j, -1).astype(np.int64)


def typical_transfer(d: Draft, blocks: Mask) -> float:
    """The step's typical transfer time: the median own time of transfers whose peer is traced (blocking
    ends after both have started; asynchronous sends), or, without any, the shortest unpaired blocking span."""
    paired = np.flatnonzero(blocks & (d.partner >= 0))
    own = d.end[paired] - np.maximum(d.start[paired], d.start[d.partner[paired]])
    sends = d.p2p[d.direction[d.p2p] == TO]
    own = np.concatenate([own, d.end[sends] - d.start[sends]])
    if len(own):
        return float(np.median(np.maximum(own, 0.0)))
    lone = np.flatnonzero(blocks & (d.partner < 0))
    return float((d.end[lone] - d.start[lone]).min())


def program_order(d: Draft, p: Plan, mi: Ints, barrier_of: Ints, external: Floats) -> None:
    """Each rank's program spans one after another; a barrier member waits for its barrier, which waits for
    every member's previous span (or, for a member with none, its arrival) and its external arrivals (after
    the span gating them, else at their observed time)."""
    chain = d.chain
    n_chain, prev = len(chain), p.prev
    d.edges(prev[p.plain], p.plain)
    barrier_node, has_prev = p.barrier_node, p.has_prev
    d.edges(barrier_node, mi)
    d.edges(prev[mi][has_prev], barrier_node[has_prev])
    arrivals = d.start[chain[mi]]
    np.maximum.at(d.floor, barrier_node[~has_prev], arrivals[~has_prev])
    gated = p.gate >= 0
    d.edges(p.gate[gated], barrier_node[gated])
    np.maximum.at(d.floor, barrier_node[p.ungated], external[p.ungated])
    release = np.full(p.n_barrier, -np.inf)
    np.maximum.at(release, barrier_of, np.maximum(arrivals, external))
    d.intrinsic[mi] = np.maximum(0.0, d.end[chain[mi]] - release[barrier_of])
    d.floor[:n_chain][p.source] = d.start[chain[p.source]]
    after = p.after
    d.gap[after] = np.maximum(0.0, d.start[chain[after]] - d.end[chain[prev[after]]])
    host_time(d, p)


def host_time(d: Draft, p: Plan) -> None:
    """Add each program span's gap (the rank's own host time before it) to an intrinsic duration: its own,
    or, for a barrier member (whose own time starts at the release), its previous span's."""
    d.intrinsic[: len(d.chain)] -= d.host
    d.pushed.fill(0.0)  # (in place: the draft's per-chain columns are not made twice)
    d.pushed[p.prev[p.onto]] = d.gap[p.onto]
    np.copyto(d.host, d.gap)
    d.host[p.member] = 0.0
    d.host += d.pushed
    d.intrinsic[: len(d.chain)] += d.host


def transfers(d: Draft, p: Plan) -> None:
    """An asynchronous send follows the sender's last program span ended by then (and runs alongside what
    follows); an asynchronous recv ends with the other end of its transfer; the receiver's first compute
    span of that microbatch starting after the recv waits for it. Unpaired transfers start at their
    observed start."""
    n_chain, span_len = len(d.chain), float(d.end.max()) + 1.0  # span_len keeps (rank, time) keys exact
    start, end = d.start, d.end
    sends = p.sends
    s_rows = d.p2p[sends]
    j = launched_after(d, p, s_rows)
    ok = j >= 0
    launch = p.launch_of[sends]
    d.edges(j[ok], launch[ok])
    d.intrinsic[launch[ok]] = np.maximum(0.0, start[s_rows[ok]] - end[d.chain[j[ok]]] - d.pushed[j[ok]])
    d.floor[launch[~ok]] = start[s_rows[~ok]]
    d.edges(launch, n_chain + sends)
    d.intrinsic[n_chain + sends] = end[s_rows] - start[s_rows]
    recvs = p.recvs
    r_rows = d.p2p[recvs]
    d.edges(p.matched_from, n_chain + recvs[p.matched])
    unmatched = np.ones(len(recvs), bool)
    unmatched[p.matched] = False
    lone = r_rows[unmatched]
    d.floor[n_chain + recvs[unmatched]] = start[lone]
    d.intrinsic[n_chain + recvs[unmatched]] = end[lone] - start[lone]
    comp = p.comp
    if not len(comp):
        return
    comp_key = p.comp_group * span_len + start[d.chain[comp]]
    by_start = np.argsort(comp_key, kind="stable")
    comp_key = comp_key[by_start]  # (sorted; the unsorted keys go)
    want = p.recv_group * span_len + end[r_rows] - d.tol
    q = np.searchsorted(comp_key, want)
    del comp_key, want
    n_comp = len(comp)
    consumer = comp[by_start[np.minimum(q, n_comp - 1)]]
    del by_start
    same = (q < n_comp) & (p.rank[consumer] == p.recv_rank) & (p.mb[consumer] == p.recv_mb)
    del q
    d.edges(n_chain + recvs[same], consumer[same])
    not_host_time(d, p, consumer[same], end[r_rows[same]])


def not_host_time(d: Draft, p: Plan, consumers: Ints, ready: Floats) -> None:
    """A consumer waited for its receive: its gap until the receive ended is a wait the graph already models
    (the edge from the receive), not host time."""
    prev = p.prev
    ok = prev[consumers] >= 0
    consumers, ready = consumers[ok], ready[ok]
    own = np.maximum(0.0, d.start[d.chain[consumers]] - np.maximum(d.end[d.chain[prev[consumers]]], ready))
    np.minimum.at(d.gap, consumers, own)
    host_time(d, p)
