"""Every named query in sql/queries, on a small audit trail with known answers (written through the sink's
only write path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from audit.duckdb_store import DuckDBStore
from audit.queries import library, named
from audit.query import run_query
from audit.records import AuditRecord, SourcePosition
from audit.store import RawRecord
from streams.engine.findings import Finding
from streams.errors import QueryError

DAY = 86_400.0
F1 = Finding("straggler", ("rank:j/3",), 1000.0, 1100.0, 1.3, {}, {"accel_s": 50.0})
F2 = Finding("step_time_drift", ("job:j",), 1500.0, 1600.0, 1.1, {}, {"accel_s": 20.0})
F3 = Finding("step_time_drift", ("job:k",), 5000.0, 5100.0, 1.5, {}, {"accel_s": 5.0})


def decision(id_: str, t: float, controller: str, targets: list[str], metric: str, direction: str) -> dict[str, Any]:
    return {"id": id_, "time": t, "controller": controller, "layer": "power", "action": "act", "targets": targets,
            "parameters": {}, "reason": f"{id_} reason", "expected_effect": {"metric": metric, "direction": direction},
            "job": "j"}  # fmt: skip


DECISIONS = [
    decision("D1", 900.0, "power-manager", ["node:n7"], "power_w", "down"),
    decision("D2", 950.0, "autoscaler", ["node:n7", "node:n8"], "power_w", "up"),
    decision("D3", 2000.0, "scheduler", ["rank:j/3"], "step_s", "down"),
    decision("D4", 2010.0, "retry", ["rank:j/3"], "step_s", "down"),
]


def rollup(name: str, entity: str, start: float, mean: float, total: float, job: str = "j") -> dict[str, Any]:
    return {"job": job, "entity": entity, "name": name, "window_start": start, "window_end": start + 600, "n": 10,
            "mean": mean, "p50": mean, "p99": mean, "min": mean, "max": mean, "total": total}  # fmt: skip


def records() -> list[AuditRecord]:
    src = SourcePosition("telemetry", 0, 1)
    out = [AuditRecord("finding", f.id, src, f.as_dict(), "k") for f in (F1, F2, F3)]
    out += [AuditRecord("decision", f"d{d['id']}", src, d, "k") for d in DECISIONS]
    attributions = [
        {"finding_id": F1.id, "rank": 1, "cause_kind": "element", "cause": "rank:j/3", "share": 0.7,
         "slowdown": 1.25, "cost_accel_s": 35.0, "evidence": {}},
        {"finding_id": F1.id, "rank": 2, "cause_kind": "decision", "cause": "D1", "share": 0.3,
         "slowdown": 1.05, "cost_accel_s": 15.0, "evidence": {}},
        {"finding_id": F2.id, "rank": 1, "cause_kind": "element", "cause": "spread:j/dp", "share": 0.9,
         "slowdown": 1.2, "slowdown_unhealed": 1.3, "cost_accel_s": 18.0, "evidence": {}},
    ]  # fmt: skip
    out += [AuditRecord("attribution", f"a{i}", src, a, "k") for i, a in enumerate(attributions)]
    graphs = [  # a graph, then a change that adds a rank and a link and removes nothing, then one that removes
        {"job": "j", "valid_from": 0.0, "digest": "g0", "nodes": [{"id": "rank:j/0"}], "edges": []},
        {"job": "j", "valid_from": 1200.0, "digest": "g1", "part": 0, "parts": 1, "nodes": [{"id": "rank:j/3"}],
         "edges": [{"src": "rank:j/0", "dst": "rank:j/3", "kind": "collective"}]},
        {"job": "j", "valid_from": 6000.0, "digest": "g2", "part": 0, "parts": 1, "nodes": [], "edges": [],
         "removed_nodes": ["rank:j/3"],
         "removed_edges": [{"src": "rank:j/0", "dst": "rank:j/3", "kind": "collective"}]},
    ]  # fmt: skip
    out += [AuditRecord("graph_snapshot", f"g{i}", src, g, "k") for i, g in enumerate(graphs)]
    rollups = [
        rollup("accel_s_per_output", "job:j", 0.0, 2.0, 0.0),
        rollup("accel_s_per_output", "job:j", 600.0, 2.5, 0.0),
        rollup("wasted_accel_s", "cause:straggler_wait", 0.0, 0.0, 30.0),
        rollup("wasted_accel_s", "cause:straggler_wait", 600.0, 0.0, 12.0),
        rollup("wasted_accel_s", "cause:pipeline_bubble", 0.0, 0.0, 10.0),
        rollup("wasted_accel_s", "cause:retry", DAY, 0.0, 7.0),
        rollup("wasted_accel_s", "cause:retry", 0.0, 0.0, 99.0, job="other"),
        rollup("step_s", "job:j", 0.0, 1.0, 10.0),
        rollup("step_s", "job:j", 600.0, 1.2, 12.0),
        rollup("allocated_accel_s", "job:j", 0.0, 10.0, 100.0),
        rollup("compute_accel_s", "job:j", 0.0, 5.0, 50.0),
        rollup("step_ideal_s", "job:j", 0.0, 0.8, 8.0),
        rollup("step_modelled_s", "job:j", 0.0, 1.0, 10.0),
        rollup("blocking_slowdown", "job:j", 0.0, 1.3, 13.0),
        {**rollup("step_ideal_s", "job:j", 600.0, 1.0, 10.0), "points": [[11, 600.5, 1.0], [12, 601.7, 1.0]]},
        {**rollup("step_modelled_s", "job:j", 600.0, 1.1, 11.0), "points": [[11, 600.5, 1.1], [12, 601.7, 1.1]]},
        {**rollup("blocking_slowdown", "job:j", 600.0, 1.1, 11.0), "points": [[11, 600.5, 1.1], [12, 601.7, 1.1]]},
        {**rollup("step_s", "job:k", 0.0, 2.0, 4.0, job="k"), "points": [[3, 0.0, 1.5], [4, 1.5, 2.5]]},
        rollup("energy_j_per_output", "job:j", 0.0, 4.0, 4.0),
        rollup("energy_j_per_output", "job:j", 600.0, 6.0, 6.0),
    ]
    out += [AuditRecord("metrics_rollup", f"r{i}", src, r, "k") for i, r in enumerate(rollups)]
    return out


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("q") / "q.duckdb"
    store = DuckDBStore(path)
    store.write([RawRecord("audit", 0, i, 0, None, r.encode()) for i, r in enumerate(records())])
    store.close()
    return path


def run(db: Path, name: str, **params: object) -> list[tuple[Any, ...]]:
    q = named(name)
    return run_query(db, q.sql, q.bind({k: str(v) for k, v in params.items()})).rows


def test_findings_in_window(db: Path) -> None:
    rows = run(db, "findings_in_window", start=900, end=2000)
    assert [(r[1], r[2], r[6]) for r in rows] == [
        ("straggler", ["rank:j/3"], 50.0),
        ("step_time_drift", ["job:j"], 20.0),
    ]


def test_finding_causes(db: Path) -> None:
    assert run(db, "finding_causes", finding_id=F1.id) == [
        (1, "element", "rank:j/3", 0.7, 1.25, 35.0, None, None, None),
        (2, "decision", "D1", 0.3, 1.05, 15.0, "power-manager", "act", "D1 reason"),
    ]


def test_decisions_touching(db: Path) -> None:
    assert [r[0] for r in run(db, "decisions_touching", element="node:", start=0, end=10_000)] == ["D1", "D2"]
    assert [r[0] for r in run(db, "decisions_touching", element="node:n8", start=0, end=10_000)] == ["D2"]
    assert [r[0] for r in run(db, "decisions_touching", element="rank:j/", start=0, end=2005)] == ["D3"]


def test_preceding(db: Path) -> None:
    rows = run(db, "preceding", finding_id=F2.id, horizon_s=600)
    assert [(r[0], r[1], r[3]) for r in rows] == [("decision", "D1", 600.0), ("decision", "D2", 550.0),
                                                  ("finding", F1.id, 500.0)]  # fmt: skip


def test_cost_per_output(db: Path) -> None:
    assert run(db, "cost_per_output", job="j") == [(0.0, 600.0, 2.0, 1.0, 10), (600.0, 1200.0, 2.5, 1.25, 10)]


def test_wasted_by_cause(db: Path) -> None:
    rows = run(db, "wasted_by_cause", job="j")
    assert [(str(r[1]), r[2], r[3]) for r in rows] == [
        ("1970-01-01", "cause:straggler_wait", 42.0),
        ("1970-01-01", "cause:pipeline_bubble", 10.0),
        ("1970-01-02", "cause:retry", 7.0),
    ]
    assert len(run(db, "wasted_by_cause", job="%")) == 4


def test_step_time(db: Path) -> None:
    assert run(db, "step_time", job="j") == [(0.0, 600.0, 10, 1.0, 1.0, 1.0, 1.0, 1.0),
                                             (600.0, 1200.0, 10, 1.2, 1.2, 1.2, 1.2, 1.2)]  # fmt: skip
    assert run(db, "step_time", job="other") == []


def test_step_series(db: Path) -> None:
    assert run(db, "step_series", job="k") == [(3, 0.0, 1.5, None, None, None), (4, 1.5, 2.5, None, None, None)]
    assert run(db, "step_series", job="j") == [(11, 600.5, None, 1.1, 1.0, 1.1), (12, 601.7, None, 1.1, 1.0, 1.1)]
    assert run(db, "step_series", job="other") == []  # window roll-ups without points (older records): no rows


def test_blocking_slowdown(db: Path) -> None:
    first, second = run(db, "blocking_slowdown", job="j")
    start, _, steps, ideal, blocking, worst, allocated, waited, wait_slowdown, over_compute = first
    assert (start, steps, ideal, worst, allocated, waited, over_compute) == (0.0, 10, 0.8, 1.3, 100.0, 30.0, 2.0)
    assert blocking == pytest.approx(10 / 8)
    assert wait_slowdown == pytest.approx(100 / 70)
    assert second[0] == 600.0 and second[4] == pytest.approx(1.1) and second[6] is None  # no waste roll-ups there
    assert run(db, "blocking_slowdown", job="other") == []


def test_wasted_by_window(db: Path) -> None:
    assert [(r[0], r[2], r[3]) for r in run(db, "wasted_by_window", job="j")] == [
        (0.0, "pipeline_bubble", 10.0), (0.0, "straggler_wait", 30.0), (600.0, "straggler_wait", 12.0),
        (DAY, "retry", 7.0)]  # fmt: skip


def test_output_economics(db: Path) -> None:
    rows = run(db, "output_economics", job="j")
    assert [(r[0], r[2], r[3], r[4], r[5], r[6]) for r in rows] == [
        (0.0, 2.0, None, 4.0, 1.0, 1.0), (600.0, 2.5, None, 6.0, 1.25, 1.5)]  # fmt: skip


def test_ranked_causes(db: Path) -> None:
    rows = run(db, "ranked_causes", job="j", start=0, end=10_000)
    assert [(r[0], r[3], r[5], r[9], r[12]) for r in rows] == [
        ("straggler", 1, "rank:j/3", None, None), ("straggler", 2, "D1", "power-manager", None),
        ("step_time_drift", 1, "spread:j/dp", None, 1.3)]  # fmt: skip
    assert run(db, "ranked_causes", job="j", start=1501, end=10_000) == []
    assert run(db, "ranked_causes", job="k", start=0, end=10_000) == []


def test_controller_conflicts(db: Path) -> None:
    rows = run(db, "controller_conflicts", window_s=60)
    assert [(r[0], r[1], r[4], r[5], r[6]) for r in rows] == [
        ("D1", "D2", ["node:n7"], 50.0, "opposed"),
        ("D3", "D4", ["rank:j/3"], 10.0, "overlapping"),
    ]
    assert run(db, "controller_conflicts", window_s=5) == []


def test_coherence_timeline(db: Path) -> None:
    assert run(db, "coherence_timeline", bucket_s=1000, window_s=20) == [(0.0, 2, 0, 1.0), (2000.0, 2, 2, 0.0)]


def test_graph_at(db: Path) -> None:
    assert [(r[1], r[2], r[3]) for r in run(db, "graph_at", job="j", at=1199)] == [("g0", 1, 0)]
    assert [(r[1], r[2], r[3]) for r in run(db, "graph_at", job="j", at=5000)] == [("g1", 2, 1)]
    assert [(r[1], r[2], r[3], r[4]) for r in run(db, "graph_at", job="j", at=7000)] == [("g2", 1, 0, ["rank:j/0"])]
    assert run(db, "graph_at", job="j", at=-1) == []


# A service job "svc" whose two controllers fight (a control conflict, then an energy loop), a retry storm
# caused by one of its decisions, and another job's finding and decision
def svc_decision(id_: str, t: float, controller: str, targets: list[str], job: str = "svc") -> dict[str, Any]:
    return {**decision(id_, t, controller, targets, "latency_p99_s", "down"), "job": job}


CONFLICT = Finding("control_conflict", ("node:n1", "controller:a", "controller:b"), 100.0, 130.0, 2.0,
                   {"pairs": [["C1", "C2"], ["C2", "C3"]]})  # fmt: skip
LOOP = Finding("energy_feedback_loop", ("service:svc", "rack:r0"), 100.0, 140.0, 0.3,
               {"controllers": ["controller:a", "controller:b"], "pairs": 2})  # fmt: skip
STORM = Finding("retry_storm", ("service:svc",), 200.0, 210.0, 3.0)
ELSEWHERE = Finding("tail_latency_inflation", ("service:other",), 300.0, 310.0, 2.0, {}, {"accel_s": 9.0})
BLAMED = Finding("tail_latency_inflation", ("service:third",), 320.0, 330.0, 2.0)


@pytest.fixture(scope="module")
def svc_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = SourcePosition("telemetry", 0, 1)
    decisions = [
        svc_decision("C1", 100.0, "a", ["node:n1"]),
        svc_decision("C2", 110.0, "b", ["node:n1"]),
        svc_decision("C3", 130.0, "a", ["node:n1"]),
        svc_decision("C4", 140.0, "b", ["rack:r0"]),
        svc_decision("C5", 500.0, "a", ["node:n1"]),  # after the loop's span
        svc_decision("R1", 195.0, "retry-tuner", ["service:svc"]),
        svc_decision("X1", 150.0, "x", ["node:n9"], job="other"),  # another job, off svc's graph
        svc_decision("P1", 160.0, "power", ["rack:r0"], job=""),  # job-less, on svc's graph
    ]
    graph = {
        "job": "svc",
        "valid_from": 0.0,
        "digest": "s0",
        "edges": [],
        "nodes": [{"id": i} for i in ("service:svc", "node:n1", "rack:r0", "controller:a", "controller:b")],
    }
    attributions = [
        {"finding_id": STORM.id, "rank": 1, "cause_kind": "decision", "cause": "R1", "share": 1.0,
         "slowdown": 3.0, "cost_accel_s": 4.0, "evidence": {}},
        {"finding_id": BLAMED.id, "rank": 1, "cause_kind": "decision", "cause": "R1", "share": 1.0,
         "slowdown": 2.0, "cost_accel_s": 1.0, "evidence": {}},
    ]  # fmt: skip
    out = [AuditRecord("finding", f.id, src, f.as_dict(), "k") for f in (CONFLICT, LOOP, STORM, ELSEWHERE, BLAMED)]
    out += [AuditRecord("decision", f"d{d['id']}", src, d, "k") for d in decisions]
    out += [AuditRecord("attribution", f"a{i}", src, a, "k") for i, a in enumerate(attributions)]
    out += [AuditRecord("graph_snapshot", "g", src, graph, "svc")]
    path = tmp_path_factory.mktemp("svc") / "svc.duckdb"
    store = DuckDBStore(path)
    store.write([RawRecord("audit", 0, i, 0, None, r.encode()) for i, r in enumerate(out)])
    store.close()
    return path


def test_job_causes(db: Path, svc_db: Path) -> None:
    rows = run(svc_db, "job_causes", job="svc", start=0, end=1000)
    # finding, its cost, cause rank, cause, how, controller
    got = [(r[0], r[6], r[7], r[9], r[10], r[15]) for r in rows]
    assert got[:2] == [
        ("retry_storm", 4.0, 1, "R1", "attributed", "retry-tuner"),  # a cost: first
        ("tail_latency_inflation", 1.0, 1, "R1", "attributed", "retry-tuner"),  # about svc through its decision
    ]
    # no cost: by start time (the two began together: by id), each finding's decisions in time order
    assert sorted(got[2:]) == [
        *[("control_conflict", None, i, c, "conflicting pair", ctl)
          for i, (c, ctl) in enumerate([("C1", "a"), ("C2", "b"), ("C3", "a")], 1)],
        *[("energy_feedback_loop", None, i, c, "controller in the loop", ctl)
          for i, (c, ctl) in enumerate([("C1", "a"), ("C2", "b"), ("C3", "a"), ("C4", "b")], 1)],
    ]  # fmt: skip
    assert ELSEWHERE.id not in {r[1] for r in rows}
    assert [r[0] for r in run(svc_db, "job_causes", job="svc", start=150, end=1000)][:1] == ["retry_storm"]
    # a training job: attributed causes ranked, the costlier finding first; a finding without causes once
    rows = run(db, "job_causes", job="j", start=0, end=10_000)
    assert [(r[0], r[7], r[9]) for r in rows] == [
        ("straggler", 1, "rank:j/3"), ("straggler", 2, "D1"), ("step_time_drift", 1, "spread:j/dp")]  # fmt: skip
    assert [(r[0], r[9]) for r in run(db, "job_causes", job="k", start=0, end=10_000)] == [("step_time_drift", None)]


def test_job_decisions(db: Path, svc_db: Path) -> None:
    ids = [r[0] for r in run(svc_db, "job_decisions", job="svc", start=0, end=1000)]
    assert ids == ["C1", "C2", "C3", "C4", "P1", "R1", "C5"]  # the job's own and the job-less one on its graph
    assert [r[0] for r in run(svc_db, "job_decisions", job="other", start=0, end=1000)] == ["X1"]
    assert [r[0] for r in run(svc_db, "job_decisions", job="svc", start=120, end=150)] == ["C3", "C4"]
    assert [r[0] for r in run(db, "job_decisions", job="k", start=0, end=10_000)] == []


def test_job_coherence_timeline(db: Path, svc_db: Path) -> None:
    # C1-C2 and C2-C3 on node:n1, C4-P1 on rack:r0 (a job-less decision on svc's graph); R1, C5 alone
    got = run(svc_db, "job_coherence_timeline", job="svc", bucket_s=100, window_s=20)
    assert got == [(100.0, 6, 5, pytest.approx(1 / 6)), (500.0, 1, 0, 1.0)]
    assert run(svc_db, "job_coherence_timeline", job="other", bucket_s=100, window_s=20) == [(100.0, 1, 0, 1.0)]
    # the training fixture: as the store-wide timeline, every decision there being job j's
    assert run(db, "job_coherence_timeline", job="j", bucket_s=1000, window_s=20) == run(
        db, "coherence_timeline", bucket_s=1000, window_s=20
    )


def test_every_named_query_has_a_test_here() -> None:
    tested = {n.removeprefix("test_") for n in globals() if n.startswith("test_")}
    assert set(library()) <= tested


def test_parameters_are_checked() -> None:
    with pytest.raises(QueryError, match="missing \\['end'\\]"):
        named("findings_in_window").bind({"start": "1"})
    with pytest.raises(QueryError, match="must be DOUBLE"):
        named("findings_in_window").bind({"start": "soon", "end": "2"})
    with pytest.raises(QueryError, match="no named query"):
        named("nope")


def test_the_horizon_bounds_what_precedes(db: Path) -> None:
    assert [r[1] for r in run(db, "preceding", finding_id=F2.id, horizon_s=550)] == ["D2", F1.id]
