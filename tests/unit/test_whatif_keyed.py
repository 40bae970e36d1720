"""The what-if's candidates healed in one native call that finds their nodes in key columns
(``dag.keyed_step_ends``, ``native/src/whatif.rs``) give the definition's step ends bit for bit: each row the
mask ``key == value`` at its alternative durations (:class:`decompose.Rows`), on simulated steps, with int32
and int64 columns, values no node holds, candidates sharing a value, every node, NaN and infinite durations,
and a whole what-if with and without the native path."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine import dag, whatif
from streams.engine.decompose import Rows
from streams.engine.stepgraph import Codebook, Floats, Ints, StepGraph, build
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

pytestmark = pytest.mark.skipif(not dag.keyed_available, reason="native core without dag_keyed_step_ends")

ONE_RANK = 1  # a step of 16 ranks' spans with those of rank 0 only: every group alone
CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]
CASES += [("training-fabric", ONE_RANK)]


def _step(name: str, ranks: int, seed: int = 3) -> StepGraph:
    columns = op_columns(SCENARIOS[name](seed, max(ranks, 16), 12), 10)
    if ranks == ONE_RANK:
        columns = {k: v[columns["rank"] == 0] for k, v in columns.items()}
    return build(columns, Codebook(), Codebook(), {})


def _definition(g: StepGraph, alts: list[Floats], keys: list[Ints], rows: list[tuple[int, int, int]]) -> Floats:
    """Each row's mask ``key == value`` (every node for key -1) at its alternative, evaluated alone."""
    masks = [np.ones(g.nodes, bool) if k < 0 else keys[k] == v for _, k, v in rows]
    return np.array([Rows(g.intrinsic, alts[a], [m]).step_ends(g)[0] for (a, _, _), m in zip(rows, masks, strict=True)])


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_keyed_step_ends_equal_the_masks_rows(name: str, ranks: int) -> None:
    g = _step(name, ranks)
    rng = np.random.default_rng(11)
    alts = [g.intrinsic * rng.uniform(0.3, 1.5, g.nodes) for _ in range(3)]
    alts[1][rng.integers(0, g.nodes, 3)] = np.nan
    alts[2][rng.integers(0, g.nodes, 2)] = np.inf
    alts.append(np.where(rng.random(g.nodes) < 0.1, -0.01, alts[0]))  # (below 0: no maximum over the sinks)
    wide = rng.choice([-(10**12), 0, 7, 10**12], g.nodes).astype(np.int64)  # (a range wider than the column)
    keys = [g.rank.astype(np.int32), g.dp.astype(np.int64), g.pp, wide, np.where(g.rank % 2 == 0, -1, g.op)]
    rows = [(int(rng.integers(0, 4)), k, int(v)) for k in range(len(keys)) for v in np.unique(keys[k])]
    rows += [(0, 0, 0), (1, 0, 0), (2, -1, 0), (0, 0, ranks + 5), (3, 3, 10**12), (0, 4, -1), (1, 2, -3)]
    rng.shuffle(rows)
    a, k, v = ([row[i] for row in rows] for i in range(3))
    got = dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, alts, keys, a, k, v)
    assert np.array_equal(got, _definition(g, alts, keys, rows), equal_nan=True)
    none = dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, alts, keys, [], [], [])
    assert none.shape == (0,)


def test_bad_candidates_are_refused() -> None:
    g = _step("training-fabric", 4)
    d, key = g.intrinsic, g.rank

    def call(alts: list[Floats], keys: list[Ints], a: list[int], k: list[int], v: list[int]) -> None:
        dag.keyed_step_ends(g.schedule, g.indptr, g.indices, g.floor, d, alts, keys, a, k, v)

    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [1], [0], [0])
    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [0], [1], [0])
    with pytest.raises(ValueError, match="in range"):
        call([d], [key], [0, 0], [0], [0])
    with pytest.raises(ValueError, match="one value per node"):
        call([d[1:]], [key], [0], [0], [0])
    with pytest.raises(ValueError, match="one value per node"):
        call([d], [key[1:]], [0], [0], [0])


@pytest.mark.parametrize(("name", "ranks"), [*CASES, ("training-slow-link", 128)])
def test_a_what_ifs_candidates_with_and_without_the_native_call(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stages and links whose peers cannot heal some of their nodes, ops at a baseline, every node at it."""
    g = _step(name, ranks, seed=4)
    roles = whatif.Roles.of(g)
    rng = np.random.default_rng(2)
    baseline = g.intrinsic * rng.uniform(0.5, 1.1, g.nodes)
    ops = [f"op{i}" for i in range(int(g.op.max()) + 1)]
    for base in (None, baseline):
        native = whatif.what_if(g, "j", ops, base, roles)
        with monkeypatch.context() as m:
            m.setattr(dag, "keyed_available", False)
            m.setattr(dag, "masked_available", False)  # (the definition's rows in full)
            definition = whatif.what_if(g, "j", ops, base, roles)
        assert native.candidates == definition.candidates
        assert np.array_equal(native.counterfactual_s, definition.counterfactual_s, equal_nan=True)
        assert native.baseline_s == definition.baseline_s
