"""Training-fabric scenarios beyond one slow element: cascade, partial synchronisation loss, checkpoint
restart, and the device power and utilisation samples."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from streams.contract.envelope import decode_telemetry
from streams.sim.scenarios import training_cascade, training_fabric, training_restart, training_sync_loss
from streams.sim.training_run import TrainingScenario


def rows(scenario: TrainingScenario, kind: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for topic, _, value in scenario.run():
        if topic == "telemetry":
            out += [r for b in decode_telemetry(value).batches if b.kind == kind for r in b.rows()]
    return out


def test_cascade_lists_the_ranks_the_simulator_makes_late_by_healing_the_root() -> None:
    scenario = training_cascade(2, 64, 24)
    list(scenario.run())
    (cause,) = scenario.ground_truth(2)["causes"]
    fabric, lay, root = scenario.fabric, scenario.fabric.layout, scenario.fabric.causes[0]
    late: dict[int, int] = {}
    active = range(root.start_step, 24)
    for step in active:  # recomputed rank by rank, independently of the scenario's bookkeeping
        actual, healed = fabric.simulate(step), fabric.simulate(step, without=root)
        for r in range(lay.ranks):
            d, s = r // (lay.pp * lay.tp), (r // lay.tp) % lay.pp
            moved = abs(actual.allreduce_arrive[d, s] - healed.allreduce_arrive[d, s])
            late[r] = late.get(r, 0) + int(moved > 0.01 * healed.duration)
    expected = {f"rank:llm-pretrain/{r}" for r, n in late.items() if 2 * n >= len(active) and r != root.target}
    assert set(cause["affected"]) == expected
    assert cause["element"] == f"rank:llm-pretrain/{root.target}" and cause["element"] not in cause["affected"]
    peers = {f"rank:llm-pretrain/{root.target - root.target % lay.tp + t}" for t in range(lay.tp)}
    assert peers - {cause["element"]} <= set(cause["affected"])  # through tp_sync
    replica = root.target // (lay.pp * lay.tp)
    assert len(cause["affected"]) == lay.pp * lay.tp - 1  # the whole replica, through send/recv
    assert all(int(r.rsplit("/")[1]) // (lay.pp * lay.tp) == replica for r in cause["affected"])
    others = {f"rank:llm-pretrain/{r}" for r in range(lay.ranks) if r // (lay.pp * lay.tp) != replica}
    assert set(cause["waiting"]) == others  # the other replicas wait at the all-reduce


def test_sync_loss_shows_as_a_growing_phase_at_the_shared_all_reduce() -> None:
    scenario = training_sync_loss(3, 48, 30)
    ops = rows(scenario, "op")
    truth = scenario.ground_truth(3)
    (cause,) = truth["causes"]
    lay, onset = scenario.fabric.layout, cause["start_step"]
    lost = int(cause["element"].rsplit("/")[1])
    phase = cause["phase_offset_s"]
    assert phase[0] == 0.0 and phase[-1] > 0.1 and np.all(np.diff(phase) > 0)

    def gap(step: int) -> float:  # lost replica's arrival minus the others' at one all-reduce (group, seq)
        starts = {(r["dp"] == lost): r["start"] for r in ops
                  if r["op"] == "allreduce" and r["step"] == step and r["group"] == "dp-pp0-tp0"}  # fmt: skip
        return starts[True] - starts[False]

    assert abs(gap(onset - 1)) < 0.02
    assert gap(29) > gap(onset + 5) + 0.05
    assert abs(gap(29) - phase[-1]) < 0.05  # what the ground truth says is what the spans show
    lost_ar = [r["duration"] for r in ops if r["op"] == "allreduce" and r["step"] == 29 and r["dp"] == lost]
    assert max(lost_ar) < scenario.fabric.allreduce_s + 1e-9  # it waits for nobody
    steps = {r["step"]: r for r in rows(scenario, "step")}
    assert steps[onset - 1]["output_units"] == scenario.tokens_per_step
    assert steps[onset]["output_units"] == scenario.tokens_per_step * (lay.dp - 1) / lay.dp
    ratio = np.array(truth["step_time_s"]) / np.array(truth["counterfactual_step_time_s"])
    assert np.all(np.abs(ratio - 1) < 0.03)  # the rest's step time does not give it away
    assert cause["wasted_accel_s"] > lay.pp * lay.tp * sum(truth["step_time_s"][onset:]) * 0.99


def test_restart_reruns_steps_from_the_checkpoint_on_a_spare_node() -> None:
    scenario = training_restart(1, 32, 20)
    messages = list(scenario.run())
    truth = scenario.ground_truth(1)
    (cause,) = truth["causes"]
    failed, resumed = cause["failed_step"], cause["resumed_from_step"]
    assert resumed < failed and resumed % 2 == 0
    summaries = [r for k, _, v in messages if k == "telemetry"
                 for b in decode_telemetry(v).batches if b.kind == "step" for r in b.rows()]  # fmt: skip
    seen = [(r["step"], r["attempts"], r["status"]) for r in summaries]
    assert seen[: failed + 1] == [(s, 1, "ok") for s in range(failed)] + [(failed, 1, "failed")]
    assert seen[failed + 1 : 2 * failed - resumed + 2] == [(s, 2, "restarted") for s in range(resumed, failed + 1)]
    assert [s for s, _, _ in seen[2 * failed - resumed + 2 :]] == list(range(failed + 1, 20))
    first = {r["step"]: r for r in summaries if r["attempts"] == 1}
    assert first[failed]["duration"] < 0.7 * first[failed - 1]["duration"]
    rerun = summaries[failed + 1]
    assert rerun["start"] >= first[failed]["start"] + first[failed]["duration"] + cause["restart_delay_s"] - 1e-6
    lost = sum(first[s]["duration"] for s in range(resumed, failed + 1))
    assert abs(cause["rerun_accel_s"] - 32 * lost) < 1e-6
    assert [a["status"] for a in truth["step_attempts"]].count("restarted") == failed - resumed + 1
    decision = next(orjson.loads(v) for k, _, v in messages if k == "decisions")
    assert decision["id"] == cause["restart_decision"] and decision["layer"] == "orchestrator"
    moved = [r for k, _, v in messages if k == "telemetry" for b in decode_telemetry(v).batches
             if b.kind == "topology" and b.rows()[0]["time"] > 1_767_225_600.0 for r in b.rows()]  # fmt: skip
    ranks_on_failed = {f"rank:llm-pretrain/{r}" for r in range(32) if r // 8 == int(cause["element"][6:])}
    assert {r["src"] for r in moved if r["src"].startswith("rank:")} == ranks_on_failed
    assert {r["dst"] for r in moved if r["src"].startswith("device:")} == {cause["replacement"]}


def test_device_power_and_utilisation_every_step_and_the_cap_holds() -> None:
    scenario = training_fabric(1, 32, 12)
    metrics = rows(scenario, "metric")
    power = [m for m in metrics if m["name"] == "power_w"]
    util = [m for m in metrics if m["name"] == "util"]
    assert len(power) == len(util) == 32 * 12
    assert all(0.0 < m["value"] <= 1.0 for m in util)
    assert all(90.0 <= m["value"] <= 700.0 for m in power)
    capped_node = scenario.power_caps[0][0]
    capped_from = scenario.power_caps[0][2]
    after = [m for m in power if m["entity"].startswith(f"device:n{capped_node}/") and m["time"] > _start(scenario,
             capped_from)]  # fmt: skip
    before = [m for m in power if m["entity"].startswith(f"device:n{capped_node}/")][:8]
    assert after and max(m["value"] for m in after) <= 450.0 < max(m["value"] for m in before)
    tokens = scenario.tokens_per_step * 12
    joules = sum(m["value"] for m in power) / 12 * sum(scenario.ground_truth(1)["step_time_s"])
    assert 0 < joules / tokens < 1.0  # energy per token is computable from the samples


def _start(scenario: TrainingScenario, step: int) -> float:
    return 1_767_225_600.0 + sum(scenario.step_times[:step])
