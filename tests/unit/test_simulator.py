"""The scenario simulator: deterministic, valid under the contract, and its ground truth is consistent."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.contract.decision import decode_decision
from streams.contract.envelope import decode_telemetry
from streams.sim.base import Scenario
from streams.sim.scenarios import training_fabric
from streams.sim.training import Cause, Layout, TrainingFabric, one_f_one_b
from streams.testing import run_messages


def test_one_f_one_b_order() -> None:
    order = one_f_one_b(stages=3, microbatches=4)
    assert order[2] == [("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2), ("B", 2), ("F", 3), ("B", 3)]
    assert order[0][:3] == [("F", 0), ("F", 1), ("F", 2)]  # warm-up of stages - 1 forwards
    assert all(sorted(seq) == sorted([(k, m) for k in "FB" for m in range(4)]) for seq in order)


def test_every_message_is_valid_and_every_sample_counted() -> None:
    scenario = training_fabric(2, 32, 12)
    samples, decisions = 0, []
    for kind, _, value in scenario.run():
        if kind == "telemetry":
            decoded = decode_telemetry(value)
            assert decoded.rejects == []
            samples += decoded.count()
        else:
            decision, reject = decode_decision(value)
            assert reject is None
            decisions.append(decision)
    assert samples == scenario.samples
    assert [d["action"] for d in decisions] == ["power_cap"]  # type: ignore[index]


def test_ground_truth_counterfactual_is_the_healed_run() -> None:
    scenario = training_fabric(1, 64, 30)
    list(scenario.run())
    truth = scenario.ground_truth(1)
    actual, healed = truth["step_time_s"], truth["counterfactual_step_time_s"]
    onset = truth["causes"][0]["start_step"]
    capped = truth["causes"][1]["start_step"]
    assert actual[:onset] == healed[:onset]  # nothing injected yet: the same run
    assert all(a > h * 1.05 for a, h in zip(actual[onset:], healed[onset:], strict=True))
    assert min(actual[capped:]) > max(actual[onset:capped])  # the power cap made it worse
    assert truth["causes"][1]["decision"].startswith("power-cap-")
    assert truth["causes"][0]["element"] == truth["causes"][1]["element"]


def test_healthy_scenario_has_no_causes_and_no_slowdown() -> None:
    scenario = training_fabric(1, 32, 20, healthy=True)
    list(scenario.run())
    truth = scenario.ground_truth(1)
    assert truth["causes"] == [] and truth["step_time_s"] == truth["counterfactual_step_time_s"]


@pytest.mark.parametrize(("kind", "target"), [("slow_stage", 1), ("slow_link", 2), ("imbalanced_dp", 0)])
def test_every_cause_kind_slows_the_step(kind: str, target: int) -> None:
    fabric = TrainingFabric(Layout(dp=2, pp=4, tp=2), seed=1, causes=[Cause(kind, target, 3.0, 0, 10)])
    assert fabric.simulate(3).duration > fabric.simulate(3, healed=True).duration * 1.05


def test_barrier_wait_shows_on_the_other_ranks() -> None:
    """A straggler's data-parallel peers wait for it at the all-reduce: it arrives last, so it waits least."""
    scenario = training_fabric(1, 32, 15)
    straggler = scenario.fabric.causes[0].target
    decoded = [decode_telemetry(v) for kind, _, v in scenario.run() if kind == "telemetry"]
    last_step = [d for d in decoded if d.source.startswith("trainer/")][-4:]  # one message of spans per stage
    waits: dict[str, dict[int, float]] = {}
    for decoded in last_step:
        for batch in decoded.batches:
            if batch.kind == "op":
                for r, op, group, d in zip(batch.columns["rank"], batch.columns["op"], batch.columns["group"],
                                           batch.columns["duration"], strict=True):  # fmt: skip
                    if op == "allreduce":
                        waits.setdefault(group, {})[int(r)] = float(d)
    group = next(g for g, members in waits.items() if straggler in members)
    assert len(waits[group]) == 2 and min(waits[group], key=waits[group].__getitem__) == straggler
    others = [d for r, d in waits[group].items() if r != straggler]
    assert min(others) > waits[group][straggler] + 0.01  # the peer waited a measurable time


def test_cli_writes_files(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    proc = subprocess.run([sys.executable, "-m", "streams.cli", "simulate", "--scenario", "training-fabric",
                           "--seed", "1", "--ranks", "32", "--steps", "9", "--out", str(out)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    truth = orjson.loads((out / "ground_truth.json").read_bytes())
    assert truth["steps"] == 9 and len(truth["step_time_s"]) == 9
    assert len((out / "telemetry.jsonl").read_bytes().splitlines()) > 9
    bad = subprocess.run([sys.executable, "-m", "streams.cli", "simulate", "--scenario", "training-fabric",
                          "--ranks", "30", "--out", str(out)], capture_output=True, text=True, check=False)  # fmt: skip
    assert bad.returncode == 1 and "multiple of pp*tp" in bad.stderr
    short = subprocess.run([sys.executable, "-m", "streams.cli", "simulate", "--scenario", "control-storm",
                            "--steps", "10", "--out", str(out)],
                           capture_output=True, text=True, check=False)  # fmt: skip
    assert short.returncode == 1 and "--steps 60 or more" in short.stderr and "Traceback" not in short.stderr


def test_cli_knows_every_scenario() -> None:
    from streams.cli.sim import SCENARIO_NAMES
    from streams.sim.scenarios import SCENARIOS

    assert set(SCENARIO_NAMES) == set(SCENARIOS)


@pytest.mark.parametrize("name", ["training-slow-stage", "training-slow-link", "training-imbalanced-dp"])
def test_single_cause_scenarios_slow_the_job_from_a_third_in(name: str) -> None:
    from streams.sim.scenarios import SCENARIOS

    scenario = SCENARIOS[name](1, 32, 30)
    list(scenario.run())
    truth = scenario.ground_truth(1)
    (cause,) = truth["causes"]
    assert cause["start_step"] == 10
    assert min(truth["step_time_s"][10:]) > max(truth["step_time_s"][:10]) * 1.03


def test_tp_sync_spans_are_barriers_with_their_own_group_and_increasing_seq() -> None:
    """Each tensor-parallel group (tp-dp{d}-pp{s}) numbers its tp_sync barriers 0, 1, 2, ... across steps, and
    every member of one (group, seq) ran the same microbatch and pass."""
    scenario = training_fabric(3, 32, 3)
    lay = scenario.fabric.layout
    members: dict[tuple[str, int], set[tuple[int, int, int]]] = {}
    for kind, _, value in scenario.run():
        for batch in decode_telemetry(value).batches if kind == "telemetry" else []:
            if batch.kind != "op":
                continue
            for row in batch.rows():
                if row["op"] == "tp_sync":
                    assert row["group"] == f"tp-dp{row['dp']}-pp{row['pp']}"
                    members.setdefault((row["group"], row["seq"]), set()).add(
                        (row["step"], row["microbatch"], row["rank"])
                    )
    per_group: dict[str, list[int]] = {}
    for group, seq in sorted(members):
        per_group.setdefault(group, []).append(seq)
    assert len(per_group) == lay.dp * lay.pp
    assert all(seqs == list(range(3 * 2 * lay.microbatches)) for seqs in per_group.values())
    for seen in members.values():
        assert len({(step, mb) for step, mb, _ in seen}) == 1
        assert len({rank for _, _, rank in seen}) == lay.tp


# every scenario at a small size: (ranks, steps)
SMALL = {"training": (32, 12), "inference": (24, 30), "control": (64, 60), "serving": (8, 100), "realistic": (16, 12)}


def small(name: str, seed: int = 1) -> Scenario:
    from streams.sim.scenarios import SCENARIOS

    return SCENARIOS[name](seed, *SMALL[name.split("-", maxsplit=1)[0]])


def all_names() -> list[str]:
    from streams.sim.scenarios import SCENARIOS

    return sorted(SCENARIOS)


@pytest.mark.parametrize("name", all_names())
def test_every_scenario_passes_the_contract_with_no_dead_letters(name: str) -> None:
    """Through the service's own processor (decoding, duplicates by (source, seq) and decision id,
    lateness): nothing is dead-lettered, and every sample the scenario counted arrives."""
    scenario = small(name)
    messages = list(scenario.run())
    out = run_messages([v for k, _, v in messages if k == "telemetry"],
                       decisions=[v for k, _, v in messages if k == "decisions"])  # fmt: skip
    assert out.dead_letters == []
    assert sum(n for kind, n in out.samples_by_kind.items() if kind != "decision") == scenario.samples
    assert out.samples_by_kind["decision"] == sum(1 for k, _, _ in messages if k == "decisions")


@pytest.mark.parametrize("name", all_names())
def test_every_scenario_is_deterministic_per_seed_and_has_the_common_ground_truth(name: str) -> None:
    def run(seed: int) -> tuple[str, dict[str, object]]:
        scenario = small(name, seed)
        h = hashlib.sha256()
        for _, key, value in scenario.run():
            h.update(key.encode() + value)
        return h.hexdigest(), scenario.ground_truth(seed)

    (a, truth), (b, again), (c, _) = run(4), run(4), run(5)
    assert a == b and a != c
    assert orjson.dumps(truth) == orjson.dumps(again)
    assert {"scenario", "seed", "job", "steps", "t0", "causes", "expected_findings", "step_time_s",
            "counterfactual_step_time_s"} <= set(truth)  # fmt: skip
    assert len(truth["step_time_s"]) == len(truth["counterfactual_step_time_s"]) == truth["steps"]  # type: ignore[arg-type]
    for cause in truth["causes"]:  # type: ignore[attr-defined]
        assert {"element", "kind", "start_step", "end_step", "magnitude", "decision"} <= set(cause)
        assert cause["element"].split(":")[0] in {"rank", "stage", "link", "dp", "node", "service", "replica", "spread"}
        assert 0 <= cause["start_step"] < cause["end_step"] <= truth["steps"]  # type: ignore[operator]
    healthy = name.endswith("-healthy")
    assert (truth["causes"] == []) == healthy and (truth["expected_findings"] == []) == healthy


@pytest.mark.parametrize("name", all_names())
def test_decisions_behind_causes_were_emitted(name: str) -> None:
    scenario = small(name)
    emitted = {orjson.loads(v)["id"] for k, _, v in scenario.run() if k == "decisions"}
    for cause in scenario.ground_truth(1)["causes"]:
        for key in ("decision", "restart_decision", "retry_decision", "ended_by"):
            assert cause.get(key) is None or cause[key] in emitted
