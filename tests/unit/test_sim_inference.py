"""The inference pipeline under an SLA: tail inflation without a median shift, and a retry storm that
outlives its trigger because of the retry policy (not because of the trigger alone)."""

from __future__ import annotations

from dataclasses import replace
from statistics import mean
from typing import Any

import orjson

from streams.contract.envelope import decode_telemetry
from streams.sim.inference import ServingPipeline, Slowdown
from streams.sim.inference_run import InferenceScenario, inference_sla

WINDOWS = 90


def run(seed: int = 1, healthy: bool = False) -> tuple[InferenceScenario, dict[str, Any], list[dict[str, Any]]]:
    scenario = inference_sla(seed, 48, WINDOWS, healthy=healthy)
    samples = [r for k, _, v in scenario.run() if k == "telemetry" for b in decode_telemetry(v).batches
               for r in b.rows()]  # fmt: skip
    return scenario, scenario.ground_truth(seed), samples


def by_kind(truth: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in truth["causes"] if c["kind"] == kind)


def test_a_slow_replica_inflates_the_p99_not_the_p50() -> None:
    _, truth, _ = run()
    slow = by_kind(truth, "slow_replica")
    before = range(0, slow["start_step"])
    during = range(slow["start_step"], by_kind(truth, "capacity_drop")["start_step"])
    p50, p99 = truth["latency_p50_s"], truth["latency_p99_s"]
    p50_up = mean(p50[w] for w in during) / mean(p50[w] for w in before) - 1
    p99_up = mean(p99[w] for w in during) / mean(p99[w] for w in before) - 1
    assert p99_up > 0.15 and p50_up < 0.07 and p99_up > 3 * p50_up  # 1 request in 8 is slower
    assert mean(p99[w] for w in during) > truth["sla"]["latency_p99_s"] > max(truth["counterfactual_latency_p99_s"])


def test_the_retry_storm_persists_after_its_trigger_until_the_retry_budget() -> None:
    scenario, truth, samples = run()
    trigger, storm = by_kind(truth, "capacity_drop"), by_kind(truth, "retry_storm")
    budget = next(w for w, d in scenario.decisions if d["action"] == "retry_budget")
    assert storm["trigger"]["end_step"] == trigger["end_step"] < budget
    assert storm["persists_after_trigger"] and storm["metastable"]
    good, fresh = truth["goodput"], [s.fresh for s in scenario.stats]
    assert all(good[w] < 0.5 * fresh[w] for w in range(trigger["end_step"], budget))  # the trigger is gone
    assert storm["end_step"] > budget and all(good[w] >= 0.9 * fresh[w] for w in range(storm["end_step"], WINDOWS))
    assert storm["ended_by"] == f"retry-budget-chat-{budget}"
    assert storm["decision"] == next(d["id"] for _, d in scenario.decisions if d["action"] == "retry_policy")
    assert storm["magnitude"] > 3  # attempts per fresh request at the peak
    steps = {r["step"]: r for r in samples if "output_units" in r}
    assert steps[budget - 1]["status"] == "timeout" and steps[budget - 1]["attempts"] >= 3
    assert steps[0]["status"] == "ok" and steps[0]["attempts"] == 1
    assert all(g >= 0.99 * f for g, f in zip(truth["counterfactual_goodput"], fresh, strict=True))


def test_the_same_trigger_without_the_retry_policy_change_drains() -> None:
    """The feedback loop is the retries: with 2 attempts instead of 4 the backlog drains after the trigger."""
    scenario = inference_sla(1, 48, WINDOWS)
    trigger = next(s for s in scenario.pipeline.slowdowns if s.kind == "capacity_drop")
    for policy, recovers in (({}, True), ({scenario.decisions[0][0]: 4}, False)):
        stats = replace(scenario.pipeline, policy=policy).run(WINDOWS)
        after = stats[trigger.end + 15 :]
        assert all(s.good >= 0.9 * s.fresh for s in after) == recovers


def test_the_pipeline_alone_is_metastable_only_above_its_retry_threshold() -> None:
    """Load 0.4 of capacity: 4 attempts (1.6× capacity if all fail) sustain a storm, 2 attempts do not."""
    for attempts, sustained in ((2, False), (4, True)):
        pipe = ServingPipeline(7, prefill=3, decode=8, max_attempts=attempts,
                               slowdowns=[Slowdown("capacity_drop", 3.0, 10, 20)])  # fmt: skip
        stats = pipe.run(80)
        assert all(s.good < 0.5 * s.fresh for s in stats[60:]) == sustained


def test_healthy_service_meets_its_sla_with_no_retries() -> None:
    scenario, truth, samples = run(healthy=True)
    assert truth["causes"] == [] and scenario.decisions == []
    assert max(truth["latency_p99_s"]) < truth["sla"]["latency_p99_s"]
    retries = [r["value"] for r in samples if r.get("name") == "retries"]
    requests = [r["value"] for r in samples if r.get("name") == "requests"]
    assert len(retries) == WINDOWS and sum(retries) < 0.001 * sum(requests)


def test_every_stage_and_replica_is_measured_every_window() -> None:
    scenario, _, samples = run()
    names = {(r["entity"], r["name"]) for r in samples if "entity" in r}
    pipe = scenario.pipeline
    for stage in ("router", "prefill", "decode"):
        assert {(f"service:chat-{stage}", "latency_p50_s"), (f"service:chat-{stage}", "latency_p99_s")} <= names
    for i in range(pipe.decode):
        assert {(f"replica:chat-decode/{i}", "util"), (f"replica:chat-decode/{i}", "queue_depth")} <= names
    for name in ("requests", "attempts", "retries", "timeouts", "goodput", "wasted", "latency_p99_s"):
        assert (("service:chat", name)) in names
    topology = {(r["src"], r["relation"]) for r in samples if "relation" in r}
    assert (f"replica:chat-decode/{pipe.decode - 1}", "placed_on") in topology
    assert orjson.dumps(scenario.ground_truth(1))  # plain JSON (no numpy scalars)
