"""What-if: how long a step would have taken with one element healed, for the elements likely to matter.

Two questions share one vectorised evaluation of the step graph: the structural one (the ideal step from
peers and its decomposition, :mod:`ideal` and :mod:`decompose`), and the temporal one below, against the
job's own healthy baseline, for the attribution of drift findings.

*Healed* means the element's intrinsic durations (see :mod:`stepgraph`) are replaced by the median of its
peers for the same op and microbatch position:

- a **rank** or a **data-parallel replica**: by the median over the replicas of the same position (pipeline
  stage, tensor index, and place in the rank's program — or, for a transfer, direction and microbatch);
- a **pipeline stage**: by the median, over the other stages, of each stage's median for the same op,
  microbatch and occurrence;
- a **link** between two stages: its transfers by the median over the other links' for the same direction
  and microbatch;
- an **op type**: by the job's own healthy baseline (there are no peers within a step), once one exists.

Candidates: every replica, stage and link (up to ``MAX_ALL`` of each, else those most above their peers),
the ranks with the most time above their peers, the op types with the most time above the baseline. Every
node's end is evaluated for the step as observed, at its ideal and with the top rank healed (the rows whose
ends are read); the step with every node at its baseline and each candidate healed give only their step
end, without a row of durations each (:class:`decompose.Rows`: bounded memory at any size).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from audit import native
from streams.engine import dag, elements
from streams.engine.carry import Owners, last_end_per_rank
from streams.engine.codes import compact, distinct_pairs
from streams.engine.decompose import Mask, Pending, Rows, Structural
from streams.engine.ideal import Peers, occurrences, peer_stage
from streams.engine.medians import MIDDLE, NUMPY, grouped, nanmedian_excluding_each_row
from streams.engine.stepgraph import PROGRAM_KINDS, RECV, SEND, Floats, Ints, StepGraph, dense

TOP_RANKS = 4
TOP_OPS = 3
MAX_ALL = 8  # replicas, stages and links evaluated exhaustively up to this many, else the top ones
_NONE = np.zeros(0)
_FUSED = hasattr(native.core, "peer_medians_excluding")  # (native/src/whatif.rs; without it, the definition)
_ROLES = hasattr(native.core, "role_layout")  # (native/src/roles.rs; the same)


@dataclass(frozen=True)
class Candidate:
    element: str  # operator-graph element id
    dimension: str  # rank | dp | stage | link | op
    contains: tuple[str, ...]  # more specific candidates of this step it contains (a replica: its ranks)


@dataclass(frozen=True)
class Healing:
    """How a candidate is healed: the nodes whose ``key`` column holds ``value`` (every node when ``key`` is
    None) at their ``alt`` duration."""

    alt: Floats
    key: Ints | None
    value: int = 0

    def nodes(self) -> Mask:
        return np.ones(len(self.alt), np.bool_) if self.key is None else self.key == self.value


@dataclass(frozen=True)
class StepWhatIf:
    """A step as observed and as modelled, at the job's baseline, and with each candidate healed."""

    step_s: float  # modelled step time (the graph evaluated with observed durations)
    observed_s: float
    baseline_s: float | None  # every node at the job's healthy baseline
    candidates: tuple[Candidate, ...]
    counterfactual_s: Floats  # per candidate
    ends: Floats  # per node end times as observed (for the critical path; empty once released)
    peer_median: Floats  # per node: the median intrinsic duration of its replica peers (empty once released)
    rank_ends: Floats  # per rank: its last span's end, as observed
    top_rank: int | None  # the rank the first candidate heals (ranks are the first candidates; None: no rank)
    structural: Structural  # the ideal step from peers (not decomposed: see decomposed())
    pending: Pending | None  # None once the job has derived what it needs of the step (:meth:`released`)

    def ideal_rank_ends(self) -> Floats:
        """Per rank: its last span's end in the ideal from peers (from observed starts), while the step is
        pending: a job reads its ideal from its timeline's starts (:mod:`carry`), not these."""
        assert self.pending is not None, "released"
        return self.pending.ideal_ends()[1]

    def decomposed(self) -> Structural:
        """The step's blocking slowdown decomposed over its candidate elements (:mod:`decompose`)."""
        assert self.pending is not None, "released"
        return self.pending.run(self.structural.actual_s, self.structural.ideal_s)

    def released(self) -> StepWhatIf:
        """This what-if without its pending decomposition (which holds the step's whole graph), nor its
        per-node rows (``ends``, ``peer_median``: read while the step is analysed, not after)."""
        return replace(self, pending=None, ends=_NONE, peer_median=_NONE)

    def healed_rank_ends(self) -> Floats | None:
        """Per rank: its last span's end with the top rank candidate healed (None: no rank candidate), while the
        step is pending: made when asked (a straggler's cascade reads it, most steps do not)."""
        if self.top_rank is None:
            return None
        assert self.pending is not None, "released"
        g, d0 = self.pending.g, self.pending.d0
        return last_end_per_rank(g, _row_ends(g, np.where(g.rank == self.top_rank, self.peer_median, d0)))

    def gains(self) -> dict[str, float]:
        """Seconds the step would have been shorter with each candidate healed (≥ 0)."""
        return {
            c.element: max(0.0, self.step_s - cf)
            for c, cf in zip(self.candidates, self.counterfactual_s.tolist(), strict=True)
        }


class Grouping:
    """Positions grouped by an integer key, prepared once per structure for repeated medians."""

    def __init__(self, keys: Ints) -> None:
        self.order = compact(np.argsort(keys, kind="stable"))  # (kept per structure: int32)
        k = keys[self.order]
        starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else np.zeros(0, np.int64)
        self.counts = np.diff(np.r_[starts, len(k)])
        self.starts = starts
        self.uniform = len(starts) > 0 and bool((self.counts == self.counts[0]).all())
        self.keys = k[starts] if len(k) else k

    def medians(self, values: Floats) -> Floats:
        """One median per group (groups in key order)."""
        native = grouped(values, self.order, self.starts, self.counts, NUMPY if self.uniform else MIDDLE)
        if native is not None:  # the same values as below
            return native
        v = values[self.order]
        if self.uniform:
            return np.asarray(np.median(v.reshape(len(self.starts), -1), axis=1), np.float64)
        v = v[np.lexsort((v, np.repeat(np.arange(len(self.starts)), self.counts)))]  # (not kept: numpy only)
        middle: Floats = (v[self.starts + (self.counts - 1) // 2] + v[self.starts + self.counts // 2]) / 2
        return middle

    def spread(self, per_group: Floats) -> Floats:
        """Each position's group value."""
        out = np.empty(len(self.order))
        out[self.order] = np.repeat(per_group, self.counts)
        return out


@dataclass(frozen=True)
class Roles:
    """Per node of a step's graph: the peer groups used to heal it. They are made from the graph's node
    columns (:data:`IDENTITY`), which its signature does not fix (the same edges may carry other ops, ranks or
    stages): they are the step's own only while :meth:`fits` holds."""

    position: Grouping  # replica peers: same (stage, tensor index, place in program | direction, microbatch)
    stage_key: Ints  # stage peers: same (op, microbatch, occurrence in the rank's program)
    link: Ints  # the link a transfer crosses (lower stage), -1 for other nodes
    link_key: Ints  # link peers: same (direction, microbatch)
    peers: Peers  # the peers of the ideal step (:mod:`ideal`)
    owners: Owners  # whose clock each observed start is on (:mod:`carry`)
    by_stage: PeerCells  # program nodes by (stage, stage key)
    by_link: PeerCells  # asynchronous sends by (link, link key)
    replicas_of: OfRank  # per rank, the replicas and the stages of its nodes
    stages_of: OfRank
    present: tuple[list[int], list[int]]  # the stages of program nodes, the links of asynchronous sends
    sends: Mask  # the asynchronous sends, and the program nodes with stage peers (``stage_key >= 0``)
    staged: Mask
    made_from: tuple[npt.NDArray[np.generic], ...] = field(default=(), compare=False, repr=False)
    layout: Any = field(default=None, compare=False, repr=False)  # (native/src/roles.rs; None: the definitions)

    def fits(self, g: StepGraph) -> bool:
        """Whether these are ``Roles.of(g)``: ``g``'s node columns are those they were made from (the same
        arrays, as a kept layout gives each of its steps, or equal ones). A graph of the same signature
        without them needs its own."""
        return len(self.made_from) > 0 and all(
            a is b or np.array_equal(a, b) for a, b in zip(self.made_from, _identity(g), strict=True)
        )

    @classmethod
    def of(cls, g: StepGraph) -> Roles:
        n = g.nodes
        chain = np.isin(g.kind, PROGRAM_KINDS)
        p2p = (g.kind == SEND) | (g.kind == RECV)
        idx = np.arange(n)
        first = np.r_[True, g.rank[1 : g.n_chain] != g.rank[: g.n_chain - 1]] if g.n_chain else np.zeros(0, bool)
        rank_start = np.flatnonzero(first)  # (none in a step of transfers alone)
        place = np.zeros(n, np.int64)
        place[: g.n_chain] = idx[: g.n_chain] - np.repeat(rank_start, np.diff(np.r_[rank_start, g.n_chain]))
        peer_pp = peer_stage(g, p2p)  # (an untraced peer: -1, never the stage of another rank)
        direction = np.where(p2p, (peer_pp > g.pp).astype(np.int64) + 2 * (g.kind == RECV), -1)
        position = dense(g.pp, g.tp, np.where(chain, place, -1), direction, np.where(p2p, g.microbatch, -2))
        occurrence = np.zeros(n, np.int64)
        occurrence[: g.n_chain] = occurrences(dense(g.rank, g.op, g.microbatch)[: g.n_chain])
        stage_key = compact(np.where(chain, dense(g.op, g.microbatch, occurrence), -1))  # (kept: int32)
        link = compact(np.where(p2p & (peer_pp >= 0), np.minimum(g.pp, peer_pp), -1))
        link_key = compact(np.where(link >= 0, dense(direction, g.microbatch), -1))
        by_stage = PeerCells.of(np.where(stage_key >= 0, g.pp, 0), np.maximum(stage_key, 0), stage_key >= 0)
        by_link = PeerCells.of(np.maximum(link, 0), np.maximum(link_key, 0), (link >= 0) & (g.kind == SEND))
        peers, owners = Peers.of(g), Owners.of(g)
        of_rank = OfRank.of(g.rank, g.dp), OfRank.of(g.rank, g.pp)
        present = np.unique(g.pp[stage_key >= 0]).tolist(), np.unique(link[(link >= 0) & (g.kind == SEND)]).tolist()
        held = Grouping(position), stage_key, link, link_key, peers, owners, by_stage, by_link, *of_rank, present
        made = cls(*held, g.kind == SEND, stage_key >= 0, _identity(g))
        return replace(made, layout=_role_layout(made, g)) if _ROLES and native.core is not None else made


@dataclass(frozen=True)
class OfRank:
    """Per rank: the distinct values of a node column over its nodes, ascending (one array, and where each
    rank's begin): what the candidate replicas and stages contain of the top ranks, without a mask per rank."""

    starts: Ints  # rank r's values: values[starts[r] : starts[r + 1]]
    values: Ints
    asked: dict[int, frozenset[int]] = field(default_factory=dict, compare=False, repr=False)  # (read every step)

    @classmethod
    def of(cls, rank: Ints, column: Ints) -> OfRank:
        ranked = rank >= 0
        ranks, values = distinct_pairs(rank[ranked], column[ranked])
        return cls(np.searchsorted(ranks, np.arange(int(rank.max(initial=0)) + 2)), values)

    def at(self, r: int) -> frozenset[int]:
        known = self.asked.get(r)
        if known is None:  # (made when first asked: a few ranks of a 16k-rank job's are)
            known = self.asked[r] = frozenset(self.values[self.starts[r] : self.starts[r + 1]].tolist())
        return known


IDENTITY = ("rank", "dp", "pp", "tp", "op", "microbatch", "peer")  # the node columns roles are made of


def _identity(g: StepGraph) -> tuple[npt.NDArray[np.generic], ...]:
    """What a step's roles read of its graph beyond its signature (edges and kinds): its node columns, and
    which nodes start at an observed time (:class:`Owners`)."""
    return (*(getattr(g, name) for name in IDENTITY), np.isfinite(g.floor))


@dataclass(frozen=True)
class PeerCells:
    """The (group, key) cells of the nodes in a mask, grouped once per structure for
    :func:`_peer_medians_excluding`."""

    sel: Ints  # the nodes in the mask
    keys: Ints  # their keys
    shape: tuple[int, int]  # (groups, keys)
    cells: Grouping  # the nodes in the mask by cell (group * keys + key)

    @classmethod
    def of(cls, groups: Ints, keys: Ints, mask: npt.NDArray[np.bool_]) -> PeerCells:
        sel = compact(np.flatnonzero(mask))
        if not len(sel):
            return cls(sel, keys[sel], (0, 0), Grouping(sel))
        n_groups, n_keys = int(groups[sel].max()) + 1, int(keys[sel].max()) + 1
        cells = Grouping(groups[sel].astype(np.int64) * n_keys + keys[sel])
        return cls(sel, compact(keys[sel]), (n_groups, n_keys), cells)


def _role_layout(roles: Roles, g: StepGraph) -> Any:
    """The native core's layout of ``roles`` (native/src/roles.rs): what :func:`_from_peers` and
    :func:`_ranked` read, as int64 columns, read once."""
    assert native.core is not None
    i64 = np.int64
    spans = np.flatnonzero(g.span >= 0)
    at = roles.position
    position = at.order.astype(i64), at.counts.astype(i64), NUMPY if at.uniform else MIDDLE

    def cells(c: PeerCells, groups: Ints) -> tuple[Any, ...]:
        at = c.sel.astype(i64), groups[c.sel].astype(i64), c.keys.astype(i64)
        how = NUMPY if c.cells.uniform else MIDDLE
        return at[0][c.cells.order], c.cells.counts.astype(i64), c.cells.keys.astype(i64), c.shape, at, how

    columns = spans.astype(i64), g.rank[spans].astype(i64), g.dp[spans].astype(i64)
    ranks = int(g.rank.max(initial=0)) + 1
    return native.core.role_layout(
        g.nodes, ranks, columns, position, cells(roles.by_stage, g.pp), cells(roles.by_link, roles.link)
    )


def _from_peers(g: StepGraph, roles: Roles, d0: Floats) -> tuple[Floats, Floats, Floats]:
    """Per node: its replica peers' median at a span (else its duration), and the median over the other
    stages (of program nodes) or links (of asynchronous sends) of each one's median for its key
    (:func:`_peer_medians_excluding`)."""
    if roles.layout is not None and d0.dtype == np.float64 and d0.flags.c_contiguous:  # (one call, or the definitions)
        rows = np.empty(g.nodes), np.full(g.nodes, np.nan), np.full(g.nodes, np.nan)
        if roles.layout.peers(d0, *rows):
            return rows
    peer_med = np.where(g.span >= 0, roles.position.spread(roles.position.medians(d0)), d0)
    by_stage = _peer_medians_excluding(roles.by_stage, d0, g.pp)
    return peer_med, by_stage, _peer_medians_excluding(roles.by_link, d0, roles.link)


def _peer_medians_excluding(at: PeerCells, values: Floats, groups: Ints) -> Floats:
    """Per node: the median over the groups other than its own (``groups``: each node's) of each group's
    median for the node's key (NaN where a node is not in the cells' mask, or a key only its group has: not
    healed). One value per node, not a row per group: healing a group reads its own nodes only."""
    out = np.full(len(values), np.nan)
    if not len(at.sel):
        return out
    if _FUSED and native.core is not None and _plain(values, groups, at.keys):  # (one call, or the definition)
        how = NUMPY if at.cells.uniform else MIDDLE
        cells = (np.ascontiguousarray(a, np.int64) for a in (at.cells.starts, at.cells.counts, at.cells.keys))
        if native.core.peer_medians_excluding(
            values, at.sel, at.cells.order, *cells, at.shape, how, groups, at.keys, out
        ):
            return out
    per = np.full(at.shape, np.nan)
    per.reshape(-1)[at.cells.keys] = at.cells.medians(values[at.sel])
    out[at.sel] = nanmedian_excluding_each_row(per)[groups[at.sel], at.keys]
    return out


def _plain(values: Floats, *keys: Ints) -> bool:
    """Whether the native call reads these arrays as they are (float64 values, int32/int64 keys, each in one
    block): the engine's are; any other the definition computes."""
    arrays = (values, *keys)
    return (
        values.dtype == np.float64
        and all(a.flags.c_contiguous for a in arrays)
        and all(k.dtype in (np.int32, np.int64) for k in keys)
    )


def what_if(g: StepGraph, job: str, ops: list[str], baseline: Floats | None, roles: Roles) -> StepWhatIf:
    """Evaluate the step as observed, at baseline, with each candidate element healed, and at its ideal from
    peers (its decomposition is left to :meth:`StepWhatIf.decomposed`). ``roles``: ``Roles.of(g)``, or roles
    made for an earlier graph that they fit (:meth:`Roles.fits`, which the caller has asked: not again here)."""
    d0 = g.intrinsic
    # every node's end only where it is read (the step as modelled, the top rank healed), a row at a time (no
    # stack of rows, no row kept longer than it is read); the ideal's, the baseline's and the other candidates'
    # step ends without a row of durations each (:class:`decompose.Rows`)
    ends = _row_ends(g, d0)
    ideal, evidence = roles.peers.at_ideal(d0)  # (each peer group's middle found once for both)
    actual_s = float(ends.max())
    peer_med, by_stage, by_link = _from_peers(g, roles, d0)
    cands, healing = _candidates(g, job, ops, baseline, roles, (peer_med, by_stage, by_link))
    top_rank = healing[0].value if cands and cands[0].dimension == "rank" else None  # (healed when asked)
    every = [Healing(ideal, None)] + ([] if baseline is None else [Healing(baseline, None)])  # (every node)
    healed = _healed_step_ends(g, d0, healing + every)
    ideal_s = float(healed[len(healing)])
    baseline_s = None if baseline is None else float(healed[len(healing) + 1])
    structural = Structural(actual_s, ideal_s, (), _NONE, _NONE, {}, decomposed=False)
    return StepWhatIf(
        step_s=actual_s,
        observed_s=g.observed_s,
        baseline_s=baseline_s,
        candidates=tuple(cands),
        counterfactual_s=healed[: len(healing)],
        ends=ends,
        peer_median=peer_med,
        rank_ends=last_end_per_rank(g, ends),
        top_rank=top_rank,
        structural=structural,
        pending=Pending(g, job, ops, d0, ideal, roles.peers, roles.owners, evidence=evidence),
    )


def _row_ends(g: StepGraph, durations: Floats) -> Floats:
    """Every node's end for one row of durations."""
    ends: Floats = g.evaluate(durations[None, :])[0]
    return ends


def _candidates(
    g: StepGraph, job: str, ops: list[str], baseline: Floats | None, roles: Roles, peer: tuple[Floats, Floats, Floats]
) -> tuple[list[Candidate], list[Healing]]:
    """The candidates, in order (ranks first), and how each is healed (``peer``: :func:`_from_peers`). A
    stage's or link's nodes that their peers cannot heal keep their own durations (in ``alt``: a mask per
    candidate of the nodes it heals is left to the definition)."""
    d0 = g.intrinsic
    peer_med, by_stage, by_link = peer
    cands: list[Candidate] = []
    healing: list[Healing] = []

    def add(element: str, dimension: str, heal: Healing, contains: tuple[str, ...] = ()) -> None:
        healing.append(heal)
        cands.append(Candidate(element, dimension, contains))

    by_rank, replicas = _ranked(g, roles, d0, peer_med)
    top_ranks = by_rank[:TOP_RANKS]
    for r in top_ranks:
        add(elements.rank(job, r), "rank", Healing(peer_med, g.rank, r))
    where = {r: (roles.replicas_of.at(r), roles.stages_of.at(r)) for r in top_ranks}
    for d in replicas[:MAX_ALL] if len(replicas) > 2 else []:  # a replica needs peers to be healed by
        inside = tuple(elements.rank(job, r) for r in top_ranks if d in where[r][0])
        add(elements.dp(job, d), "dp", Healing(peer_med, g.dp, d), inside)
    chain, sends = roles.staged, roles.sends
    stages = _top(by_stage, g.pp, d0, chain, roles.present[0])
    stage_alt = np.where(chain & np.isfinite(by_stage), by_stage, d0) if stages else d0  # (d0: not read)
    for s in stages:
        inside = tuple(elements.rank(job, r) for r in top_ranks if s in where[r][1])
        add(elements.stage(job, s), "stage", Healing(stage_alt, g.pp, s), inside)
    # (the links present are those of sends: ``sends & (link == lk)`` is a link's sends, ``link >= 0`` implied)
    links = _top(by_link, roles.link, d0, sends, roles.present[1])
    link_alt = np.where(sends & np.isfinite(by_link), by_link, d0) if links else d0
    for lk in links:
        add(elements.stage_link(job, lk), "link", Healing(link_alt, roles.link, lk))
    if baseline is not None:
        op_excess = np.bincount(g.op, np.maximum(0.0, d0 - baseline), minlength=len(ops))
        for o in [int(o) for o in np.argsort(-op_excess, kind="stable")[:TOP_OPS] if op_excess[o] > 0]:
            add(elements.of_job("op", job, ops[o]), "op", Healing(baseline, g.op, o))
    return cands, healing


def _healed_step_ends(g: StepGraph, d0: Floats, healing: list[Healing]) -> Floats:
    """Per candidate, in order: the step end with its nodes healed (candidates healing to the same durations
    in one evaluation; with the native core, all of them in one call that finds their nodes in their key
    columns, without a mask each)."""
    if dag.keyed_available:
        alts = {id(h.alt): h.alt for h in healing}  # (each array once, in the order first healed to)
        keys = {id(h.key): h.key for h in healing if h.key is not None}
        alt_at, key_at = {a: i for i, a in enumerate(alts)}, {k: i for i, k in enumerate(keys)}
        alt_of = [alt_at[id(h.alt)] for h in healing]
        key_of = [-1 if h.key is None else key_at[id(h.key)] for h in healing]
        value_of = [h.value for h in healing]
        columns = g.schedule, g.indptr, g.indices, g.floor, d0
        return dag.keyed_step_ends(*columns, list(alts.values()), list(keys.values()), alt_of, key_of, value_of)
    out = np.zeros(len(healing))
    i = 0
    while i < len(healing):
        j = i + 1
        while j < len(healing) and healing[j].alt is healing[i].alt:
            j += 1
        out[i:j] = Rows(d0, healing[i].alt, [h.nodes() for h in healing[i:j]]).step_ends(g)
        i = j
    return out


def _ranked(g: StepGraph, roles: Roles, d0: Floats, peer_med: Floats) -> tuple[list[int], list[int]]:
    """The ranks and the replicas by their spans' time above their peers (:func:`_by_excess`)."""
    if roles.layout is not None and d0.dtype == np.float64 and d0.flags.c_contiguous:  # (one call, or the definition)
        ranked: tuple[list[int], list[int]] | None = roles.layout.ranked(d0, peer_med)
        if ranked is not None:
            return ranked
    spans = g.span >= 0
    rank_of, dp_of, excess = g.rank[spans], g.dp[spans], np.maximum(0.0, d0 - peer_med)[spans]  # per span
    by_rank = _by_excess(np.flatnonzero(np.bincount(rank_of)), np.bincount(rank_of, excess))
    return by_rank, _by_excess(np.flatnonzero(np.bincount(dp_of)), np.bincount(dp_of, excess))


def _by_excess(ids: Ints, excess: npt.NDArray[Any]) -> list[int]:  # (excess: a bincount's floats)
    """``ids`` (ascending, distinct) by decreasing ``excess`` (indexed by id), ties by id: ``sorted`` by
    ``(-excess, id)``, whose order among NaN is its own (kept: it is the definition's)."""
    e = excess[ids]
    if np.isnan(e).any():
        return sorted(ids.tolist(), key=lambda i: (-excess[i], i))
    by: list[int] = ids[np.argsort(-e, kind="stable")].tolist()
    return by


def _top(healed: Floats, group: Ints, d0: Floats, mask: npt.NDArray[np.bool_], present: list[int]) -> list[int]:
    """Groups (stages, links) to evaluate: all of them up to MAX_ALL, else those most above their healing
    (``healed``: per node, from the other groups; ``present``: ``group``'s values in ``mask``, ascending)."""
    if len(present) <= MAX_ALL:
        return present
    over = {s: float(np.nansum(np.where(mask & (group == s), d0 - healed, 0.0))) for s in present}
    return sorted(present, key=lambda s: (-over[s], s))[:MAX_ALL]
