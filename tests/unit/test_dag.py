"""The native core's longest-path evaluation (streams/engine/dag.py) gives the ends the vectorised definition
in StepGraph.evaluate gives, bit for bit, on simulated steps (ideal and realistic, with blocking transfers),
healed rows, NaN and infinite durations; and it refuses a graph it cannot evaluate."""

from __future__ import annotations

import numpy as np
import pytest

from streams.engine import dag
from streams.engine.stepgraph import Codebook, StepGraph, build
from streams.sim.scenarios import SCENARIOS
from tests.unit.test_stepgraph import op_columns

pytestmark = pytest.mark.skipif(not dag.available, reason="native core not built")


def definition(g: StepGraph, durations: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setattr(dag, "available", False)
        return np.asarray(g.evaluate(durations))


CASES = [("training-fabric", 16), ("training-slow-link", 32), ("realistic-slow-rank", 16)]


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_native_ends_equal_the_definition(name: str, ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = SCENARIOS[name](2, ranks, 12)
    g = build(op_columns(scenario, 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(7)
    rows = np.stack([g.intrinsic, g.intrinsic * rng.uniform(0.5, 2.0, g.nodes), np.zeros(g.nodes), g.intrinsic])
    rows[3, rng.integers(0, g.nodes, 5)] = np.nan
    rows[3, rng.integers(0, g.nodes, 2)] = np.inf
    native = g.evaluate(rows)
    assert native.shape == rows.shape and native.flags.c_contiguous  # each row's ends side by side
    assert np.array_equal(native, definition(g, rows, monkeypatch), equal_nan=True)
    assert np.isnan(native[3]).any()  # NaN propagates through a maximum, as numpy's does
    signed = np.where(rng.random(g.nodes) < 0.5, 0.0, -0.0)  # (zeros of both signs: numpy's maximum picks one)
    for row in [*rows, signed]:  # one row alone: evaluated without a scratch of live ends
        alone = g.evaluate(row[None, :])
        want = definition(g, row[None, :], monkeypatch)
        assert np.array_equal(alone, want, equal_nan=True) and np.array_equal(np.signbit(alone), np.signbit(want))


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_native_ends_of_zeros_of_both_signs_are_the_definitions(
    name: str, ranks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Floors and durations of 0.0 and -0.0 (every maximum a tie): the native ends keep numpy's sign, the
    second of a tie, bit for bit."""
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(1)
    for _ in range(5):
        floor = np.where(np.isfinite(g.floor), rng.choice([0.0, -0.0], g.nodes), g.floor)
        rows = rng.choice([0.0, -0.0], (2, g.nodes))
        native = g.evaluate(rows, floor)
        with monkeypatch.context() as m:
            m.setattr(dag, "available", False)
            want = g.evaluate(rows, floor)
        assert np.array_equal(native.view(np.int64), want.view(np.int64))


def test_a_graph_out_of_order_is_refused() -> None:
    assert dag.native.core is not None
    with pytest.raises(ValueError, match="not placed before"):  # node 0 waits for node 1, evaluated after it
        dag.native.core.dag_layout(np.array([0, 1]), np.array([0, 1, 1]), np.array([1]))
    with pytest.raises(ValueError, match="not a permutation"):
        dag.native.core.dag_layout(np.array([0, 0]), np.array([0, 0, 0]), np.zeros(0, np.int64))
    layout = dag.native.core.dag_layout(np.array([0, 1]), np.array([0, 0, 1]), np.array([0]))
    with pytest.raises(ValueError, match="floor"):
        dag.native.core.dag_ends(layout, np.zeros(3), np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="writable"):
        dag.native.core.dag_ends(layout, np.zeros(2), np.zeros((1, 2)), np.zeros(3))
    ends = np.zeros((2, 2))  # rows x nodes, each row contiguous
    dag.native.core.dag_ends(layout, np.array([1.0, -np.inf]), np.array([[2.0, 3.0], [0.0, 1.0]]), ends)
    assert ends.tolist() == [[3.0, 6.0], [1.0, 2.0]]


def definition_path(g: StepGraph, ends: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    with monkeypatch.context() as m:
        m.setattr(dag, "walks", False)
        return g.critical_path(ends).tolist()


@pytest.mark.parametrize(("name", "ranks"), CASES)
def test_native_critical_path_equals_the_definition(name: str, ranks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = build(op_columns(SCENARIOS[name](2, ranks, 12), 10), Codebook(), Codebook(), {})
    rng = np.random.default_rng(8)
    rows = [g.intrinsic, g.intrinsic * rng.uniform(0.5, 2.0, g.nodes), np.zeros(g.nodes)]
    for durations in rows:
        ends = g.evaluate(durations[None, :])[0]
        path = g.critical_path(ends)
        assert path.dtype == np.int64
        assert path.tolist() == definition_path(g, ends, monkeypatch)
    assert len(g.critical_path(g.evaluate(g.intrinsic[None, :])[0])) > 1
    ends = g.evaluate(g.intrinsic[None, :])[0]
    ends[rng.integers(0, g.nodes, 5)] = np.nan  # numpy's argmax takes the first NaN
    ends[ends == np.nanmax(ends)] = np.inf
    assert g.critical_path(ends).tolist() == definition_path(g, ends, monkeypatch)


def test_a_bad_graph_has_no_critical_path() -> None:
    assert dag.native.core is not None
    with pytest.raises(ValueError, match="bad graph"):
        dag.native.core.dag_critical_path(np.array([0, 1, 1]), np.array([5]), np.zeros(2), np.zeros(2))


def test_a_graph_keeps_its_layout_while_its_arrays_live() -> None:
    g = build(op_columns(SCENARIOS["training-fabric"](2, 16, 12), 10), Codebook(), Codebook(), {})
    first = dag.layout(g.schedule, g.indptr, g.indices)
    assert dag.layout(g.schedule, g.indptr, g.indices) is first
    indptr = g.indptr.copy()  # another array, even with the same content: its own layout
    other = dag.layout(g.schedule, indptr, g.indices)
    assert other is not first
    kept = len(dag._layouts)
    del indptr
    assert len(dag._layouts) == kept - 1  # it went with its graph's array
