"""The rolling operator graph of a job (networkx): structure and the controllers that act on it.

Nodes are element ids (``rank:<job>/<r>``, ``dp:<job>/<d>``, ``stage:<job>/<s>``, ``link:<job>/stage<s>-
stage<s+1>``, ``comm:<job>/<group>``, ``device:...``, ``node:...``, ``switch:...``, ``controller:<name>``);
edge kinds: ``placed_on`` (rank → device → node), ``connected_to`` (node → switch), ``member_of`` (rank →
communicator, replica, stage), ``pipeline`` (stage → link → next stage) and ``acts_on`` (controller →
target, from decisions). Per-rank numbers live in arrays elsewhere; this is structure only.

Bounded: a job has as many nodes as its placement, and only the controllers of its last
``MAX_DECISIONS`` decisions stay attached. A snapshot is taken only when the structure changed (content
digest): the nodes and edges added and removed since the previous one, for the audit trail's
``graph_snapshots``. What changed is told by the nodes and edges touched since then (:class:`_Touched`), not
by comparing the whole graph with the previous one: a decision's snapshot at 16k ranks (~100k edges, one of
them new) read every edge of the graph into a set.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from streams.engine import elements

MAX_DECISIONS = 64
MAX_ITEMS = 2000  # added nodes and edges per snapshot record
TOUCHED = 4096  # nodes and edges touched since the last snapshot told one by one (more: the whole graph compared)


@dataclass(frozen=True)
class GraphSnapshot:
    """One part of a change of a job's graph: what was added and removed since the previous change.
    ``digest`` identifies the whole graph after the change; a large change is split into ``parts``
    records of at most ``MAX_ITEMS`` added nodes and edges each (Kafka records stay small at 16k ranks).
    The graph at time T is every change up to T replayed in order (``sql/queries/graph_at.sql``)."""

    job: str
    valid_from: float
    digest: str
    part: int
    parts: int
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str, str], ...]
    removed_nodes: tuple[str, ...] = ()
    removed_edges: tuple[tuple[str, str, str], ...] = ()

    @property
    def id(self) -> str:
        key = f"graph|{self.job}|{self.digest}|{self.valid_from!r}|{self.part}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "job": self.job, "valid_from": self.valid_from, "digest": self.digest,
            "part": self.part, "parts": self.parts,
            "nodes": [{"id": n, "kind": elements.kind_of(n)} for n in self.nodes],
            "edges": [{"src": s, "dst": d, "kind": k} for s, d, k in self.edges],
            "removed_nodes": list(self.removed_nodes),
            "removed_edges": [{"src": s, "dst": d, "kind": k} for s, d, k in self.removed_edges],
        }  # fmt: skip


@dataclass
class _Touched:
    """The nodes and edges (with their kind) added or removed since the last snapshot; those the graph has now
    and had then are the change (an edge's kind is never changed in place: it is removed, then added)."""

    nodes: set[str] = field(default_factory=set)
    edges: set[tuple[str, str, str]] = field(default_factory=set)

    def changes(
        self, graph: nx.DiGraph, nodes: set[str], edges: set[tuple[str, str, str]]
    ) -> tuple[tuple[list[str], list[tuple[str, str, str]]], tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]]:
        """(nodes added, edges added), (nodes gone, edges gone), each sorted, since the snapshot of ``nodes``
        and ``edges``."""
        touched = self.nodes | {n for s, d, _ in self.edges for n in (s, d)}
        now = {n for n in touched if graph.has_node(n)}
        adj = graph.adj
        now_e = {e for e in self.edges if e[1] in adj.get(e[0], ()) and adj[e[0]][e[1]].get("kind") == e[2]}
        added = sorted(now - nodes), sorted(now_e - edges)
        gone = tuple(sorted((touched - now) & nodes)), tuple(sorted((self.edges - now_e) & edges))
        return added, gone


@dataclass
class OperatorGraph:
    job: str
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    _decisions: deque[tuple[str, tuple[str, ...]]] = field(default_factory=deque)
    _digest: str = ""
    _changed: bool = False
    _nodes: set[str] = field(default_factory=set)  # as of the last snapshot
    _edges: set[tuple[str, str, str]] = field(default_factory=set)
    _sorted: tuple[list[str], list[tuple[str, str, str]]] = field(default_factory=lambda: ([], []))  # the same
    # since the last snapshot (not in a snapshot of the state: None, the whole graph compared, once restored)
    _touched: _Touched | None = field(default_factory=_Touched, compare=False, repr=False)

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_touched": None}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update({**state, "_touched": None})

    def _touch(self, edges: list[tuple[str, str, str]] | None, node: str | None = None) -> None:
        """Note ``edges`` (None: more than ``TOUCHED``) and ``node`` as touched since the last snapshot; past
        ``TOUCHED`` of them, none (the next snapshot compares the whole graph: about as fast, without them)."""
        t = self._touched
        if t is None:
            return
        if edges is None or len(t.edges) + len(t.nodes) + len(edges) > TOUCHED:
            self._touched = None
            return
        t.edges.update(edges)
        if node is not None:
            t.nodes.add(node)

    def link(self, src: str, dst: str, kind: str) -> None:
        if not self.graph.has_edge(src, dst):
            self.graph.add_edge(src, dst, kind=kind)
            self._changed = True
            self._touch([(src, dst, kind)])

    def add_relations(self, relations: Iterable[tuple[str, str, str]]) -> None:
        """Topology samples: (relation, src, dst): :meth:`link` of each, in one call to networkx (a job of
        16k ranks reports ~100k relations at once)."""
        has, new = self.graph.has_edge, {}
        for relation, src, dst in relations:
            if (src, dst) not in new and not has(src, dst):
                new[src, dst] = relation  # (the first of a pair's relations, as link keeps it)
        if new:
            self.graph.add_edges_from((s, d, {"kind": k}) for (s, d), k in new.items())
            self._changed = True
            self._touch([(s, d, k) for (s, d), k in new.items()] if len(new) <= TOUCHED else None)

    def add_ranks(self, positions: dict[int, tuple[int, int, int]]) -> None:
        """Ranks seen in op spans with their (dp, pp, tp): replica and stage membership, pipeline links."""
        job = self.job
        stages = sorted({pp for _, pp, _ in positions.values()})
        for rank, (dp, pp, _) in positions.items():
            self.link(elements.rank(job, rank), elements.dp(job, dp), "member_of")
            self.link(elements.rank(job, rank), elements.stage(job, pp), "member_of")
        for s in stages[:-1]:
            link = elements.stage_link(job, s)
            self.link(elements.stage(job, s), link, "pipeline")
            self.link(link, elements.stage(job, s + 1), "pipeline")

    def add_decision(self, decision_id: str, controller: str, targets: Iterable[str]) -> None:
        node = elements.controller(controller)
        targets = tuple(targets)
        for target in targets:
            self.link(node, target, "acts_on")
        self._decisions.append((node, targets))
        while len(self._decisions) > MAX_DECISIONS:
            old, old_targets = self._decisions.popleft()
            still = {t for n, ts in self._decisions if n == old for t in ts}
            for target in old_targets:
                if target not in still and self.graph.has_edge(old, target):
                    self._touch([(old, target, self.graph.edges[old, target]["kind"])])
                    self.graph.remove_edge(old, target)
                    self._changed = True
            if self.graph.has_node(old) and self.graph.degree(old) == 0:
                self.graph.remove_node(old)
                self._touch([], old)

    def hosts(self, target: str, element: str) -> bool:
        """Whether ``target`` (e.g. a node a decision acted on) is, or is under, ``element``'s placement:
        ``element`` reaches it by placed_on / member_of edges, or contains a rank that does."""
        if target == element:
            return True
        g = self.graph
        if not g.has_node(target) or not g.has_node(element):
            return False
        members = [element] + [r for r, _, k in g.in_edges(element, data="kind") if k == "member_of"]
        for start in members:
            frontier = [start]
            seen = {start}
            while frontier:
                here = frontier.pop()
                for _, nxt, kind in g.out_edges(here, data="kind"):
                    if kind == "placed_on" and nxt not in seen:
                        if nxt == target:
                            return True
                        seen.add(nxt)
                        frontier.append(nxt)
        return False

    def snapshot(self, valid_from: float) -> list[GraphSnapshot]:
        """The change since the last snapshot, in parts ([] when nothing changed)."""
        if not self._changed:
            return []
        self._changed = False
        touched, self._touched = self._touched, _Touched()
        if touched is None:
            nodes = set(self.graph.nodes)
            edges = {(s, d, k) for s, d, k in self.graph.edges(data="kind")}
            added_n, added_e = sorted(nodes - self._nodes), sorted(edges - self._edges)
            gone_n, gone_e = tuple(sorted(self._nodes - nodes)), tuple(sorted(self._edges - edges))
        else:
            (added_n, added_e), (gone_n, gone_e) = touched.changes(self.graph, self._nodes, self._edges)
        every = _merged(self._sorted[0], added_n, gone_n), _merged(self._sorted[1], added_e, gone_e)
        digest = hashlib.sha256(repr(every).encode()).hexdigest()[:32]
        if digest == self._digest:
            return []
        if touched is None:
            self._nodes, self._edges = nodes, edges
        else:
            self._nodes.difference_update(gone_n)
            self._nodes.update(added_n)
            self._edges.difference_update(gone_e)
            self._edges.update(added_e)
        self._digest, self._sorted = digest, every
        items: list[tuple[str, Any]] = [("n", n) for n in added_n] + [("e", e) for e in added_e]
        chunks = [items[i : i + MAX_ITEMS] for i in range(0, len(items), MAX_ITEMS)] or [[]]
        return [
            GraphSnapshot(
                self.job,
                valid_from,
                digest,
                i,
                len(chunks),
                tuple(x for t, x in chunk if t == "n"),
                tuple(x for t, x in chunk if t == "e"),
                gone_n if i == 0 else (),
                gone_e if i == 0 else (),
            )
            for i, chunk in enumerate(chunks)
        ]


FEW = 64  # added items inserted one by one into the sorted whole (more: one sort of the two runs)


def _merged(before: list[Any], added: list[Any], gone: tuple[Any, ...]) -> list[Any]:
    """``before`` (sorted) without ``gone`` and with ``added`` (sorted), sorted: two runs merged, not a sort
    of the whole graph at every change (a few added: each inserted at its place, without comparing the rest)."""
    if gone:
        left = set(gone)
        before = [x for x in before if x not in left]
    if not added:
        return before
    if len(added) > FEW:
        return sorted(before + added)
    out = list(before)
    for x in added:
        bisect.insort(out, x)
    return out
