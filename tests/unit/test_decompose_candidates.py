"""A step's candidates (streams/engine/decompose.py): each replica's and stage's nodes, found by one sort of
the column, are the nodes a mask per value gives (in node order), on a simulated step and on random columns
with values absent from the selection."""

from __future__ import annotations

import pickle
from dataclasses import replace

import numpy as np

from streams.engine.decompose import Pending, _by_key, candidates
from streams.engine.stepgraph import Codebook, build
from streams.engine.whatif import Roles, what_if
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


def test_candidates_kept_with_a_pending_step_are_those_found_again() -> None:
    """A pending step finds its candidates once (its decomposition, then its parts healed together at the
    finding); kept for an episode it shares a structure's arrays with the step before it, and a snapshot
    holds none: found again, the same rows (a kept candidate another step's, or lost in a copy, fails)."""
    scenario = SCENARIOS["training-fabric"](2, 32, 12)
    ops, groups, cache = Codebook(), Codebook(), {}

    def names() -> list[str]:
        return [f"op{i}" for i in range(len(ops.names))]

    kept: list[Pending] = []
    for step, scale in ((8, 1.3), (9, 1.6)):
        g = build(op_columns(scenario, step), ops, groups, cache)
        rng = np.random.default_rng(step)
        d0 = g.intrinsic * rng.uniform(0.9, scale, g.nodes)
        pending = replace(what_if(g, "j", names(), None, Roles.of(g)).pending, d0=d0)  # type: ignore[arg-type]
        pending.run(1.0, 1.0)
        kept.append(pending.sharing(kept[-1] if kept else None))
    assert all(p._found for p in kept)
    first, second = (p._found[0] for p in kept)
    assert first.nodes.keys() & second.nodes.keys()
    assert any(second.nodes[e] is first.nodes[e] for e in first.nodes.keys() & second.nodes.keys())
    groups_asked = [(e, tuple(parts)) for e, parts in second.contains.items()][:4]
    assert groups_asked
    for p in kept:
        fresh = candidates(p.g, p.job, p.ops, p.d0, p.ideal)
        assert list(p.found().nodes) == list(fresh.nodes)
        assert all(np.array_equal(p.found().nodes[e], fresh.nodes[e]) for e in fresh.nodes)
        restored = pickle.loads(pickle.dumps(p))
        assert not restored._found
        assert restored.healed_together(groups_asked) == p.healed_together(groups_asked)
        assert restored._found
