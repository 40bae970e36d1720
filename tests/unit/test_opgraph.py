"""A job's operator graph (streams/engine/opgraph.py): relations added at once as one at a time, and each
snapshot's digest that of the whole graph, sorted, as changes add and remove nodes and edges."""

from __future__ import annotations

import hashlib

import numpy as np

from streams.engine.opgraph import MAX_DECISIONS, OperatorGraph


def test_relations_added_at_once_are_each_linked_in_turn() -> None:
    rng = np.random.default_rng(2)
    names = [f"rank:j/{i}" for i in range(30)] + [f"device:d{i}" for i in range(10)]
    # pairs repeat with other relations: the first one is kept
    relations = [(str(rng.choice(["placed_on", "member_of"])), str(rng.choice(names)), str(rng.choice(names)))
                 for _ in range(300)]  # fmt: skip
    at_once, one_by_one = OperatorGraph("j"), OperatorGraph("j")
    at_once.link(names[0], names[1], "acts_on")
    one_by_one.link(names[0], names[1], "acts_on")
    at_once.add_relations(relations)
    for relation, src, dst in relations:
        one_by_one.link(src, dst, relation)
    assert list(at_once.graph.nodes) == list(one_by_one.graph.nodes)
    assert list(at_once.graph.edges(data="kind")) == list(one_by_one.graph.edges(data="kind"))
    assert at_once.snapshot(1.0) == one_by_one.snapshot(1.0)
    at_once.add_relations(relations[:5])  # (nothing new: no change to snapshot)
    assert at_once.snapshot(2.0) == []


def test_each_digest_is_the_whole_graphs_sorted() -> None:
    g = OperatorGraph("j")
    g.add_ranks({r: (r % 4, r // 4, 0) for r in range(16)})
    nodes: set[str] = set()
    edges: set[tuple[str, str, str]] = set()
    for i in range(MAX_DECISIONS + 20):  # (old controllers leave: nodes and edges removed)
        g.add_decision(f"d{i}", f"ctl{i % 70}", [f"rank:j/{i % 16}", f"dp:j/{i % 4}"])
        parts = g.snapshot(float(i))
        if not parts:
            continue
        for p in parts:
            nodes = (nodes | set(p.nodes)) - set(p.removed_nodes)
            edges = (edges | set(p.edges)) - set(p.removed_edges)
        assert nodes == set(g.graph.nodes) and edges == set(g.graph.edges(data="kind"))
        whole = repr((sorted(nodes), sorted(edges))).encode()
        assert {p.digest for p in parts} == {hashlib.sha256(whole).hexdigest()[:32]}
