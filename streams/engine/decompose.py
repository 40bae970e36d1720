"""Decomposition of a step's blocking slowdown over the elements that may cause it, with both definitions
of the what-if analysis (:mod:`ideal`):

- **heal only X**: the step with X's nodes at their ideal and everything else as observed; X's slowdown is
  T(actual) / T(actual with X healed);
- **leave only X unhealed**: the ideal step except X's nodes as observed; X's slowdown is
  T(ideal except X) / T(ideal).

The first asks what fixing X alone would buy; the second how slow X alone makes an otherwise ideal job.
They differ when several elements straggle at once (healing one leaves the others to block).

Candidates: every pipeline stage and link and data-parallel replica (up to ``MAX_ALL`` of each, else those
with the most time above their ideal — a documented cap for very large jobs), the ``MAX_RANKS`` ranks and
``MAX_OPS`` op types with the most time above their ideal, and the group cause ``spread:<job>/dp``: the
variation across data-parallel replicas (healed: every replica at the typical replica; left alone: the
ideal plus each node's difference from the typical replica), the name for an imbalance spread over all
replicas with no single one to blame. A link is its transfers (both directions); a stage and a replica are
their spans; a replica and a rank exclude their transfers over the candidate links (those are the link's:
without them they do not carry a slow link's time, healed or left unhealed); a stage keeps its transfers
and contains its links.

Healed together (:meth:`Pending.healed_together`): a group of candidates at their ideal at once, one row per
group, for the attribution's question whether a few parts explain a container (:mod:`attribution`).

The engine decomposes a step only when its causes may be asked for (:class:`Pending`, run by
:mod:`structural` when the step is at least half the ``structural_slowdown`` threshold above its ideal and
its episode has not been reported yet): a healthy step costs one extra row (the ideal), and an episode's
decompositions stop with its finding.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from streams.engine import dag, elements
from streams.engine.carry import Chained, Owners, last_end_per_rank
from streams.engine.codes import key_sums
from streams.engine.ideal import Evidence, Peers, peer_stage
from streams.engine.stepgraph import TRANSFER_KINDS, Floats, Ints, StepGraph
from streams.engine.systematic import NONE, Slow

MAX_ALL = 64  # stages, links, replicas: all of them up to this many, else the ones most above their ideal
MAX_RANKS = 8
MAX_OPS = 4
CHUNK = 64  # rows per evaluation without the native core: bounds the memory of a very large job's decomposition

Mask = npt.NDArray[np.bool_]
_NONE = np.zeros(0, np.int64)


@dataclass(frozen=True)
class Structural:
    """A step's ideal and its decomposition: per candidate element, the step time with it alone healed and
    with it alone left unhealed (modelled seconds, like ``actual_s``)."""

    actual_s: float
    ideal_s: float
    elements: tuple[str, ...]
    healed_s: Floats
    unhealed_s: Floats
    contains: dict[str, tuple[str, ...]]  # element -> more specific candidates inside it
    decomposed: bool = True  # False: only the ideal was evaluated (the step was not slow enough to ask why)

    @property
    def slowdown(self) -> float:
        """The step's blocking slowdown T(actual) / T(ideal)."""
        return self.actual_s / self.ideal_s if self.ideal_s > 0 else 1.0

    def gains(self) -> dict[str, float]:
        """Seconds healing each element alone would save (≥ 0)."""
        return {e: max(0.0, self.actual_s - h) for e, h in zip(self.elements, self.healed_s.tolist(), strict=True)}

    def extra(self) -> dict[str, float]:
        """Seconds each element alone, left unhealed, adds to the ideal step (≥ 0)."""
        return {e: max(0.0, u - self.ideal_s) for e, u in zip(self.elements, self.unhealed_s.tolist(), strict=True)}


@dataclass
class Candidates:
    """A step's candidate elements (in the order they are evaluated) with their nodes, and what each
    contains."""

    nodes: dict[str, Ints]  # per element its nodes' indices (a mask per element: a byte per node each)
    contains: dict[str, tuple[str, ...]]
    own: Mask  # the nodes that are not transfers over a candidate link

    def add(self, element: str, mask: Mask, contains: tuple[str, ...] = ()) -> None:
        self.add_nodes(element, np.flatnonzero(mask), contains)

    def add_nodes(self, element: str, nodes: Ints, contains: tuple[str, ...] = ()) -> None:
        self.nodes[element] = nodes
        if contains:
            self.contains[element] = contains

    def sharing(self, other: Candidates | None) -> Candidates:
        """These candidates with each element's nodes (and the own nodes) equal to ``other``'s taken from
        ``other``: kept with a pending step (:meth:`Pending.sharing`), a structure's replicas and stages are
        held once, not once per step of an episode."""
        if other is None:
            return self

        def theirs(mine: npt.NDArray[Any], them: npt.NDArray[Any] | None) -> npt.NDArray[Any]:
            return them if them is not None and np.array_equal(mine, them) else mine

        nodes = {e: theirs(n, other.nodes.get(e)) for e, n in self.nodes.items()}
        return Candidates(nodes, self.contains, theirs(self.own, other.own))

    def mask(self, elements: tuple[str, ...]) -> Mask:
        """The nodes of any of ``elements`` (those that are candidates) as a mask."""
        out = np.zeros(len(self.own), np.bool_)
        for e in elements:
            if e in self.nodes:
                out[self.nodes[e]] = True
        return out


@dataclass(frozen=True)
class Rows:
    """What-if rows given as masks, never as a row of durations each: row ``k`` has the nodes of
    ``masks[k]`` (a mask, or the nodes' indices: a few of a large job's many nodes) at ``alt`` and every
    other node at ``base``."""

    base: Floats
    alt: Floats
    masks: list[Mask] | list[Ints]

    def step_ends(self, g: StepGraph, floor: Floats | None = None) -> Floats:
        """The step end of each row (``floor``: as for :meth:`StepGraph.evaluate`). The native core holds no
        row (a 1,024-rank job has ~170 rows of ~50k nodes); without it, ``CHUNK`` rows at a time."""
        floors = g.floor if floor is None else floor
        if dag.masked_available:
            nodes: list[Ints] = [np.flatnonzero(m) if m.dtype == np.bool_ else m.astype(np.int64, copy=False)
                                 for m in self.masks]  # fmt: skip
            return dag.masked_step_ends(g.schedule, g.indptr, g.indices, floors, self.base, self.alt, nodes)
        masks = [m if m.dtype == np.bool_ else np.isin(np.arange(len(self.base)), m) for m in self.masks]
        parts = [g.evaluate(np.stack([np.where(m, self.alt, self.base) for m in masks[i : i + CHUNK]]),
                            floor).max(axis=1) for i in range(0, len(masks), CHUNK)]  # fmt: skip
        return np.concatenate(parts) if parts else np.zeros(0)


@dataclass
class Plan:
    """What to evaluate for a step's decomposition: per element its nodes, healed only (at the ideal, the
    rest as observed) and left only unhealed (as observed, the rest at the ideal); the group cause's
    durations over every span, healed and left alone."""

    elements: list[str]
    masks: list[Ints]  # per element, its nodes (indices: a large job's masks would hold a byte per node each)
    contains: dict[str, tuple[str, ...]]
    spread: tuple[Floats, Floats] | None = None

    def result(self, actual_s: float, ideal_s: float, p: Pending, chained: Chained) -> Structural:
        """The decomposition, with the step's times as periods on its timelines (:mod:`carry`): the heal-only
        rows from the observed starts, the leave-only rows from the ideal's (evaluated apart from the actual
        and ideal rows, so that a step not slow enough to ask why costs two rows, not all)."""
        healed = Rows(p.d0, p.ideal, self.masks).step_ends(p.g)
        unhealed = Rows(p.ideal, p.d0, self.masks).step_ends(p.g, chained.floor)
        if self.spread is not None:
            spans = [p.g.span >= 0]
            healed = np.r_[healed, Rows(p.d0, self.spread[0], spans).step_ends(p.g)]
            unhealed = np.r_[unhealed, Rows(p.ideal, self.spread[1], spans).step_ends(p.g, chained.floor)]
        healed, unhealed = healed - chained.actual_before, unhealed - chained.ideal_before
        return Structural(actual_s, ideal_s, tuple(self.elements), healed, unhealed, self.contains)


@dataclass(frozen=True)
class Pending:
    """What decomposing a step takes, kept with its report until the job asks why the step was slow."""

    g: StepGraph
    job: str
    ops: list[str]
    d0: Floats  # intrinsic durations as observed
    ideal: Floats  # at the ideal from peers
    peers: Peers  # the structure's peer groups (:mod:`ideal`)
    owners: Owners  # whose clock each observed start is on (:mod:`carry`)
    slow: Slow = (NONE, NONE)  # the job's systematically slow ranks and links, left out of every peer group
    evidence: Evidence | None = None  # the step's evidence of systematic slowness (None: found when asked)
    _found: list[Candidates] = field(default_factory=list, init=False, compare=False, repr=False)  # (found())

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_found": []}  # (found again when asked: not in a snapshot)

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({**state, "_found": []})  # (a snapshot made before the cache: without it)

    def found(self) -> Candidates:
        """The step's candidates (:func:`candidates`), found once: its decomposition and, at its episode's
        finding, the parts healed together read the same."""
        if not self._found:
            self._found.append(candidates(self.g, self.job, self.ops, self.d0, self.ideal))
        return self._found[0]

    def deviations(self) -> Evidence:
        """The step's evidence that a rank or link is systematically slow (:meth:`Peers.deviations`)."""
        return self.peers.deviations(self.d0) if self.evidence is None else self.evidence

    def without(self, slow: Slow) -> Pending:
        """This step with its ideal from peers other than the ranks and links ``slow`` (:mod:`systematic`)."""
        if all(len(a) == 0 == len(b) or np.array_equal(a, b) for a, b in zip(slow, self.slow, strict=True)):
            return self  # (none slow, the usual step: told without numpy's comparison)
        return replace(self, ideal=self.peers.ideal.typical(self.d0, slow), slow=slow)

    def run(self, actual_s: float, ideal_s: float, chained: Chained | None = None) -> Structural:
        """The decomposition; ``actual_s``, ``ideal_s``: the step's times on its timelines (``chained``;
        default: a fresh step)."""
        found = plan(self.found(), self.job, self.d0, self.ideal, self.peers.replica.typical(self.d0, self.slow))
        return found.result(actual_s, ideal_s, self, chained or Chained(None))

    def sharing(self, other: Pending | None) -> Pending:
        """This pending decomposition with every graph array equal to ``other``'s taken from ``other``: a job
        keeps those of an episode's steps until its finding (:mod:`structural`), and its snapshot then holds
        one structure's arrays once, not once per step (the same content: the same results)."""
        if other is None:
            return self

        def same(mine: Any, theirs: Any) -> bool:
            return isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray) and np.array_equal(mine, theirs)

        names = [f.name for f in fields(self.g)]
        shared = {n: getattr(other.g, n) for n in names if same(getattr(self.g, n), getattr(other.g, n))}
        g = replace(self.g, **shared)
        d0 = g.intrinsic if self.d0 is self.g.intrinsic else self.d0
        out = replace(self, g=g, d0=d0, ideal=other.ideal if same(self.ideal, other.ideal) else self.ideal)
        if self._found:  # (the same content: its candidates are these)
            out._found.append(self._found[0].sharing(other._found[0] if other._found else None))
        return out

    def ideal_ends(self, floor: Floats | None = None) -> tuple[float, Floats]:
        """The ideal step from other starts (:mod:`carry`; None: the observed ones): its end and each rank's
        last end."""
        ends = self.g.evaluate(self.ideal[None, :], floor)[0]
        return float(ends.max()), last_end_per_rank(self.g, ends)

    def healed_together(self, groups: list[tuple[str, tuple[str, ...]]],
                        before: float = 0.0) -> list[tuple[float, float]]:  # fmt: skip
        """Per (container, parts): the step time with all the parts healed at once and everything else as
        observed (one row each; less ``before``, where the step before ended: :class:`carry.Chained`), and the
        parts' share of the container's ideal work other than transfers over the candidate links (a link's
        share is its stage's, not a rank's or a replica's; elements that are not candidates of this step are
        left out; the group cause's nodes are every span)."""
        if not groups:
            return []
        found = self.found()
        healed = [found.mask(parts) for _, parts in groups]
        shares = []
        for (container, _), mask in zip(groups, healed, strict=True):
            whole = self.g.span >= 0 if elements.is_kind(container, "spread") else found.mask((container,))
            whole &= found.own
            work = float(self.ideal[whole].sum())
            shares.append(float(self.ideal[whole & mask].sum()) / work if work > 0 else 1.0)
        times = Rows(self.d0, self.ideal, healed).step_ends(self.g) - before
        return list(zip(times.tolist(), shares, strict=True))


def candidates(g: StepGraph, job: str, ops: list[str], d0: Floats, ideal: Floats) -> Candidates:
    """The elements of one step that may cause its slowdown, each with its nodes (the group cause apart)."""
    spans = g.span >= 0
    excess = np.maximum(0.0, d0 - ideal)
    p2p = np.isin(g.kind, TRANSFER_KINDS)
    peer_pp = peer_stage(g, p2p)
    link = np.where(p2p & (peer_pp >= 0) & (peer_pp != g.pp), np.minimum(g.pp, peer_pp), -1)
    links = _most(link[p2p & (link >= 0)], excess[p2p & (link >= 0)], MAX_ALL)
    own = ~np.isin(link, links)  # a rank's nodes: all but its transfers over the candidate links
    out = Candidates({}, {}, own)
    ranks = _most(g.rank[spans & own], excess[spans & own], MAX_RANKS)
    first_node = {r: int(np.argmax(spans & (g.rank == r))) for r in ranks}
    for r in ranks:
        out.add(elements.rank(job, r), (g.rank == r) & own)
    for column, build in ((g.dp, elements.dp), (g.pp, elements.stage)):
        stage = build is elements.stage  # a stage's spans hold the transfers over its links
        nodes = _by_key(column, spans if stage else spans & own)  # (one sort, not a mask per replica)
        for i in _most(column[spans], excess[spans], MAX_ALL):
            inside = tuple(elements.rank(job, r) for r in ranks if column[first_node[r]] == i)
            if stage:
                inside += tuple(elements.stage_link(job, lk) for lk in links if lk in (i - 1, i))
            out.add_nodes(build(job, i), nodes.get(i, _NONE), inside)
    for lk in links:
        out.add(elements.stage_link(job, lk), link == lk)
    for o in _most(g.op[spans], excess[spans], MAX_OPS, positive=True):
        out.add(elements.of_job("op", job, ops[o]), spans & (g.op == o))
    return out


def plan(found: Candidates, job: str, d0: Floats, ideal: Floats, typical_replica: Floats) -> Plan:
    """The candidates of one step (:func:`candidates`) and their two rows each (heal only; leave only
    unhealed)."""
    out = Plan(list(found.nodes), list(found.nodes.values()), dict(found.contains))
    replicas = [e for e in out.elements if elements.is_kind(e, "dp")]
    if len(replicas) > 1:  # within a stage, peers differ by replica: a replica or a stage may locate the spread
        out.elements.append(elements.spread(job, "dp"))
        located = tuple(e for e in out.elements if elements.kind_of(e) in ("dp", "stage"))
        out.contains[elements.spread(job, "dp")] = located
        out.spread = (typical_replica, np.maximum(0.0, ideal + d0 - typical_replica))
    return out


def _by_key(column: Ints, where: Mask) -> dict[int, Ints]:
    """Per value of ``column`` at the nodes ``where``: those nodes' indices, ascending (a stable sort keeps
    them in node order: ``np.flatnonzero(where & (column == value))`` for every value at once)."""
    at = np.flatnonzero(where)
    if not len(at):
        return {}
    order = np.argsort(column[at], kind="stable")
    at, keys = at[order], column[at][order]
    edges = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1], True]).tolist()
    return {int(keys[s]): at[s:e] for s, e in pairwise(edges)}


def _most(keys: Ints, weights: Floats, cap: int, positive: bool = False) -> list[int]:
    """The distinct keys, all of them up to ``cap``, else the ``cap`` with the most weight (ties: lower key
    first); ``positive``: only keys with some weight."""
    present, total = key_sums(keys, weights)
    if positive:
        present, total = present[total > 0], total[total > 0]
    if len(present) > cap:
        present = np.sort(present[np.lexsort((present, -total))[:cap]])
    return [int(k) for k in present]
