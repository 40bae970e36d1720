"""The what-if's passes that share work give each part's own result, bit for bit: the ideal and the evidence
of systematic slowness from each peer group's middle found once (:meth:`ideal.Peers.at_ideal`)."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine.ideal import Peers
from streams.engine.stepgraph import Codebook, build
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_the_ideal_and_its_evidence_at_once_equal_each_alone(name: str, ranks: int) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    peers = Peers.of(g)
    ideal, evidence = peers.at_ideal(g.intrinsic)
    assert np.array_equal(ideal, peers.ideal.typical(g.intrinsic), equal_nan=True)
    alone = peers.deviations(g.intrinsic)
    assert all(np.array_equal(a, b) for mine, theirs in zip(evidence, alone, strict=True)
               for a, b in zip(mine, theirs, strict=True))  # fmt: skip
