"""The control storm: conflicting decision pairs that the simulation itself caused, an energy feedback loop
that oscillates at the period the ground truth states, preemption churn with retries, and a healthy rack
whose controllers act without working against each other."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from streams.sim.control import ControlPlane
from streams.sim.control_run import ControlScenario, control_storm

WINDOWS = 160


def run(seed: int = 1, healthy: bool = False) -> tuple[ControlScenario, dict[str, Any], dict[str, dict[str, Any]]]:
    scenario = control_storm(seed, 64, WINDOWS, healthy=healthy)
    decisions = {d["id"]: d for d in (orjson.loads(v) for k, _, v in scenario.run() if k == "decisions")}
    return scenario, scenario.ground_truth(seed), decisions


def window_of(scenario: ControlScenario, decision_id: str) -> int:
    return next(d.window for d in scenario.decisions if d.id == decision_id)


def test_conflicting_pairs_are_emitted_decisions_in_order_on_shared_nodes() -> None:
    scenario, truth, decisions = run()
    pairs = truth["conflicting_decisions"]
    kinds = {(decisions[p["first"]]["action"], decisions[p["second"]]["action"]) for p in pairs}
    assert {("power_cap", "scale_out"), ("preempt", "scale_out"), ("scale_out", "preempt")} <= kinds
    for p in pairs:
        first, second = decisions[p["first"]], decisions[p["second"]]
        assert first["time"] <= second["time"] and first["controller"] != second["controller"]
        assert p["controllers"] == [f"controller:{first['controller']}", f"controller:{second['controller']}"]
        common = set(first["targets"]) & set(second["targets"])
        assert p["shared"] == (sorted(t for t in common if t.startswith("node:")) or ["service:agent"])
        if (first["action"], second["action"]) == ("scale_out", "preempt"):  # it removed what was placed there
            assert p["shared"] == [f"node:n{scenario.plane.reserved}"]
            assert first["parameters"]["replica"] in second["targets"]


def test_a_scale_out_blamed_on_a_cap_happened_under_that_cap_and_within_target_at_full_clocks() -> None:
    scenario, truth, decisions = run()
    blamed = [p for p in truth["conflicting_decisions"] if decisions[p["first"]]["action"] == "power_cap"]
    assert blamed
    for p in blamed:
        w = window_of(scenario, p["second"])
        window = scenario.windows[w]
        serving = set(window.replicas.values())
        assert window.p99_s > scenario.plane.target_p99_s
        assert any(np.isfinite(window.caps_w[n]) for n in serving)  # a serving node was capped
        assert window_of(scenario, p["first"]) < w


def test_the_energy_loop_oscillates_at_the_stated_period() -> None:
    scenario, truth, _ = run(seed=2)
    loop = next(c for c in truth["causes"] if c["kind"] == "energy_feedback_loop")
    period = loop["period_steps"]
    assert loop["cycles"] >= 5 and truth["loop_period_s"] == period * scenario.plane.window_s
    rack = np.array(truth["rack_power_w"][loop["start_step"] : loop["end_step"]])
    rack -= rack.mean()
    corr = [float(np.dot(rack[:-lag], rack[lag:]) / np.dot(rack, rack)) for lag in range(2, 20)]
    strongest = 2 + int(np.argmax(corr))
    assert abs(strongest - period) <= 1 and max(corr) > 0.3
    replicas = np.array(truth["replicas"][loop["start_step"] : loop["end_step"]])
    assert replicas.max() - replicas.min() >= 2
    calm = np.array(truth["counterfactual_rack_power_w"][loop["start_step"] : loop["end_step"]])
    assert calm.std() < 0.5 * np.array(truth["rack_power_w"][loop["start_step"] : loop["end_step"]]).std()


def test_preemption_churn_until_the_taint_with_retries() -> None:
    scenario, truth, decisions = run()
    churn = next(c for c in truth["causes"] if c["kind"] == "preemption_churn")
    node = f"node:n{scenario.plane.reserved}"
    preempts = [d for d in decisions.values() if d["action"] == "preempt"]
    assert len(preempts) >= 5 and all(d["targets"][0] == node for d in preempts)
    taint = decisions[churn["ended_by"]]
    assert taint["layer"] == "policy" and all(d["time"] <= taint["time"] for d in preempts)
    assert decisions[churn["retry_decision"]]["parameters"]["max_attempts"] == 3
    placed_there = [d for d in decisions.values() if d["action"] == "scale_out" and node in d["targets"]]
    assert len(placed_there) >= len(preempts) - 1  # the autoscaler keeps refilling the node
    during = range(churn["start_step"], churn["end_step"])
    assert churn["retries"] > 0 and sum(scenario.windows[w].retries for w in during) == churn["retries"]


def test_healthy_rack_controllers_act_but_not_against_each_other() -> None:
    scenario, truth, decisions = run(healthy=True)
    assert truth["conflicting_decisions"] == [] and truth["causes"] == []
    actions = {d["action"] for d in decisions.values()}
    assert {"scale_out", "power_cap", "preempt"} <= actions
    for d in decisions.values():
        if d["action"] == "power_cap":
            w = next(x.window for x in scenario.decisions if x.id == d["id"])
            serving = {f"node:n{n}" for n in scenario.windows[w].replicas.values()}
            assert not set(d["targets"]) & serving
    storm, _, _ = run()
    assert [w.fresh for w in storm.windows] == [w.fresh for w in scenario.windows]  # same load, other controllers


def test_the_scheduler_alone_does_not_churn_once_the_node_is_tainted_from_the_start() -> None:
    plane = ControlPlane(3, 8, surge_at=5, reserve_at=10, reserved=2, taint_at=0)
    windows, decisions = plane.run(60)
    assert sum(1 for d in decisions if d.action == "preempt") == 1
    assert all(2 not in w.replicas.values() for w in windows[11:])
