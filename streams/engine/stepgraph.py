"""The dependency graph of one training step, rebuilt from its op spans, and its longest-path evaluation.

Nodes are the step's spans plus one virtual node per collective instance (a barrier). Edges:

- **program order**: the blocking spans of a rank (everything except point-to-point ``send``/``recv``) run
  one after another, in start order;
- **barriers**: the spans of a collective ``(group, seq)`` (op class comm or sync) start when the last
  member has arrived: each member's previous span → the barrier → each member's span;
- **pipeline transfers**: a ``send`` starts after the sender's last span that had ended by then and runs
  asynchronously; the ``recv`` with the mirrored ``(rank, peer, microbatch)`` ends when the send does; the
  receiver's first compute span of that microbatch starting after the receive waits for it.

Each node has an *intrinsic* duration: a span's own duration for compute and transfers, the time after the
release for a collective member (its wait is not intrinsic), 0 for barriers, for ``recv`` and for syncs
without a group. A node with no predecessor starts at its observed start. Evaluating the graph
(``ready = max(predecessor ends)``, ``end = ready + intrinsic``) reproduces the step from its parts, so
changing intrinsic durations answers "what if": how long the step would have taken (:mod:`whatif`).

Evaluation is vectorised level by level over a schedule compiled once per *structure* (same spans in the
same roles and order, as every step of a job has) and cached, and over many duration vectors at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.errors import DriftlogError

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]

SEND_OPS = ("send", "isend")
RECV_OPS = ("recv", "irecv")
EPS = 2e-6  # s: event times are epoch floats (~0.24 µs resolution); closer than this counts as "at the same time"

CHAIN, MEMBER, SEND, RECV, BARRIER = range(5)  # node kinds


class StepGraphError(DriftlogError):
    """The spans of a step do not form a dependency graph (a cycle: times that contradict the order)."""


@dataclass
class Codebook:
    """Stable small integers for strings (op names, group names), in first-seen order; "" is 0."""

    codes: dict[str, int] = field(default_factory=lambda: {"": 0})
    names: list[str] = field(default_factory=lambda: [""])

    def encode(self, values: npt.NDArray[Any]) -> Ints:
        items = values.tolist()
        try:
            return np.fromiter(map(self.codes.__getitem__, items), np.int64, len(items))
        except KeyError:
            for v in dict.fromkeys(items):
                if v not in self.codes:
                    self.codes[v] = len(self.names)
                    self.names.append(v)
            return np.fromiter(map(self.codes.__getitem__, items), np.int64, len(items))

    def of(self, names: Iterable[str]) -> Ints:
        return np.array([self.codes[n] for n in names if n in self.codes], np.int64)


@dataclass(frozen=True)
class Schedule:
    """Topological levels: per level the nodes, their predecessors flattened and where each node's begin."""

    sources: Ints
    levels: tuple[tuple[Ints, Ints, Ints], ...]


@dataclass
class StepGraph:
    """One step's graph. Node arrays are indexed by node; spans come first, in canonical order (per rank
    blocking spans in start order, then transfers), then barriers; ``span`` maps a node to its row in the
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
    n_chain: int  # nodes [0, n_chain) are blocking spans, by rank; then transfers; then barriers
    intrinsic: Floats
    floor: Floats  # start of a node without predecessors (-inf otherwise)
    indptr: Ints  # predecessors of node i: indices[indptr[i]:indptr[i + 1]]
    indices: Ints
    schedule: Schedule
    signature: bytes

    @property
    def nodes(self) -> int:
        return len(self.kind)

    def evaluate(self, durations: Floats) -> Floats:
        """End times of every node for each row of ``durations`` (rows × nodes of intrinsic durations)."""
        d = np.ascontiguousarray(durations.T)  # node-major: a gather of predecessors reads whole rows
        ends = np.empty_like(d)
        floor = self.floor[:, None]
        src = self.schedule.sources
        ends[src] = floor[src] + d[src]
        for nodes, flat, offsets in self.schedule.levels:
            ready = np.maximum.reduceat(ends[flat], offsets, axis=0)
            ends[nodes] = np.maximum(ready, floor[nodes]) + d[nodes]
        return ends.T

    def critical_path(self, ends: Floats) -> Ints:
        """The chain of nodes that determined the step's end (first to last), for one row of end times."""
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


@dataclass
class _Draft:
    """A graph under construction: span columns (times relative to the step start), node layout, edges."""

    start: Floats
    end: Floats
    rank: Ints
    mb: Ints
    peer: Ints
    chain: Ints  # span rows of the blocking spans, in node order
    p2p: Ints  # span rows of the transfers, in node order
    is_recv: npt.NDArray[np.bool_]  # per span row
    compute: npt.NDArray[np.bool_]  # per span row
    floor: Floats
    intrinsic: Floats
    src: list[Ints] = field(default_factory=list)
    dst: list[Ints] = field(default_factory=list)

    def edges(self, src: Ints, dst: Ints) -> None:
        self.src.append(np.asarray(src, np.int64))
        self.dst.append(np.asarray(dst, np.int64))


def build(
    c: Mapping[str, npt.NDArray[Any]], ops: Codebook, groups: Codebook, cache: dict[bytes, Schedule]
) -> StepGraph:
    """The graph of one step from its op span columns (the contract's op fields, all of one job and step)."""
    start_abs = np.asarray(c["start"], np.float64)
    t0 = float(start_abs.min())
    start = start_abs - t0
    end = start + np.asarray(c["duration"], np.float64)
    rank, mb, peer, seq = (np.asarray(c[k], np.int64) for k in ("rank", "microbatch", "peer", "seq"))
    op, grp = ops.encode(c["op"]), groups.encode(c["group"])
    op_class = c["op_class"]
    comm, sync = op_class == "comm", op_class == "sync"
    member = (grp > 0) & (seq >= 0) & (comm | sync)
    p2p = comm & ~member & (peer >= 0)
    send = p2p & np.isin(op, ops.of(SEND_OPS))
    recv = p2p & np.isin(op, ops.of(RECV_OPS))
    ci = np.flatnonzero(~(send | recv))
    ci = ci[np.lexsort((start[ci] + end[ci], rank[ci]))]  # by midpoint: robust to rounding at span boundaries
    pi = np.flatnonzero(send | recv)
    pi = pi[np.lexsort((peer[pi], mb[pi], recv[pi], rank[pi]))]
    mi = np.flatnonzero(member[ci])  # chain positions of collective members
    barrier_of = dense(grp[ci[mi]], seq[ci[mi]] - seq[ci[mi]].min(initial=0))
    n_barrier = int(barrier_of.max()) + 1 if len(mi) else 0
    n = len(ci) + len(pi) + n_barrier
    draft = _Draft(start, end, rank, mb, peer, ci, pi, recv, op_class == "compute", np.full(n, -np.inf), np.zeros(n))
    draft.intrinsic[: len(ci)] = np.where(sync[ci], 0.0, end[ci] - start[ci])  # a sync without a group only waits
    _program_order(draft, mi, barrier_of, n_barrier)
    _transfers(draft)

    kind = np.full(n, BARRIER, np.int64)
    kind[: len(ci)] = CHAIN
    kind[mi] = MEMBER
    kind[len(ci) : len(ci) + len(pi)] = np.where(recv[pi], RECV, SEND)
    s_all, d_all = np.concatenate(draft.src), np.concatenate(draft.dst)
    indices = s_all[np.argsort(d_all, kind="stable")]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(d_all, minlength=n), out=indptr[1:])
    # a span with a predecessor starts when that lets it (a barrier keeps the arrivals of first spans)
    draft.floor[(np.diff(indptr) > 0) & (kind != BARRIER)] = -np.inf
    signature = hashlib.blake2b(indptr.tobytes() + indices.tobytes(), digest_size=16).digest()
    schedule = cache.get(signature)
    if schedule is None:
        schedule = cache[signature] = compile_schedule(indptr, indices)
    order = np.concatenate([ci, pi])

    def per_node(values: npt.NDArray[Any], pad: int = -1) -> Ints:
        return np.concatenate([np.asarray(values, np.int64)[order], np.full(n_barrier, pad, np.int64)])

    return StepGraph(
        t0=t0,
        observed_s=float(end.max()),
        kind=kind,
        span=per_node(np.arange(len(start))),
        rank=per_node(rank),
        dp=per_node(c["dp"]),
        pp=per_node(c["pp"]),
        tp=per_node(c["tp"]),
        op=per_node(op, 0),
        microbatch=per_node(mb),
        peer=per_node(peer),
        n_chain=len(ci),
        intrinsic=draft.intrinsic,
        floor=draft.floor,
        indptr=indptr,
        indices=indices,
        schedule=schedule,
        signature=signature,
    )


def _program_order(d: _Draft, mi: Ints, barrier_of: Ints, n_barrier: int) -> None:
    """Each rank's blocking spans one after another; a collective member waits for its barrier, which
    waits for every member's previous span (or, for a member with none, its arrival)."""
    n_chain = len(d.chain)
    rc = d.rank[d.chain]
    prev = np.arange(-1, n_chain - 1)
    prev[np.r_[True, rc[1:] != rc[:-1]]] = -1
    is_member = np.zeros(n_chain, bool)
    is_member[mi] = True
    plain = np.flatnonzero(~is_member & (prev >= 0))
    d.edges(prev[plain], plain)
    barrier_node = n_chain + len(d.p2p) + barrier_of
    d.edges(barrier_node, mi)
    has_prev = prev[mi] >= 0
    d.edges(prev[mi][has_prev], barrier_node[has_prev])
    arrivals = d.start[d.chain[mi]]
    np.maximum.at(d.floor, barrier_node[~has_prev], arrivals[~has_prev])
    release = np.full(n_barrier, -np.inf)
    np.maximum.at(release, barrier_of, arrivals)
    d.intrinsic[mi] = np.maximum(0.0, d.end[d.chain[mi]] - release[barrier_of])
    source = (prev < 0) & ~is_member
    d.floor[:n_chain][source] = d.start[d.chain][source]


def _transfers(d: _Draft) -> None:
    """A send follows the sender's last blocking span ended by then (and runs alongside what follows);
    the mirrored recv ends with it; the receiver's first compute span of that microbatch starting after the
    recv waits for it. Unmatched transfers start at their observed start."""
    n_chain, span_len = len(d.chain), float(d.end.max()) + 1.0  # span_len keeps (rank, time) keys exact
    rc, start, end, rank, mb, peer = d.rank[d.chain], d.start, d.end, d.rank, d.mb, d.peer
    sends = np.flatnonzero(~d.is_recv[d.p2p])
    s_rows = d.p2p[sends]
    j = np.searchsorted(rc * span_len + end[d.chain], rank[s_rows] * span_len + start[s_rows] + EPS, side="right") - 1
    ok = (j >= 0) & (rc[np.maximum(j, 0)] == rank[s_rows])
    d.edges(j[ok], n_chain + sends[ok])
    d.floor[n_chain + sends[~ok]] = start[s_rows[~ok]]
    d.intrinsic[n_chain + sends] = end[s_rows] - start[s_rows]
    width = int(max(mb.max(initial=0), 0)) + 2
    ranks_n = int(max(rank.max(initial=0), peer.max(initial=0))) + 1
    send_key = (rank[s_rows] * ranks_n + peer[s_rows]) * width + mb[s_rows] + 1
    by_key = np.argsort(send_key, kind="stable")
    recvs = np.flatnonzero(d.is_recv[d.p2p])
    r_rows = d.p2p[recvs]
    want = (peer[r_rows] * ranks_n + rank[r_rows]) * width + mb[r_rows] + 1
    matched = np.zeros(len(recvs), bool)
    if len(sends):
        k = np.minimum(np.searchsorted(send_key[by_key], want), len(sends) - 1)
        matched = send_key[by_key][k] == want
        d.edges(n_chain + sends[by_key[k[matched]]], n_chain + recvs[matched])
    lone = r_rows[~matched]
    d.floor[n_chain + recvs[~matched]] = start[lone]
    d.intrinsic[n_chain + recvs[~matched]] = end[lone] - start[lone]
    comp = np.flatnonzero(d.compute[d.chain])
    if not len(comp):
        return
    comp_key = (rc[comp] * width + mb[d.chain[comp]] + 1) * span_len + start[d.chain[comp]]
    by_start = np.argsort(comp_key, kind="stable")
    q = np.searchsorted(comp_key[by_start], (rank[r_rows] * width + mb[r_rows] + 1) * span_len + end[r_rows] - EPS)
    consumer = comp[by_start[np.minimum(q, len(comp) - 1)]]
    same = (q < len(comp)) & (rc[consumer] == rank[r_rows]) & (mb[d.chain[consumer]] == mb[r_rows])
    d.edges(n_chain + recvs[same], consumer[same])


def compile_schedule(indptr: Ints, indices: Ints) -> Schedule:
    """Kahn's algorithm, a whole level at a time (vectorised)."""
    n = len(indptr) - 1
    indeg = np.diff(indptr)
    dst = np.repeat(np.arange(n), indeg)
    by_src = np.argsort(indices, kind="stable")
    succ = dst[by_src]
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=n), out=sptr[1:])
    remaining = indeg.copy()
    frontier = np.flatnonzero(indeg == 0)
    sources = frontier
    levels = []
    placed = len(frontier)
    while frontier.size:
        out = succ[_spans_of(sptr, frontier)]
        remaining -= np.bincount(out, minlength=n)
        frontier = np.unique(out[remaining[out] == 0])
        if frontier.size:
            lengths = indeg[frontier]
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            levels.append((frontier, indices[_spans_of(indptr, frontier)], offsets))
            placed += len(frontier)
    if placed != n:
        raise StepGraphError(f"{n - placed} of {n} nodes are in a dependency cycle: span times contradict their order")
    return Schedule(sources, tuple(levels))


def _spans_of(ptr: Ints, nodes: Ints) -> Ints:
    """Positions ptr[i]..ptr[i + 1] of every node i in ``nodes``, concatenated (a CSR gather)."""
    counts = ptr[nodes + 1] - ptr[nodes]
    return np.repeat(ptr[nodes] - np.cumsum(counts) + counts, counts) + np.arange(int(counts.sum()))


def dense(*cols: Ints) -> Ints:
    """One small integer per distinct tuple of the integer columns (0, 1, ... in the tuples' sorted order)."""
    if not len(cols[0]):
        return np.zeros(0, np.int64)
    key = np.zeros(len(cols[0]), np.int64)
    radix = 1
    for col in cols:
        lo, hi = int(col.min()), int(col.max())
        width = hi - lo + 1
        radix *= width
        if radix >= 1 << 62:
            raise OverflowError("too many distinct values to combine into one key")
        key = key * width + (col - lo)
    _, inverse = np.unique(key, return_inverse=True)
    return np.asarray(inverse, np.int64).ravel()
