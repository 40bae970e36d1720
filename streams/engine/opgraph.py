"""The rolling operator graph of a job (networkx): structure and the controllers that act on it.

Nodes are element ids (``rank:<job>/<r>``, ``dp:<job>/<d>``, ``stage:<job>/<s>``, ``link:<job>/stage<s>-
stage<s+1>``, ``comm:<job>/<group>``, ``device:...``, ``node:...``, ``switch:...``, ``controller:<name>``);
edge kinds: ``placed_on`` (rank → device → node), ``connected_to`` (node → switch), ``member_of`` (rank →
communicator, replica, stage), ``pipeline`` (stage → link → next stage) and ``acts_on`` (controller →
target, from decisions). Per-rank numbers live in arrays elsewhere; this is structure only.

Bounded: a job has as many nodes as its placement, and only the controllers of its last
``MAX_DECISIONS`` decisions stay attached. A snapshot is taken only when the structure changed (content
digest), for the audit trail's ``graph_snapshots``.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

MAX_DECISIONS = 64


@dataclass(frozen=True)
class GraphSnapshot:
    job: str
    valid_from: float
    digest: str
    nodes: tuple[str, ...]
    edges: tuple[tuple[str, str, str], ...]

    @property
    def id(self) -> str:
        return hashlib.sha256(f"graph|{self.job}|{self.digest}|{self.valid_from!r}".encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job": self.job,
            "valid_from": self.valid_from,
            "digest": self.digest,
            "nodes": [{"id": n, "kind": n.partition(":")[0]} for n in self.nodes],
            "edges": [{"src": s, "dst": d, "kind": k} for s, d, k in self.edges],
        }


@dataclass
class OperatorGraph:
    job: str
    graph: nx.DiGraph = field(default_factory=nx.DiGraph)
    _decisions: deque[tuple[str, tuple[str, ...]]] = field(default_factory=deque)
    _digest: str = ""
    _changed: bool = False

    def link(self, src: str, dst: str, kind: str) -> None:
        if not self.graph.has_edge(src, dst):
            self.graph.add_edge(src, dst, kind=kind)
            self._changed = True

    def add_relations(self, relations: Iterable[tuple[str, str, str]]) -> None:
        """Topology samples: (relation, src, dst)."""
        for relation, src, dst in relations:
            self.link(src, dst, relation)

    def add_ranks(self, positions: dict[int, tuple[int, int, int]]) -> None:
        """Ranks seen in op spans with their (dp, pp, tp): replica and stage membership, pipeline links."""
        job = self.job
        stages = sorted({pp for _, pp, _ in positions.values()})
        for rank, (dp, pp, _) in positions.items():
            self.link(f"rank:{job}/{rank}", f"dp:{job}/{dp}", "member_of")
            self.link(f"rank:{job}/{rank}", f"stage:{job}/{pp}", "member_of")
        for s in stages[:-1]:
            link = f"link:{job}/stage{s}-stage{s + 1}"
            self.link(f"stage:{job}/{s}", link, "pipeline")
            self.link(link, f"stage:{job}/{s + 1}", "pipeline")

    def add_decision(self, decision_id: str, controller: str, targets: Iterable[str]) -> None:
        node = f"controller:{controller}"
        targets = tuple(targets)
        for target in targets:
            self.link(node, target, "acts_on")
        self._decisions.append((node, targets))
        while len(self._decisions) > MAX_DECISIONS:
            old, old_targets = self._decisions.popleft()
            still = {t for n, ts in self._decisions if n == old for t in ts}
            for target in old_targets:
                if target not in still and self.graph.has_edge(old, target):
                    self.graph.remove_edge(old, target)
                    self._changed = True
            if self.graph.has_node(old) and self.graph.degree(old) == 0:
                self.graph.remove_node(old)

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

    def snapshot(self, valid_from: float) -> GraphSnapshot | None:
        """A snapshot if the graph changed since the last one, else None."""
        if not self._changed:
            return None
        self._changed = False
        nodes = tuple(sorted(self.graph.nodes))
        edges = tuple(sorted((s, d, k) for s, d, k in self.graph.edges(data="kind")))
        digest = hashlib.sha256(repr((nodes, edges)).encode()).hexdigest()[:32]
        if digest == self._digest:
            return None
        self._digest = digest
        return GraphSnapshot(self.job, valid_from, digest, nodes, edges)
