"""The per-step dependency graph, what-if, attribution and the structural findings, against the simulator's
ground truth (which knows the injected causes and the true counterfactual step times)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from audit.duckdb_store import DuckDBStore
from audit.queries import named
from audit.query import run_query
from audit.records import AuditRecord, SourcePosition
from audit.store import RawRecord
from streams.contract.envelope import decode_telemetry
from streams.engine.opgraph import MAX_DECISIONS, OperatorGraph
from streams.engine.stepgraph import Codebook, StepGraphError, _spans_of, build, compile_schedule
from streams.engine.steps import LAG, JobSteps
from streams.sim.scenarios import SCENARIOS, Scenario
from streams.testing import run_stream

RANKS, STEPS = 64, 90


@functools.cache
def scenario_run(name: str, seed: int = 1, steps: int = STEPS) -> tuple[Scenario, tuple[AuditRecord, ...]]:
    scenario = SCENARIOS[name](seed, RANKS, steps)
    out = run_stream((kind, value) for kind, _, value in scenario.run())
    return scenario, tuple(out.audit)


def op_columns(scenario: Scenario, step: int) -> dict[str, Any]:
    parts = []
    for kind, _, value in scenario.run():
        if kind == "telemetry":
            parts += [
                b.columns for b in decode_telemetry(value).batches if b.kind == "op" and b.columns["step"][0] == step
            ]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def test_the_graph_reproduces_the_simulated_step_time() -> None:
    scenario = SCENARIOS["training-fabric"](3, RANKS, 50)
    ops, groups, cache = Codebook(), Codebook(), {}
    for step in (0, 45):  # healthy, and with the straggler
        g = build(op_columns(scenario, step), ops, groups, cache)
        modelled = g.evaluate(g.intrinsic[None, :]).max()
        assert modelled == pytest.approx(scenario.step_times[step], abs=1e-5)
    assert len(cache) == 1  # every step has the same structure: compiled once


def test_a_barrier_waits_for_its_last_member_and_healing_it_shortens_the_step() -> None:
    # two ranks compute, then meet at an all-reduce; rank 1 computes 3x longer
    cols = {
        "rank": [0, 1, 0, 1], "dp": [0, 1, 0, 1], "pp": [0, 0, 0, 0], "tp": [0, 0, 0, 0],
        "op": ["fwd", "fwd", "allreduce", "allreduce"], "op_class": ["compute", "compute", "comm", "comm"],
        "start": [100.0, 100.0, 101.0, 103.0], "duration": [1.0, 3.0, 2.5, 0.5], "microbatch": [0, 0, -1, -1],
        "group": ["", "", "g", "g"], "seq": [-1, -1, 7, 7], "peer": [-1, -1, -1, -1],
    }  # fmt: skip
    c = {k: np.array(v, dtype=object if isinstance(v[0], str) else None) for k, v in cols.items()}
    g = build(c, Codebook(), Codebook(), {})
    assert g.observed_s == pytest.approx(3.5)
    healed = g.intrinsic.copy()
    healed[(g.rank == 1) & (g.op == 1)] = 1.0  # rank 1's compute as long as rank 0's
    ends = g.evaluate(np.stack([g.intrinsic, healed]))
    assert ends.max(axis=1) == pytest.approx([3.5, 1.5])
    path = g.critical_path(ends[0])
    assert next(int(g.rank[n]) for n in path if g.span[n] >= 0) == 1  # the late rank starts the critical path


def test_pipeline_transfers_delay_the_receiving_stage() -> None:
    # stage 0 computes [0, 1], sends for 2 s; stage 1 receives, then computes 1 s
    cols = {
        "rank": [0, 0, 1, 1], "dp": [0, 0, 0, 0], "pp": [0, 0, 1, 1], "tp": [0, 0, 0, 0],
        "op": ["forward", "send", "recv", "forward"], "op_class": ["compute", "comm", "comm", "compute"],
        "start": [0.0, 1.0, 1.0, 3.0], "duration": [1.0, 2.0, 2.0, 1.0], "microbatch": [0, 0, 0, 0],
        "group": ["", "", "", ""], "seq": [-1, -1, -1, -1], "peer": [-1, 1, 0, -1],
    }  # fmt: skip
    c = {k: np.array(v, dtype=object if isinstance(v[0], str) else None) for k, v in cols.items()}
    g = build(c, Codebook(), Codebook(), {})
    assert g.evaluate(g.intrinsic[None, :]).max() == pytest.approx(4.0)
    faster = g.intrinsic.copy()
    faster[g.op == 2] = 0.5  # the send ("send" is op code 2)
    assert g.evaluate(faster[None, :]).max() == pytest.approx(2.5)


@pytest.mark.parametrize(
    "name", ["training-fabric", "training-slow-stage", "training-slow-link", "training-imbalanced-dp"]
)
def test_the_top_cause_is_the_injected_one_and_its_slowdown_is_within_5_percent(name: str) -> None:
    scenario, audit = scenario_run(name)
    truth = scenario.ground_truth(1)
    drift = next(r for r in audit if r.type == "finding" and r.body["kind"] == "step_time_drift")
    causes = sorted((r.body for r in audit if r.type == "attribution" and r.body["finding_id"] == drift.id),
                    key=lambda b: b["rank"])  # fmt: skip
    first = truth["causes"][0]
    assert causes[0]["cause"] == first["element"]
    end = truth["causes"][1]["start_step"] if len(truth["causes"]) > 1 else truth["steps"]
    start_step = _step_at(truth, drift.body["start"])
    actual = np.mean(truth["step_time_s"][start_step:end])
    true_slowdown = actual / np.mean(truth["counterfactual_step_time_s"][start_step:end])
    assert causes[0]["slowdown"] == pytest.approx(true_slowdown, rel=0.05)


def _step_at(truth: dict[str, Any], t: float) -> int:
    starts = truth["t0"] + np.concatenate([[0.0], np.cumsum(truth["step_time_s"][:-1])])
    return int(np.searchsorted(starts, t, side="right") - 1)


def test_the_power_cap_is_named_as_the_decision_that_made_the_straggler_worse() -> None:
    scenario, audit = scenario_run("training-fabric", steps=120)
    truth = scenario.ground_truth(1)
    cap = next(c for c in truth["causes"] if c["decision"])
    regression = next(r for r in audit if r.type == "finding" and r.body["kind"] == "control_regression")
    assert regression.body["subjects"][-1] == cap["element"]
    first = next(r.body for r in audit if r.type == "attribution" and r.body["finding_id"] == regression.id)
    assert (first["rank"], first["cause_kind"], first["cause"]) == (1, "decision", cap["decision"])
    assert first["share"] > 0.8


def test_the_straggler_cascade_reaches_ranks_through_pipeline_and_collectives() -> None:
    scenario, audit = scenario_run("training-fabric")
    cascade = next(r.body for r in audit if r.type == "finding" and r.body["kind"] == "straggler_cascade")
    assert cascade["subjects"][0] == scenario.ground_truth(1)["causes"][0]["element"]
    ev = cascade["evidence"]
    assert ev["via_pipeline"] > 0 and ev["via_collectives"] > 0
    assert ev["affected_ranks"] == ev["via_tensor_parallel"] + ev["via_pipeline"] + ev["via_collectives"]


def test_healthy_runs_get_no_structural_findings_and_waste_adds_up() -> None:
    _, audit = scenario_run("training-fabric-healthy")
    kinds = {r.body["kind"] for r in audit if r.type == "finding"}
    assert not kinds & {"straggler_cascade", "control_regression", "step_time_drift"}
    rollups = [r.body for r in audit if r.type == "metrics_rollup"]
    windows = {b["window_start"] for b in rollups if b["name"] == "wasted_accel_s"}
    for w in windows:
        waste = sum(b["total"] for b in rollups if b["name"] == "wasted_accel_s" and b["window_start"] == w)
        allocated = next(b["total"] for b in rollups if b["name"] == "allocated_accel_s" and b["window_start"] == w)
        compute = next(b["total"] for b in rollups if b["name"] == "compute_accel_s" and b["window_start"] == w)
        assert waste + compute == pytest.approx(allocated, rel=1e-6)


def test_the_same_input_gives_the_same_records() -> None:
    scenario = SCENARIOS["training-slow-link"](2, RANKS, 40)
    items = [(kind, value) for kind, _, value in scenario.run()]
    first, second = run_stream(items), run_stream(items)
    assert [r.encode() for r in first.audit] == [r.encode() for r in second.audit]
    assert any(r.type == "graph_snapshot" for r in first.audit)


def test_state_stays_bounded() -> None:
    scenario = SCENARIOS["training-fabric-healthy"](1, 16, 30)
    steps = JobSteps("llm-pretrain")
    for kind, _, value in scenario.run():
        if kind == "telemetry":
            for b in decode_telemetry(value).batches:
                if b.kind == "op":
                    steps.add(b.columns["step"], b.columns)
                    assert len(steps._pending) <= LAG + 1
    graph = OperatorGraph("j")
    for i in range(3 * MAX_DECISIONS):
        graph.add_decision(f"d{i}", f"ctl{i}", [f"node:n{i}"])
    assert sum(1 for n in graph.graph if n.startswith("controller:")) == MAX_DECISIONS


def test_snapshots_only_on_change_and_placement_lookup() -> None:
    graph = OperatorGraph("j")
    graph.add_relations([("placed_on", "rank:j/0", "device:n0/gpu0"), ("placed_on", "device:n0/gpu0", "node:n0")])
    graph.add_ranks({0: (0, 0, 0)})
    assert graph.snapshot(1.0)
    assert graph.snapshot(2.0) == []
    assert graph.hosts("node:n0", "rank:j/0") and graph.hosts("node:n0", "stage:j/0")
    assert not graph.hosts("node:n1", "rank:j/0")


def test_graph_changes_replayed_by_sql_give_the_graph_at_each_time(tmp_path: Path) -> None:
    graph = OperatorGraph("j")
    graph.add_ranks({r: (r // 8, r % 4, 0) for r in range(3000)})  # > MAX_ITEMS: the change comes in parts
    changes = graph.snapshot(10.0)
    assert len(changes) > 1 and {c.parts for c in changes} == {len(changes)}
    at_10 = graph.graph.number_of_edges()
    for i in range(MAX_DECISIONS + 5):  # the oldest controllers drop out: edges removed
        graph.add_decision(f"d{i}", f"c{i}", ["stage:j/1"])
    changes += graph.snapshot(20.0)
    db = tmp_path / "g.duckdb"
    store = DuckDBStore(db)
    src = SourcePosition("telemetry", 0, 0)
    store.write([RawRecord("audit", 0, i, 0, b"k", AuditRecord("graph_snapshot", c.id, src, c.as_dict(), "k").encode())
                 for i, c in enumerate(changes)])  # fmt: skip
    store.close()
    sql = named("graph_at").sql
    at = {t: run_query(db, sql, {"job": "j", "at": t}).records()[0] for t in (15.0, 25.0)}
    assert at[15.0]["edge_count"] == at_10
    assert at[25.0]["edge_count"] == graph.graph.number_of_edges()
    assert at[25.0]["node_count"] == graph.graph.number_of_nodes()


def test_a_steps_compute_seconds_are_its_compute_spans_durations() -> None:
    """The productive time a step's cost starts from: its compute spans' durations, not its sync or comm spans'
    (the op class column is read once for the graph and this sum)."""
    scenario = SCENARIOS["training-fabric"](1, 32, 12)
    steps, expected, reports = JobSteps("llm-pretrain"), dict[int, float](), []
    for kind, _, value in scenario.run():
        if kind == "telemetry":
            for b in decode_telemetry(value).batches:
                if b.kind == "op":
                    c = b.columns
                    for step in np.unique(c["step"]):
                        mask = (c["step"] == step) & (np.asarray(c["op_class"]) == "compute")
                        expected[int(step)] = expected.get(int(step), 0.0) + float(c["duration"][mask].sum())
                    reports += steps.add(c["step"], c)
    reports += steps.flush()
    assert len(reports) == 12
    classes = {str(x) for x in op_columns(scenario, 3)["op_class"]}
    assert {"compute", "comm", "sync"} <= classes  # (others in the step too: the sum is of compute spans only)
    for r in reports:
        assert r.cost.compute_s == pytest.approx(expected[r.step], rel=1e-9)


def _schedule_by_every_node(indptr: Any, indices: Any) -> tuple[Any, list[Any]] | None:
    """``compile_schedule``'s earlier definition: each level's successors counted into an array of every node
    (``np.bincount``), its nodes found with ``np.unique``; None for a cycle."""
    n = len(indptr) - 1
    remaining = np.diff(indptr)
    succ = np.repeat(np.arange(n), remaining)[np.argsort(indices, kind="stable")]
    sptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(indices, minlength=n), out=sptr[1:])
    frontier = sources = np.flatnonzero(remaining == 0)
    levels, placed = [], len(frontier)
    while frontier.size:
        out = succ[_spans_of(sptr, frontier)]
        remaining -= np.bincount(out, minlength=n)
        frontier = np.unique(out[remaining[out] == 0])
        if frontier.size:
            levels.append(frontier)
            placed += len(frontier)
    return (sources, levels) if placed == n else None


def _random_graph(rng: np.random.Generator, n: int, edges: int, cycle: bool) -> tuple[Any, Any]:
    """A CSR of predecessors over ``n`` nodes: edges from lower to higher nodes (some listed twice), and one
    back edge when ``cycle``."""
    src = rng.integers(0, n - 1, edges)
    dst = src + 1 + rng.integers(0, np.maximum(n - 1 - src, 1))
    src, dst = np.concatenate([src, src[:5]]), np.concatenate([dst, dst[:5]])  # (a predecessor listed twice)
    if cycle:
        src, dst = np.append(src, dst[0]), np.append(dst, src[0])
    indices = src[np.argsort(dst, kind="stable")]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=indptr[1:])
    return indptr, indices


@pytest.mark.parametrize("seed", range(6))
def test_the_schedule_counts_each_level_where_it_is_as_over_every_node_before(seed: int) -> None:
    """``compile_schedule`` (each level's successors counted with ``np.unique``) gives the levels of its earlier
    definition (counted into an array of every node), node for node, and finds the same cycles; on a simulated
    step's graph too."""
    rng = np.random.default_rng(seed)
    graphs = [_random_graph(rng, int(rng.integers(2, 400)), int(rng.integers(1, 1500)), cycle=seed % 3 == 2)]
    if seed == 0:
        scenario = SCENARIOS["training-fabric"](3, RANKS, 4)
        g = build(op_columns(scenario, 1), Codebook(), Codebook(), {})
        graphs.append((g.indptr, g.indices))
    for indptr, indices in graphs:
        old = _schedule_by_every_node(indptr, indices)
        if old is None:
            with pytest.raises(StepGraphError):
                compile_schedule(indptr, indices)
            continue
        new = compile_schedule(indptr, indices)
        assert np.array_equal(new.sources, old[0]) and new.sources.dtype == old[0].dtype
        assert len(new.levels) == len(old[1]) > 0
        for a, b in zip(new.levels, old[1], strict=True):
            assert np.array_equal(a, b) and a.dtype == b.dtype
