"""A job's operator graph (streams/engine/opgraph.py): relations added at once as one at a time, each
snapshot's digest that of the whole graph, sorted, as changes add and remove nodes and edges, and a snapshot
made from the nodes and edges touched since the last one the same as one comparing the whole graph."""

from __future__ import annotations

import hashlib
import pickle

import networkx as nx
import numpy as np
import pytest

from streams.engine import opgraph
from streams.engine.opgraph import MAX_DECISIONS, TOUCHED, OperatorGraph


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


def _changes(rng: np.random.Generator, g: OperatorGraph, i: int) -> None:
    """One random change: relations (pairs repeated), ranks, or a decision (old controllers leave)."""
    names = [f"rank:j/{r}" for r in range(12)] + [f"device:d{r}" for r in range(4)] + [f"comm:j/g{r}" for r in range(3)]
    what = rng.integers(4)
    if what == 0:
        kinds, n = ["placed_on", "member_of"], int(rng.choice([1, 3, 12]))  # (12: past TOUCHED)
        g.add_relations([(str(rng.choice(kinds)), str(rng.choice(names)), str(rng.choice(names))) for _ in range(n)])
    elif what == 1:
        g.add_ranks({int(r): (int(r) % 3, int(r) % 2, 0) for r in rng.integers(0, 16, 3)})
    else:
        g.add_decision(f"d{i}", f"ctl{rng.integers(80)}", [str(t) for t in rng.choice(names, 2)])


def test_a_snapshot_from_what_was_touched_equals_one_from_the_whole_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opgraph, "TOUCHED", 8)  # (more touched at once: the whole graph compared)
    rng = np.random.default_rng(5)
    touched, whole = OperatorGraph("j"), OperatorGraph("j")
    for i in range(3 * MAX_DECISIONS):
        state = rng.bit_generator.state
        _changes(rng, touched, i)
        rng.bit_generator.state = state
        _changes(rng, whole, i)
        whole._touched = None  # (as after a restore: compared with the whole graph)
        if rng.integers(10) == 0:
            touched = pickle.loads(pickle.dumps(touched))  # (restored between a change and its snapshot)
        for _ in range(int(rng.integers(1, 3))):  # (a second snapshot: nothing changed since)
            assert touched.snapshot(float(i)) == whole.snapshot(float(i))
        assert (touched._nodes, touched._edges, touched._sorted) == (whole._nodes, whole._edges, whole._sorted)
    assert set(touched.graph.edges(data="kind")) == touched._edges


def test_a_decisions_snapshot_reads_what_it_touched_not_every_edge(monkeypatch: pytest.MonkeyPatch) -> None:
    g = OperatorGraph("j")
    g.add_relations([("member_of", f"rank:j/{r}", f"dp:j/{r % 8}") for r in range(TOUCHED * 2)])
    assert g.snapshot(0.0)
    monkeypatch.setattr(nx.DiGraph, "edges", property(lambda _: pytest.fail("every edge read")))
    monkeypatch.setattr(nx.DiGraph, "nodes", property(lambda _: pytest.fail("every node read")))
    g.add_decision("d0", "ctl", ["rank:j/3"])
    (part,) = g.snapshot(1.0)
    assert part.nodes == ("controller:ctl",) and part.edges == (("controller:ctl", "rank:j/3", "acts_on"),)
