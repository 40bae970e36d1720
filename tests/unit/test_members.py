"""What the what-if and the decomposition keep per structure (streams/engine/members.py) and share per step:
each element's nodes equal the column comparison's, each rank's last end the ``np.maximum.at`` definition's,
and the ideal with its evidence found at once equals each found alone, bit for bit."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from streams.engine.carry import last_end_per_rank
from streams.engine.ideal import Peers
from streams.engine.members import LastEnds, Members, StepElements
from streams.engine.stepgraph import Codebook, build
from streams.engine.whatif import Roles
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]


def test_members_are_the_positions_of_each_value_in_order() -> None:
    column = np.random.default_rng(3).integers(-2, 9, 500)
    members = Members(column)
    for value in range(-3, 11):
        assert np.array_equal(members(value), np.flatnonzero(column == value))
    assert len(Members(np.zeros(0, np.int64))(0)) == 0


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_step_elements_hold_each_elements_nodes(name: str, ranks: int) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    of = StepElements.of(g)
    for column, members in ((g.rank, of.rank), (g.dp, of.dp), (g.pp, of.pp), (g.op, of.op), (of.link, of.links)):
        for value in np.unique(column).tolist():
            assert np.array_equal(members(value), np.flatnonzero(column == value))
    assert (of.link >= 0).any() or name != "training-slow-link"


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_last_ends_equal_last_end_per_rank(name: str, ranks: int) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    last = LastEnds(g)
    ends = g.evaluate(g.intrinsic[None, :])[0]
    odd = ends.copy()
    odd[np.random.default_rng(1).integers(0, g.nodes, 3)] = np.nan  # a NaN ends its rank at NaN
    for row in (ends, odd, np.zeros(g.nodes)):
        with np.errstate(invalid="ignore"):  # (the definition's maximum.at warns of the NaN)
            assert np.array_equal(last(row), last_end_per_rank(g, row), equal_nan=True)


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_the_ideal_and_its_evidence_at_once_equal_each_alone(name: str, ranks: int) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    peers = Peers.of(g)
    ideal, evidence = peers.at_ideal(g.intrinsic)
    assert np.array_equal(ideal, peers.ideal.typical(g.intrinsic))
    alone = peers.deviations(g.intrinsic)
    assert all(np.array_equal(a, b) for mine, theirs in zip(evidence, alone, strict=True)
               for a, b in zip(mine, theirs, strict=True))  # fmt: skip


def test_a_snapshot_keeps_no_elements_and_a_restored_structure_finds_the_same() -> None:
    g = build(op_columns(SCENARIOS["training-slow-link"](2, 32, 12), 10), Codebook(), Codebook(), {})
    roles = Roles.of(g)
    found = roles.elements(g)
    restored = pickle.loads(pickle.dumps(roles))
    assert restored.members is None and roles.members is found  # (the cache: not in the snapshot)
    again = restored.elements(g)
    assert again.stages == found.stages and again.links == found.links and again.where == found.where
    for r in range(32):
        assert np.array_equal(again.step.rank(r), found.step.rank(r))
