"""A step's candidates (streams/engine/decompose.py): each replica's and stage's nodes, found by one sort of
the column, are the nodes a mask per value gives (in node order), on a simulated step and on random columns
with values absent from the selection."""

from __future__ import annotations

import numpy as np

from streams.engine.decompose import _by_key, candidates
from streams.engine.stepgraph import Codebook, build
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns


def test_nodes_by_key_are_the_masks_of_each_value() -> None:
    rng = np.random.default_rng(3)
    for n, values in ((1, 1), (200, 3), (5000, 70)):
        column = rng.integers(-1, values, n).astype(np.int32)
        where = rng.random(n) < 0.7
        found = _by_key(column, where)
        assert sorted(found) == sorted(set(column[where].tolist()))
        for value, nodes in found.items():
            assert nodes.dtype == np.int64
            assert np.array_equal(nodes, np.flatnonzero(where & (column == value)))
    assert _by_key(np.zeros(4, np.int32), np.zeros(4, bool)) == {}


def test_replicas_and_stages_hold_their_spans() -> None:
    g = build(op_columns(SCENARIOS["training-fabric"](2, 32, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(7)
    d0 = g.intrinsic * rng.uniform(0.8, 1.5, g.nodes)
    found = candidates(g, "j", [f"op{i}" for i in range(int(g.op.max()) + 1)], d0, g.intrinsic)
    spans = g.span >= 0
    replicas = [e for e in found.nodes if e.startswith("dp:")]
    stages = [e for e in found.nodes if e.startswith("stage:")]
    assert len(replicas) > 1 and len(stages) > 1
    for e in replicas:
        i = int(e.rsplit("/", 1)[1])
        assert np.array_equal(found.nodes[e], np.flatnonzero(spans & (g.dp == i) & found.own))
    for e in stages:
        i = int(e.rsplit("/", 1)[1])
        assert np.array_equal(found.nodes[e], np.flatnonzero(spans & (g.pp == i)))
