"""A decomposition's rows given as masks (streams/engine/decompose.py ``Rows``): the native core's step ends,
which hold no row of durations, equal the maximum of each row evaluated in full, bit for bit, on simulated
steps (ideal and realistic), with other floors, more rows than one block, empty masks, NaN and infinite
durations."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine import dag
from streams.engine.decompose import Rows
from streams.engine.stepgraph import Codebook, build
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

pytestmark = pytest.mark.skipif(not dag.masked_available, reason="native core not built")

CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_masked_step_ends_equal_the_full_rows(name: str, ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(5)
    base, alt = g.intrinsic, g.intrinsic * rng.uniform(0.3, 1.5, g.nodes)
    masks = [rng.random(g.nodes) < p for p in rng.uniform(0.0, 0.5, 133)]  # 133 rows: over two blocks of 128
    masks += [np.zeros(g.nodes, bool), np.ones(g.nodes, bool), g.rank == 1]
    floor = np.where(np.isfinite(g.floor), g.floor - rng.uniform(0.0, 0.01, g.nodes), g.floor)
    odd = alt.copy()
    odd[rng.integers(0, g.nodes, 3)] = np.nan
    odd[rng.integers(0, g.nodes, 2)] = np.inf
    negative = alt.copy()  # (with no duration below 0 the native core keeps each row's maximum over the sinks)
    negative[rng.integers(0, g.nodes, 3)] = -0.05
    nan_floor = floor.copy()
    nan_floor[rng.choice(np.flatnonzero(np.isfinite(floor)), 2)] = np.nan
    cases = ((Rows(base, alt, masks), None), (Rows(alt, base, masks), floor), (Rows(base, odd, masks), None),
             (Rows(base, negative, masks), None), (Rows(negative, base, masks), floor),
             (Rows(base, alt, masks), nan_floor))  # fmt: skip
    for rows, floors in cases:
        native = rows.step_ends(g, floors)
        full = np.array([g.evaluate(np.where(m, rows.alt, rows.base)[None], floors)[0].max() for m in rows.masks])
        assert np.array_equal(native, full, equal_nan=True)
        alone = [Rows(rows.base, rows.alt, [m]).step_ends(g, floors)[0] for m in rows.masks[-5:]]  # (one row)
        assert np.array_equal(alone, full[-5:], equal_nan=True)
        with monkeypatch.context() as m:
            m.setattr(dag, "masked_available", False)  # the fallback: CHUNK rows at a time
            assert np.array_equal(rows.step_ends(g, floors), full, equal_nan=True)
        indexed = Rows(rows.base, rows.alt, [np.flatnonzero(m) for m in rows.masks])  # nodes as indices
        assert np.array_equal(indexed.step_ends(g, floors), full, equal_nan=True)
        with monkeypatch.context() as m:
            m.setattr(dag, "masked_available", False)
            assert np.array_equal(indexed.step_ends(g, floors), full, equal_nan=True)
    assert Rows(base, alt, []).step_ends(g).shape == (0,)


def test_bad_masks_are_refused() -> None:
    assert dag.native.core is not None
    z = np.zeros(1)
    none = np.zeros(0, np.int64)
    one = dag.native.core.dag_layout(np.array([0]), np.array([0, 0]), none)
    with pytest.raises(ValueError, match="out of range"):
        dag.native.core.dag_masked_step_ends(one, z, z, z, np.array([0, 1]), np.array([3]), np.zeros(1))
    with pytest.raises(ValueError, match="not increasing"):
        dag.native.core.dag_masked_step_ends(one, z, z, z, np.array([0, 2]), np.array([0]), np.zeros(1))
    with pytest.raises(ValueError, match="one value per row"):
        dag.native.core.dag_masked_step_ends(one, z, z, z, np.array([0, 0]), none, np.zeros(2))
    with pytest.raises(ValueError, match="one value per node"):
        dag.native.core.dag_masked_step_ends(one, z, np.zeros(2), z, np.array([0, 0]), none, np.zeros(1))


@pytest.mark.skipif(not dag.valued_available, reason="native core without dag_layout")
@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_valued_step_ends_equal_the_rows_of_each_alternative(name: str, ranks: int) -> None:
    """Rows healing to different durations in one call (the what-if's candidates) give each row's masked
    step end, bit for bit, with NaN and infinite values among them."""
    g = build(op_columns(SCENARIOS[name](3, ranks, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(7)
    alts = [g.intrinsic * rng.uniform(0.3, 1.5, g.nodes) for _ in range(5)]
    alts[2][rng.integers(0, g.nodes, 3)] = np.nan
    alts[3][rng.integers(0, g.nodes, 2)] = np.inf
    rows = [(alts[i % 5], rng.random(g.nodes) < p) for i, p in enumerate(rng.uniform(0.0, 0.5, 131))]
    rows += [(alts[0], np.zeros(g.nodes, bool)), (alts[1], np.ones(g.nodes, bool))]
    nodes = [np.flatnonzero(m) for _, m in rows]
    got = dag.valued_step_ends(
        g.schedule,
        g.indptr,
        g.indices,
        g.floor,
        g.intrinsic,
        nodes,
        [a[n] for (a, _), n in zip(rows, nodes, strict=True)],
    )
    each = np.array([Rows(g.intrinsic, a, [m]).step_ends(g)[0] for a, m in rows])
    assert np.array_equal(got, each, equal_nan=True)
    assert dag.valued_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, [], []).shape == (0,)
    twice = np.r_[nodes[5], nodes[5]]  # a node listed twice in a row: its later value
    again = dag.valued_step_ends(
        g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, [twice], [np.r_[alts[1][nodes[5]], alts[0][nodes[5]]]]
    )
    assert np.array_equal(again, [Rows(g.intrinsic, alts[0], [rows[5][1]]).step_ends(g)[0]], equal_nan=True)
    with pytest.raises(ValueError, match="one per masked node"):
        dag.valued_step_ends(g.schedule, g.indptr, g.indices, g.floor, g.intrinsic, [nodes[-1]], [np.zeros(0)])


def test_the_step_end_is_numpys_max_over_the_nodes_in_index_order() -> None:
    """Nodes evaluated in another order than their indices: the step end is still the first NaN, else the
    first of the largest ends in index order (-0.0 before 0.0 ends the step at -0.0, and 0.0 before -0.0 at
    0.0), though the native core keeps only a few nodes' ends at a time."""
    assert dag.native.core is not None
    layout = dag.native.core.dag_layout(np.array([2, 1, 0]), np.array([0, 0, 0, 0]), np.zeros(0, np.int64))
    floor, base = np.array([-0.0, 0.0, -1.0]), np.array([-0.0, 0.0, 0.5])
    for alt, want in (([0.0, -0.0, 0.5], 0.0), ([-0.0, 0.0, 0.5], -0.0), ([0.0, np.nan, np.nan], np.nan)):
        out = np.zeros(2)
        ptr_rows = np.array([0, 0, 3])  # row 0: every node at base; row 1: every node at alt
        dag.native.core.dag_masked_step_ends(layout, floor, base, np.array(alt), ptr_rows, np.array([0, 1, 2]), out)
        assert np.signbit(out[0]) and out[0] == 0.0  # base: -0.0 (node 0) before 0.0 (node 1)
        assert np.array_equal(out[1:], [want], equal_nan=True) and np.signbit(out[1]) == np.signbit(want)
        assert np.array_equal(out[1:], [(floor + np.array(alt)).max()], equal_nan=True)
        one = np.zeros(1)  # (a single row: evaluated in full, not a block at a time)
        dag.native.core.dag_masked_step_ends(layout, floor, base, np.array(alt), ptr_rows[1:], np.array([0, 1, 2]), one)
        assert np.array_equal(one, [want], equal_nan=True) and np.signbit(one[0]) == np.signbit(want)


def test_a_node_with_successors_ends_the_step_when_a_duration_is_negative() -> None:
    """Only with no duration below 0 does a sink (a node without successors) end each row: node 0 -> node 1,
    node 1 at -0.5 (at base, or at ``alt`` only), the step ends with node 0."""
    assert dag.native.core is not None
    layout = dag.native.core.dag_layout(np.array([0, 1]), np.array([0, 0, 1]), np.array([0]))
    floor = np.array([0.0, -np.inf])
    for base, alt, want in (([1.0, -0.5], [2.0, 0.5], [1.0, 1.5, 2.0]), ([1.0, 0.5], [2.0, -0.5], [1.5, 1.0, 2.5])):
        out = np.zeros(3)
        rows, nodes = np.array([0, 0, 1, 2]), np.array([1, 0])  # every node at base; node 1 at alt; node 0 at alt
        dag.native.core.dag_masked_step_ends(layout, floor, np.array(base), np.array(alt), rows, nodes, out)
        assert out.tolist() == want


def test_step_ends_do_not_depend_on_the_calls_before() -> None:
    """The native core keeps its scratch between calls (a large job's would otherwise be faulted in afresh
    each time): a small graph's rows after a larger graph's, and with more healed nodes before fewer, give
    each row's full evaluation still."""
    rng = np.random.default_rng(11)
    graphs = [build(op_columns(SCENARIOS["training-fabric"](2, ranks, 12), 10), Codebook(), Codebook(), {})
              for ranks in (32, 16, 32)]  # fmt: skip
    for g, p in zip(graphs, (0.6, 0.05, 0.01), strict=True):
        alt = g.intrinsic * rng.uniform(0.3, 1.5, g.nodes)
        rows = Rows(g.intrinsic, alt, [rng.random(g.nodes) < p for _ in range(70)])
        full = np.array([g.evaluate(np.where(m, alt, g.intrinsic)[None])[0].max() for m in rows.masks])
        assert np.array_equal(rows.step_ends(g), full)


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_rows_healing_a_few_nodes_equal_the_full_rows(name: str, ranks: int) -> None:
    """More rows than a block, each healing a few nodes (a rank's, a handful, one node twice, none): the
    native core evaluates again only the nodes whose end such a row changes (``native/src/dag/sparse.rs``),
    and still gives each row's full evaluation, bit for bit, with NaN, infinite, negative and zero values
    among the healed ones and zero durations at base."""
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(9)
    base = np.where(rng.random(g.nodes) < 0.1, 0.0, g.intrinsic)
    alt = g.intrinsic * rng.uniform(0.3, 1.5, g.nodes)
    few = [rng.choice(g.nodes, k, replace=False) for k in rng.integers(1, 6, 150)]
    few += [np.flatnonzero(g.rank == r)[:8] for r in range(ranks)] + [np.zeros(0, np.int64)]
    few += [np.r_[few[0], few[0]], np.flatnonzero(g.rank == 0)]
    odd = alt.copy()
    odd[few[3]] = np.nan
    odd[few[4][0]] = np.inf
    odd[few[5][0]] = -0.05
    odd[few[6]] = 0.0
    floor = np.where(np.isfinite(g.floor), g.floor - rng.uniform(0.0, 0.01, g.nodes), g.floor)
    for rows, floors in ((Rows(base, alt, few), None), (Rows(alt, base, few), floor), (Rows(base, odd, few), None),
                         (Rows(g.intrinsic, odd, few), floor), (Rows(np.zeros(g.nodes), alt, few), None)):  # fmt: skip
        full = [g.evaluate(np.where(np.isin(np.arange(g.nodes), m), rows.alt, rows.base)[None], floors)[0].max()
                for m in rows.masks]  # fmt: skip
        assert np.array_equal(rows.step_ends(g, floors), full, equal_nan=True)


def test_rows_healing_a_few_nodes_end_at_numpys_zero() -> None:
    """More rows than a block, each healing a node of a graph of zeros of both signs (and of nodes from
    -inf, which end at NaN healed to inf): a row's step end is the one the row evaluated alone gives (the
    first NaN, else the first of the largest in index order: its sign too), though the rows are evaluated
    from the step as it is."""
    assert dag.native.core is not None
    n = 64
    layout = dag.native.core.dag_layout(np.arange(n)[::-1].copy(), np.zeros(n + 1, np.int64), np.zeros(0, np.int64))
    rng = np.random.default_rng(3)
    floor, base = rng.choice([0.0, -0.0, -np.inf], n, p=[0.45, 0.45, 0.1]), rng.choice([0.0, -0.0], n)
    floor[0] = base[0] = -0.0  # (the first node in index order: a step of zeros ends at -0.0 unless it is healed)
    nodes, alt = rng.integers(0, n, 300), rng.choice([0.0, -0.0, 1.0, np.inf], 300, p=[0.4, 0.4, 0.05, 0.15])
    ends = {}
    for name, durations in (("zeros", base), ("one later", np.r_[base[:-1], 1.0])):  # (a NaN among ends > 0)
        out = ends[name] = np.zeros(len(nodes))
        dag.native.core.dag_valued_step_ends(layout, floor, durations, np.arange(len(nodes) + 1), nodes, alt, out)
        for got, i, v in zip(out, nodes, alt, strict=True):
            alone = np.zeros(1)
            one = (np.array([0, 1]), np.array([i]), np.array([v]))
            dag.native.core.dag_valued_step_ends(layout, floor, durations, *one, alone)
            assert np.array_equal([got], alone, equal_nan=True) and np.signbit(got) == np.signbit(alone[0])
    zeros = ends["zeros"][ends["zeros"] == 0.0]
    assert np.signbit(zeros).any() and not np.signbit(zeros).all() and np.isnan(ends["one later"]).any()


def test_rows_healing_a_node_below_zero_are_left_to_the_blocks() -> None:
    """More rows than a block, each healing the only last node of a chain to a negative duration: that node
    ends before its predecessor, so the step ends at its predecessor's end, which the step as it is does not
    have as an end of a sink (such rows are evaluated in full: each row's end is the one it gives alone)."""
    assert dag.native.core is not None
    n = 32
    layout = dag.native.core.dag_layout(np.arange(n), np.r_[0, np.arange(n)], np.arange(n - 1))
    floor, durations = np.zeros(n), np.ones(n)
    rows = 200
    nodes, alt = np.full(rows, n - 1), np.full(rows, -5.0)
    out = np.zeros(rows)
    dag.native.core.dag_valued_step_ends(layout, floor, durations, np.arange(rows + 1), nodes, alt, out)
    alone = np.zeros(1)
    dag.native.core.dag_valued_step_ends(layout, floor, durations, np.array([0, 1]), nodes[:1], alt[:1], alone)
    assert alone[0] == n - 1 and np.array_equal(out, np.full(rows, alone[0]))
