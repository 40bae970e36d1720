"""The dependency graph of one training step, rebuilt from its op spans, and its longest-path evaluation.

Nodes are the step's spans plus one virtual node per barrier (a collective instance, or the two ends of a
blocking transfer). Edges:

- **program order**: a rank's program spans (everything except asynchronous transfers) run one after
  another, in order of their midpoints (robust to rounding at span boundaries);
- **barriers**: the spans of a collective ``(group, seq)`` (op class comm or sync) start when the last
  member has arrived: each member's previous span → the barrier → each member's span;
- **blocking transfers** (:mod:`transfers`: declared ``blocking``, or a batched ``sendrecv``) are program
  spans that wait for their peer: the two ends of one transfer meet at a two-member barrier, so a blocking
  span cannot finish before its peer's end has started, and healing a slow peer shortens the waiter (a
  peer's asynchronous send arrives at the barrier when the sender's span before it ended);
- **asynchronous transfers**: a ``send`` is launched (a virtual node lasting the host time between them)
  after the sender's last span that had ended by then, and runs alongside what follows; the paired
  ``recv`` ends when the send does; the receiver's first compute span of that microbatch starting after
  the receive waits for it.

"At the same time" means within a tolerance derived from the step's own timestamps (:func:`tolerance`):
their resolution and their jitter, so that float32 step-relative times with µs jitter, as real exporters
write them, give the same edges as exact ones. Which spans pair (transfers, collectives) never depends on
a time threshold.

Each node has an *intrinsic* duration: a span's own duration for compute and asynchronous sends; for a
barrier member (collective or blocking transfer) the time after the release (the last member's start),
since its wait is not its own; 0 for barriers, for a paired ``recv`` and for syncs without a group. The
*host time* between two program spans of a rank (untraced work, the rank's own) is added to the later
span's intrinsic duration (for a barrier member, whose own time starts at the release: to the earlier
span's), less any part of it spent waiting for a receive the graph already models. A
blocking transfer whose peer is not in the step gets the step's *typical transfer time* (the median own
time of its transfers whose peer is traced: paired blocking spans after their release, and asynchronous
sends; without any, the shortest unpaired blocking span) and the rest of its span is a wait on an
untraced peer: its barrier's floor, never transfer time. A node with no predecessor starts at its observed
start. Evaluating the graph (``ready = max(predecessor ends)``, ``end = ready + intrinsic``) reproduces
the step from its parts, so changing intrinsic durations answers "what if": how long the step would have
taken (:mod:`whatif`).

Evaluation is vectorised level by level over a schedule compiled once per *structure* (same spans in the
same roles and order, as every step of a job has) and cached, and over many duration vectors at once.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine import dag, draft, layouts, noderows, transfers
from streams.engine.codes import Codebook, Floats, Ints, classes, compact, dense, fits_int32
from streams.engine.transfers import FROM, RECV_OPS, SEND_OPS, TO
from streams.errors import DriftlogError

__all__ = ["RECV_OPS", "SEND_OPS", "Codebook", "Floats", "Ints", "StepGraph", "build", "dense"]

EPS = 2e-6  # s: the least tolerance (epoch floats have ~0.24 µs resolution)
MAX_TOLERANCE = 1e-3  # s: the most; and at most MAX_TOLERANCE_SHARE of the step
MAX_TOLERANCE_SHARE = 0.01
native_tolerance = hasattr(native.core, "step_tolerance")  # (the same tolerance from native/src/draft.rs)

KINDS = 6
CHAIN, MEMBER, SEND, RECV, BARRIER, BLOCKING = range(KINDS)  # node kinds (BLOCKING: a blocking transfer)
PROGRAM_KINDS = (CHAIN, MEMBER, BLOCKING)  # nodes in their rank's program order
TRANSFER_KINDS = (SEND, RECV, BLOCKING)
OP_CLASSES = ("comm", "sync", "compute")  # a span's op class, as its code (1, 2, 3; 0: any other)
COMPUTE = 1 + OP_CLASSES.index("compute")
SYNC = 1 + OP_CLASSES.index("sync")


class StepGraphError(DriftlogError):
    """The spans of a step do not form a dependency graph (a cycle: times that contradict the order)."""


class _PairingCycle(StepGraphError):
    """A cycle in a graph with paired blocking transfers (which may be what made it)."""


@dataclass(frozen=True)
class Schedule:
    """Topological levels: per level the nodes (after the sources). Their predecessors, flattened with where
    each node's begin, are made when the numpy evaluation first needs them (:meth:`gathers`): the native
    core reads the graph's CSR, so a structure does not keep them beside it."""

    sources: Ints
    levels: tuple[Ints, ...]
    _gathers: list[tuple[Ints, Ints]] = field(default_factory=list, compare=False, repr=False)

    def gathers(self, indptr: Ints, indices: Ints) -> list[tuple[Ints, Ints]]:
        """Per level, its nodes' predecessors flattened and where each node's begin (``indptr``, ``indices``:
        the CSR of the graphs of this schedule's signature); made once."""
        if len(self._gathers) < len(self.levels):
            indeg = np.diff(indptr)
            for nodes in self.levels:
                offsets = np.concatenate([[0], np.cumsum(indeg[nodes])[:-1]]).astype(np.int64)
                self._gathers.append((indices[_spans_of(indptr, nodes)], offsets))
        return self._gathers


@dataclass
class StepGraph:
    """One step's graph. Node arrays are indexed by node; spans come first, in canonical order (per rank
    program spans in order, then asynchronous transfers), then barriers; ``span`` maps a node to its row in the
    input (-1 for barriers). Times are relative to ``t0``, the step's first observed start."""

    t0: float
    observed_s: float  # last observed end - t0
    kind: Ints
    span: Ints
    rank: Ints
    dp: Ints
    pp: Ints
    tp: Ints
    op: Ints
    microbatch: Ints
    peer: Ints
    n_chain: int  # nodes [0, n_chain) are program spans, by rank; then asynchronous transfers; then barriers
    intrinsic: Floats
    floor: Floats  # start of a node without predecessors (-inf otherwise)
    indptr: Ints  # predecessors of node i: indices[indptr[i]:indptr[i + 1]]
    indices: Ints
    schedule: Schedule
    signature: bytes
    tolerance: float = EPS  # s: how far apart two times of the step count as the same (see :func:`tolerance`)

    @property
    def nodes(self) -> int:
        return len(self.kind)

    def evaluate(self, durations: Floats, floor: Floats | None = None) -> Floats:
        """End times of every node for each row of ``durations`` (rows × nodes of intrinsic durations; the
        ends' rows contiguous); ``floor``: other floors than the observed ones (the what-if's carried starts,
        :mod:`streams.engine.carry`)."""
        floors = self.floor if floor is None else floor
        if dag.available:  # the same ends from the native core (streams/engine/dag.py)
            return dag.ends(self.schedule, self.indptr, self.indices, floors, durations)
        d = np.ascontiguousarray(durations.T)  # node-major: a gather of predecessors reads whole rows
        ends = np.empty_like(d)
        floor = floors[:, None]
        src = self.schedule.sources
        ends[src] = floor[src] + d[src]
        gathers = self.schedule.gathers(self.indptr, self.indices)
        for nodes, (flat, offsets) in zip(self.schedule.levels, gathers, strict=True):
            ready = np.maximum.reduceat(ends[flat], offsets, axis=0)
            ends[nodes] = np.maximum(ready, floor[nodes]) + d[nodes]
        return np.ascontiguousarray(ends.T)  # (rows contiguous, as the native core writes them)

    def critical_path(self, ends: Floats) -> Ints:
        """The chain of nodes that determined the step's end (first to last), for one row of end times."""
        if dag.walks:  # the same nodes from the native core
            return dag.critical_path(self.indptr, self.indices, self.floor, ends)
        node = int(np.argmax(ends))
        path = [node]
        ptr, idx = self.indptr, self.indices
        while ptr[node + 1] > ptr[node]:
            preds = idx[ptr[node] : ptr[node + 1]]
            pred = int(preds[np.argmax(ends[preds])])
            if self.floor[node] > ends[pred]:
                break  # it started at its own observed start, not because of a predecessor
            path.append(pred)
            node = pred
        return np.array(path[::-1], np.int64)


def build(
    c: Mapping[str, npt.NDArray[Any]],
    ops: Codebook,
    groups: Codebook,
    cache: dict[bytes, Schedule],
    op_class: Ints | None = None,
) -> StepGraph:
    """The graph of one step from its op span columns (the contract's op fields, all of one job and step;
    ``p2p`` and ``blocking`` may be absent, as from producers that predate them). When pairing blocking
    transfers by order makes a cycle (their order differs between the two ranks, e.g. a span missing from a
    trace), the step is rebuilt with every blocking transfer treated as waiting for an untraced peer.
    ``op_class``: ``classes(c["op_class"], OP_CLASSES)``, when the caller reads it too (not found twice)."""
    classed = classes(c["op_class"], OP_CLASSES) if op_class is None else op_class
    try:
        return _build(c, ops, groups, cache, classed, pair_blocking=True)
    except _PairingCycle:
        return _build(c, ops, groups, cache, classed, pair_blocking=False)


def _build(
    c: Mapping[str, npt.NDArray[Any]],
    ops: Codebook,
    groups: Codebook,
    cache: dict[bytes, Schedule],
    op_class: Ints,
    pair_blocking: bool,
) -> StepGraph:
    step = _laid_out(c, ops, groups, op_class, pair_blocking)  # (the per-span temporaries go before the CSR is made)
    layout = step.layout
    edges = layout.edges if pair_blocking else None
    if edges is None or not edges.same(step.src, step.dst):
        edges = _edges(step, cache, pair_blocking and step.paired)
        if pair_blocking:
            layout.edges = edges
            layouts.keep(layout)
    step.src = step.dst = _NONE  # (compared with the kept edges)
    cache.setdefault(edges.signature, edges.schedule)  # (the caller reads a new structure's schedule there)
    step.floor[edges.with_predecessor] = -np.inf  # a span with a predecessor starts when that lets it
    return StepGraph(
        t0=step.t0,
        observed_s=step.observed_s,
        kind=edges.kind,
        n_chain=step.n_chain,
        intrinsic=step.intrinsic,
        floor=step.floor,
        indptr=edges.indptr,
        indices=edges.indices,
        schedule=edges.schedule,
        signature=edges.signature,
        tolerance=step.tol,
        span=_span(step.order, step.n),
        **layout.per_node,
    )


_NONE = np.zeros(0, np.int64)


def _span(order: Ints, n: int) -> Ints:
    """Per node: its span row (``order``: the rows in node order, span nodes first), -1 for other nodes; int32
    when the rows fit, as :func:`compact` keeps it (the rows are ``0 .. len(order) - 1``: not read for it)."""
    out = np.full(n, -1, "int32" if len(order) <= 2**31 else "int64")
    out[: len(order)] = order
    return out


@dataclass
class _LaidOut:
    """A step's spans laid out, before its CSR form: what :func:`_build` keeps of them (its per-span columns
    and the draft are let go before the CSR and the schedule are made, the high-water of a large step)."""

    t0: float
    observed_s: float
    tol: float
    order: Ints  # span rows in node order
    n_chain: int
    n: int  # nodes
    layout: layouts.Layout
    paired: bool  # some blocking transfer has a traced peer (a cycle may come from pairing them)
    floor: Floats
    intrinsic: Floats
    src: Ints  # edges
    dst: Ints


def _laid_out(
    c: Mapping[str, npt.NDArray[Any]], ops: Codebook, groups: Codebook, op_class: Ints, pair_blocking: bool
) -> _LaidOut:
    """The step's nodes (on a kept layout when there is one), their floors and intrinsic durations, and the
    edges its times decide."""
    start_abs = np.asarray(c["start"], np.float64)
    t0 = float(start_abs.min())
    start = start_abs - t0
    end = start + np.asarray(c["duration"], np.float64)
    rank, mb, peer, seq = (np.asarray(c[k], np.int64) for k in ("rank", "microbatch", "peer", "seq"))
    op, grp = ops.encode(c["op"]), groups.encode(c["group"])
    flag = c.get("blocking")
    rows = noderows.rows(
        start, end, (rank, mb, peer, seq, op, grp, op_class), transfers.inferred(ops), transfers.declared(c),
        None if flag is None else np.asarray(flag, bool),
    )  # fmt: skip
    direction, blocks, order, n_chain = rows.direction, rows.blocks, rows.order, rows.n_chain
    ci, pi = order[:n_chain], order[n_chain:]
    node_of: Ints | None = None  # (made when a layout or a plan is made)
    dp, pp, tp = (np.asarray(c[k], np.int64) for k in ("dp", "pp", "tp"))
    columns = (rank, mb, peer, rows.per_group, op, grp, rows.role, dp, pp, tp)
    found = layouts.find(columns, order, start, end) if pair_blocking else None  # (kept only from paired builds)
    if found is not None:
        layout, partner = found  # (its identity equals this step's: not gathered again)
    else:
        node_of = _node_of(order)
        layout, partner = _layout(
            _in_node_order(columns, order), order, n_chain, start, end, (rank, mb, peer, direction), blocks,
            noderows.member(grp, seq, op_class), grp, seq, node_of, pair_blocking,
        )  # fmt: skip
    del columns, op, grp, seq, rows, dp, pp, tp  # (the identity's: let go before the draft is made)
    mi, barrier_of = layout.members, layout.barrier_of
    plan = layout.plan  # (made on the step that laid it out, or found it kept without one)
    if plan is None:
        node_of = _node_of(order) if node_of is None else node_of
        flags = (blocks, op_class == COMPUTE, op_class == SYNC)
        plan = _plan(layout, (rank, mb, direction, *flags), partner, ci, pi, node_of)
    del op_class
    n = plan.n
    tol = _step_tolerance(start, end, order, plan)
    d = draft.Draft(start, end, direction, partner, ci, pi, order, plan, tol)
    draft.drafted(d, mi, barrier_of, blocks)

    paired = bool((blocks & (partner >= 0)).any())
    observed_s, n_chain = float(end.max()), len(ci)
    floor, intrinsic, sources, targets = d.floor, d.intrinsic, d.src, d.dst
    del d, start, end, node_of, partner, direction, ci, pi  # (let go before the edges are joined)
    src = np.concatenate(sources)
    sources.clear()
    dst = np.concatenate(targets)
    targets.clear()
    return _LaidOut(t0, observed_s, tol, order, n_chain, n, layout, paired, floor, intrinsic, src, dst)


def _node_of(order: Ints) -> Ints:
    """Per span row: its node (``order``: the rows in node order)."""
    node_of = np.empty(len(order), "int32" if len(order) < 2**31 else "int64")  # (read by index only)
    node_of[order] = np.arange(len(order))
    return node_of


def _plan(
    layout: layouts.Layout, rows: tuple[Ints, Ints, Ints, draft.Mask, draft.Mask, draft.Mask], partner: Ints, ci: Ints,
    pi: Ints,
    node_of: Ints,
) -> draft.Plan | draft.Packed:  # fmt: skip
    """The plan of a layout that keeps none (:func:`draft.plan`), made on a step laid out on it (``rows``:
    rank, microbatch, direction, blocks, compute and sync per row); kept unless the layout is large."""
    try:
        plan = draft.plan(rows, partner, ci, pi, node_of, (layout.members, layout.barrier_of))
    except draft.MalformedPlan as exc:  # (as any step whose spans do not form a graph)
        raise StepGraphError(f"the step's layout: {exc}") from None
    if plan.n <= layouts.PLAN_NODES:
        layout.plan = plan
    return plan


PER_NODE = {"rank": 0, "microbatch": 1, "peer": 2, "op": 4, "dp": 7, "pp": 8, "tp": 9}  # graph columns: identity's


def _in_node_order(columns: tuple[Ints, ...], order: Ints) -> Ints:
    """The identity columns x span nodes (``order``: the rows in node order), as int32 when they fit (the
    layout keeps them, and the graph's node columns made of them, so: half the memory, the same values)."""
    identity = np.empty((len(columns), len(order)), np.int32 if fits_int32(*columns) else np.int64)
    for into, column in zip(identity, columns, strict=True):
        into[:] = column[order]
    return identity


def _layout(
    identity: Ints, order: Ints, n_chain: int, start: Floats, end: Floats, rows: tuple[Ints, Ints, Ints, Ints],
    blocks: npt.NDArray[np.bool_], member: npt.NDArray[np.bool_], grp: Ints, seq: Ints, node_of: Ints,
    pair_blocking: bool,
) -> tuple[layouts.Layout, Ints]:  # fmt: skip
    """Lay out a step's spans (``identity``: its identity columns in node order; ``order``: their rows, the
    first ``n_chain`` program spans; ``rows``: rank, microbatch, peer and direction per row): transfer
    partners (without ``pair_blocking``, a blocking transfer has none), barriers, node columns; and the
    partner rows."""
    rank, mb, peer, direction = rows
    partner, ends_in_order, same_end = transfers.partners_in_order(rank, peer, mb, (start + end) / 2, direction)
    if not pair_blocking:
        alone = np.flatnonzero(blocks & (partner >= 0))
        partner[partner[alone]] = -1
        partner[alone] = -1
    ci = order[:n_chain]
    mi = np.flatnonzero(member[ci] | blocks[ci])  # chain positions of barrier members
    barrier_of = _barriers(ci, mi, grp, seq, partner, blocks, node_of)
    n = len(order) + (int(barrier_of.max()) + 1 if len(mi) else 0) + int((direction[order[n_chain:]] == TO).sum())

    def per_node(values: Ints, pad: int = -1) -> Ints:
        return layouts.frozen(np.concatenate([values, np.full(n - len(order), pad, identity.dtype)]))

    nodes = {name: per_node(identity[i], 0 if name == "op" else -1) for name, i in PER_NODE.items()}
    paired = np.flatnonzero(partner[order] >= 0)
    by_midpoint = layouts.Order.of(node_of[ends_in_order], same_end)
    paired, partner_node, mi, barrier_of = (
        layouts.frozen(a) for a in (paired, node_of[partner[order[paired]]], mi, barrier_of)
    )
    own = {i: layouts.frozen(identity[i].copy()) for i in range(len(identity)) if i not in PER_NODE.values()}
    spans = {i: nodes[name][: len(order)] for name, i in PER_NODE.items()}  # (views: not kept twice)
    kept = tuple(own[i] if i in own else spans[i] for i in range(len(identity)))
    return layouts.Layout(kept, by_midpoint, paired, partner_node, mi, barrier_of, nodes), partner


def _edges(step: _LaidOut, cache: dict[bytes, Schedule], paired: bool) -> layouts.Edges:
    """A graph's node kinds, predecessors in CSR form, signature and schedule, from its edges (the step's
    own edges are let go once in CSR form, kept compact to compare with later steps')."""
    n, n_chain, mi, identity = step.n, step.n_chain, step.layout.members, step.layout.identity
    direction, blocks = (identity[6] >> 4) - 1, (identity[6] >> 3) & 1  # (the role column)
    kind: Ints = np.full(n, BARRIER, "int8")  # (the KINDS fit a byte; typed as the other node columns)
    kind[:n_chain] = CHAIN
    kind[mi] = np.where(blocks[mi] > 0, BLOCKING, MEMBER)
    kind[n_chain : len(direction)] = np.where(direction[n_chain:] == FROM, RECV, SEND)
    indices = step.src[np.argsort(step.dst, kind="stable")]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(step.dst, minlength=n), out=indptr[1:])
    kept = (compact(step.src), compact(step.dst))  # (compared with later steps' edges: by value)
    step.src = step.dst = _NONE
    signature = _signature(indptr, indices, kind.astype(np.int64))  # (as when kinds were int64)
    schedule = _schedule(indptr, indices, signature, cache, paired)
    with_predecessor = compact(np.flatnonzero((np.diff(indptr) > 0) & (kind != BARRIER)))
    frozen = layouts.frozen
    return layouts.Edges(*kept, frozen(kind), frozen(indptr), frozen(indices), with_predecessor, signature, schedule)


def _signature(*arrays: Ints) -> bytes:
    """A structure's signature: the hash of its arrays' bytes, one after the other (read in place)."""
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        h.update(np.ascontiguousarray(a).data)
    return h.digest()


def _schedule(indptr: Ints, indices: Ints, signature: bytes, cache: dict[bytes, Schedule], paired: bool) -> Schedule:
    """The structure's schedule, compiled once (``paired``: a cycle may come from pairing blocking transfers)."""
    schedule = cache.get(signature)
    if schedule is None:
        try:
            schedule = cache[signature] = compile_schedule(indptr, indices)
        except StepGraphError as exc:
            if paired:
                raise _PairingCycle(str(exc)) from None
            raise
    return schedule


def tolerance(start: Floats, end: Floats, rank: Ints, chain: Ints) -> float:
    """How far apart two times of this step may be and still be "at the same time": twice the larger of the
    timestamps' resolution and their jitter; at least ``EPS``, at most ``MAX_TOLERANCE`` and
    ``MAX_TOLERANCE_SHARE`` of the step (spans that do run concurrently, on other streams, must not widen
    it without bound). Both are read off the boundaries of consecutive program spans of a rank, which
    really meet or leave a gap: the resolution is the smallest nonzero distance between them (quantised
    times are never closer), the jitter the 90th percentile of their overlaps (which cannot be real)."""
    rc = rank[chain]
    return _tolerance((start[chain[1:]] - end[chain[:-1]])[rc[1:] == rc[:-1]], end)


def _tolerance(apart: Floats, end: Floats) -> float:
    """:func:`tolerance` from the distances between consecutive program spans of a rank (``apart``)."""
    nonzero = np.abs(apart[apart != 0])
    resolution = float(nonzero.min()) if len(nonzero) else 0.0
    overlap = -apart[apart < 0]
    jitter = quantile(overlap, 0.9) if len(overlap) else 0.0
    cap = min(MAX_TOLERANCE, MAX_TOLERANCE_SHARE * float(end.max(initial=0.0)))
    return max(EPS, min(2.0 * max(resolution, jitter), cap))


def _step_tolerance(start: Floats, end: Floats, order: Ints, plan: draft.Plan | draft.Packed) -> float:
    """:func:`tolerance` of a step on its plan (``order``: its rows in node order): by the native core when its
    times are finite, else as defined."""
    if native_tolerance:
        assert native.core is not None
        tol = native.core.step_tolerance(start, end, order, plan.pairs, (EPS, MAX_TOLERANCE, MAX_TOLERANCE_SHARE))
        if tol is not None:
            return float(tol)
    chain = order[: plan.n_chain]
    return _tolerance(start[chain[plan.pairs + 1]] - end[chain[plan.pairs]], end)


def quantile(x: Floats, q: float) -> float:
    """``float(np.quantile(x, q))`` (numpy's default method, linear; ``x`` not empty, without NaN) without
    its overhead: the two neighbouring order statistics and numpy's interpolation, bit for bit."""
    at = (len(x) - 1) * q
    if at >= len(x) - 1:
        return float(x.max())
    lo = math.floor(at)
    a, b = (float(v) for v in np.partition(x, (lo, lo + 1))[lo : lo + 2])
    t = at - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def _barriers(
    ci: Ints, mi: Ints, grp: Ints, seq: Ints, partner: Ints, blocks: npt.NDArray[np.bool_], node_of: Ints
) -> Ints:
    """Per barrier member (chain positions ``mi``): its barrier, numbered in order of each barrier's first
    member. A collective's members share one; the two ends of a blocking transfer share one (a blocking
    span whose peer's end is not blocking, or not traced, has one of its own)."""
    rows = ci[mi]
    collective = ~blocks[rows]
    first = mi.copy()  # per member: the chain position that names its barrier
    if collective.any():
        which = dense(grp[rows[collective]], seq[rows[collective]])
        lowest = np.full(int(which.max()) + 1, len(ci), np.int64)
        np.minimum.at(lowest, which, mi[collective])
        first[collective] = lowest[which]
    other = partner[rows]
    paired = ~collective & (other >= 0)
    paired[paired] = blocks[other[paired]]
    first[paired] = np.minimum(mi[paired], node_of[other[paired]])
    return dense(first)


def compile_schedule(indptr: Ints, indices: Ints) -> Schedule:
    """Kahn's algorithm, a whole level at a time (vectorised). A level costs its successors, not the graph's
    nodes: each level's successors are counted where they are (``np.unique``), not into an array of every
    node (a step of 16,384 ranks has 1.2 M nodes and over a hundred levels)."""
    n = len(indptr) - 1
    remaining = np.diff(indptr)  # per node: predecessors not placed yet
    succ = np.repeat(np.arange(n), remaining)[np.argsort(indices, kind="stable")]  # successors, by node
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=n), out=sptr[1:])
    frontier = np.flatnonzero(remaining == 0)
    sources = frontier
    levels = []
    placed = len(frontier)
    while frontier.size:
        out, times = np.unique(succ[_spans_of(sptr, frontier)], return_counts=True)
        remaining[out] -= times
        frontier = out[remaining[out] == 0]  # (ascending, once each: as np.unique gives them)
        if frontier.size:
            levels.append(frontier)
            placed += len(frontier)
    if placed != n:
        raise StepGraphError(f"{n - placed} of {n} nodes are in a dependency cycle: span times contradict their order")
    return Schedule(sources, tuple(levels))


def _spans_of(ptr: Ints, nodes: Ints) -> Ints:
    """Positions ptr[i]..ptr[i + 1] of every node i in ``nodes``, concatenated (a CSR gather)."""
    counts = ptr[nodes + 1] - ptr[nodes]
    return np.repeat(ptr[nodes] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))
