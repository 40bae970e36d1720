"""Partial tracing: one traced tensor-parallel rank per stage stands for its untraced peers. Costs (waste
roll-ups, allocated and compute accelerator-seconds, roll-up accelerator-seconds per output) count the job's
real accelerators — a step summary's ``accelerators`` when given, else the traced ranks and the ones they
``represent`` (topology) — not only the ranks that sent spans."""

from __future__ import annotations

import orjson
import pytest

from streams.contract.schema import TELEMETRY_SCHEMA
from streams.engine.economics import Accelerators
from streams.sim.scenarios import SCENARIOS
from streams.testing import run_messages

RANKS, TP, STEPS = 16, 4, 24  # the simulator's 16-rank layout: 4 stages of 4 tensor-parallel ranks


def telemetry(traced_tp: int | None, accelerators: bool = True) -> list[bytes]:
    """A healthy simulated job's telemetry; ``traced_tp``: keep only that tensor-parallel rank's spans per
    stage; ``accelerators``: keep the step summaries' count (else 0, unknown)."""
    items = SCENARIOS["training-fabric-healthy"](1, RANKS, STEPS).run()
    out = []
    for kind, _, raw in items:
        if kind != "telemetry":
            continue
        doc = orjson.loads(raw)
        for batch in doc.get("columns", []):
            data, n = batch["data"], int(batch["n"])
            full = {k: v if isinstance(v, list) else [v] * n for k, v in data.items()}
            if batch["kind"] == "op" and traced_tp is not None:
                keep = [i for i, t in enumerate(full["tp"]) if t == traced_tp]
                batch["data"] = {k: [v[i] for i in keep] for k, v in full.items()}
                batch["n"] = len(keep)
            if batch["kind"] == "step" and not accelerators:
                batch["data"] = {**full, "accelerators": [0] * n}
        doc["columns"] = [b for b in doc.get("columns", []) if b["n"] > 0]
        out.append(orjson.dumps(doc))
    return out


def represents(job: str, time: float) -> bytes:
    """Topology: in each stage the traced tp rank 0 stands for tp ranks 1..3 (rank = stage·4 + tp)."""
    samples = [
        {"kind": "topology", "relation": "represents", "src": f"rank:{job}/{s * TP}", "dst": f"rank:{job}/{s * TP + t}",
         "time": time, "job": job}
        for s in range(RANKS // TP) for t in range(1, TP)
    ]  # fmt: skip
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": "topology/represents", "seq": 0, "samples": samples})


def totals(messages: list[bytes]) -> dict[tuple[str, str], float]:
    out = run_messages(messages)
    assert out.dead_letters == []
    found: dict[tuple[str, str], float] = {}
    for r in out.audit:
        if r.type == "metrics_rollup":
            key = (r.body["entity"], r.body["name"])
            found[key] = found.get(key, 0.0) + r.body["total"]
    return found


def job_and_start() -> tuple[str, float]:
    doc = orjson.loads(next(m for m in telemetry(None) if b'"op"' in m))
    batch = next(b for b in doc["columns"] if b["kind"] == "op")
    start = batch["data"]["start"]
    return batch["data"]["job"], float(min(start) if isinstance(start, list) else start)


@pytest.fixture(scope="module")
def full() -> dict[tuple[str, str], float]:
    return totals(telemetry(None))


def test_costs_count_the_step_summarys_accelerators_not_the_traced_ranks(full: dict[tuple[str, str], float]) -> None:
    job, _ = job_and_start()
    partial = totals(telemetry(traced_tp=0))
    for name in ("allocated_accel_s", "compute_accel_s"):
        assert partial[(f"job:{job}", name)] == pytest.approx(full[(f"job:{job}", name)], rel=0.05), name
    assert partial[(f"job:{job}", "accel_s_per_output")] == pytest.approx(full[(f"job:{job}", "accel_s_per_output")])


def test_without_a_count_the_ranks_a_traced_rank_represents_are_counted(full: dict[tuple[str, str], float]) -> None:
    job, start = job_and_start()
    alone = totals(telemetry(traced_tp=0, accelerators=False))
    declared = totals([represents(job, start), *telemetry(traced_tp=0, accelerators=False)])
    allocated = (f"job:{job}", "allocated_accel_s")
    assert alone[allocated] == pytest.approx(full[allocated] / TP, rel=0.05)  # only the ranks that sent spans
    assert declared[allocated] == pytest.approx(full[allocated], rel=0.05)
    assert declared[(f"job:{job}", "accel_s_per_output")] == pytest.approx(full[(f"job:{job}", "accel_s_per_output")])


def test_the_count_prefers_the_steps_summary_then_the_latest_then_the_topology() -> None:
    acc = Accelerators("j")
    acc.relations([("represents", "rank:j/0", "rank:j/1"), ("represents", "rank:j/0", "rank:j/2")])
    acc.relations([("represents", "rank:other/0", "rank:other/3"), ("placed_on", "rank:j/4", "device:d/0")])
    assert acc.count(5, [0, 4]) == 4  # ranks 0 and 4 traced, 1 and 2 represented by rank 0
    assert acc.count(5, [0, 1]) == 3  # a represented rank that sent spans counts once
    acc.summary(5, 0)  # unknown: ignored
    assert acc.count(5, [0]) == 3
    acc.summary(5, 64)
    acc.summary(6, 32)
    assert (acc.count(5, [0]), acc.count(6, [0]), acc.count(7, [0])) == (64, 32, 32)
