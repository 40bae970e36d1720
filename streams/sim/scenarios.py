"""Named scenarios: a fabric, its injected causes and control decisions, and the ground truth."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from streams.contract.schema import DECISION_SCHEMA, TELEMETRY_SCHEMA
from streams.sim.emit import T0, node_of, step_messages, topology
from streams.sim.training import Cause, Layout, TrainingFabric

ELEMENT = {
    "straggler_rank": "rank:{job}/{target}",
    "slow_stage": "stage:{job}/{target}",
    "slow_link": "link:{job}/stage{target}-stage{next}",
    "imbalanced_dp": "dp:{job}/{target}",
}


@dataclass
class Scenario:
    name: str
    fabric: TrainingFabric
    steps: int
    job: str = "llm-pretrain"
    decisions: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (step, decision fields)
    decision_causes: dict[str, Cause] = field(default_factory=dict)  # decision id -> what it did
    expected_findings: list[str] = field(default_factory=list)

    @property
    def tokens_per_step(self) -> float:
        return float(self.fabric.layout.dp * self.fabric.layout.microbatches * 8192)

    def element(self, cause: Cause) -> str:
        return ELEMENT[cause.kind].format(job=self.job, target=cause.target, next=cause.target + 1)

    def run(self) -> Iterator[tuple[str, str, bytes]]:
        """(topic kind 'telemetry'|'decisions', key, value) in event-time order; fills the step times."""
        self.step_times: list[float] = []
        self.counterfactual: list[float] = []
        self.samples = self.fabric.layout.ranks * 3 + self.fabric.layout.ranks // 8  # the topology
        topo = {"schema": TELEMETRY_SCHEMA, "source": f"topology/{self.job}", "seq": 0,
                "columns": [topology(self.fabric, self.job)]}  # fmt: skip
        yield "telemetry", self.job, orjson.dumps(topo)
        t0 = T0
        due = dict(self.decisions)
        for step in range(self.steps):
            if step in due:
                yield "decisions", self.job, orjson.dumps({"schema": DECISION_SCHEMA, "time": t0, **due[step]})
            times = self.fabric.simulate(step)
            self.step_times.append(times.duration)
            self.counterfactual.append(self.fabric.simulate(step, healed=True).duration)
            for key, value, n in step_messages(self.fabric, self.job, step, t0, times, self.tokens_per_step):
                self.samples += n
                yield "telemetry", key, value
            t0 += times.duration

    def ground_truth(self, seed: int) -> dict[str, Any]:
        lay = self.fabric.layout
        by_decision = {id(c): d for d, c in self.decision_causes.items()}
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0,
            "layout": {"ranks": lay.ranks, "dp": lay.dp, "pp": lay.pp, "tp": lay.tp, "microbatches": lay.microbatches},
            "causes": [
                {"element": self.element(c), "kind": c.kind, "start_step": c.start_step, "end_step": c.end_step,
                 "magnitude": c.magnitude, "decision": by_decision.get(id(c))}
                for c in self.fabric.causes
            ],
            "expected_findings": self.expected_findings,
            "step_time_s": self.step_times,
            "counterfactual_step_time_s": self.counterfactual,
        }  # fmt: skip


def training_fabric(seed: int, ranks: int, steps: int, healthy: bool = False) -> Scenario:
    """The distributed-training card: a straggler rank, then a power cap on its node that makes it worse."""
    layout = Layout.for_ranks(ranks)
    fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.0 if healthy else 0.01)
    scenario = Scenario("training-fabric-healthy" if healthy else "training-fabric", fabric, steps)
    if healthy:
        return scenario
    straggler = (seed * 7919 + 5) % layout.ranks
    onset, capped = steps // 3, (2 * steps) // 3
    fabric.causes.append(Cause("straggler_rank", straggler, 1.3, onset, steps))
    cap = Cause("straggler_rank", straggler, 1.25, capped, steps)  # the power cap slows that GPU further
    fabric.causes.append(cap)
    decision_id = f"power-cap-{node_of(straggler)[5:]}-{capped}"
    scenario.decisions.append((capped, {
        "id": decision_id, "controller": "power-manager/rack0", "layer": "power", "action": "power_cap",
        "targets": [node_of(straggler)], "parameters": {"cap_w": 450}, "reason": "rack above its power budget",
        "expected_effect": {"metric": "power_w", "direction": "down"}, "job": scenario.job}))  # fmt: skip
    scenario.decision_causes[decision_id] = cap
    scenario.expected_findings = [
        "step_time_drift", "straggler", "straggler_cascade", "control_regression", "critical_path_shift"
    ]  # fmt: skip
    return scenario


def single_cause(kind: str, magnitude: float) -> Callable[[int, int, int], Scenario]:
    """A fabric with one injected cause of ``kind`` from a third of the way in (target chosen by seed)."""

    def build(seed: int, ranks: int, steps: int) -> Scenario:
        layout = Layout.for_ranks(ranks)
        fabric = TrainingFabric(layout, seed=seed, thermal_drift=0.01)
        scenario = Scenario(f"training-{kind.replace('_', '-')}", fabric, steps)
        span = {"slow_stage": layout.pp, "slow_link": layout.pp - 1, "imbalanced_dp": layout.dp}[kind]
        fabric.causes.append(Cause(kind, (seed * 7919 + 1) % span, magnitude, steps // 3, steps))
        # a slow replica moves the critical path to another replica, not to another stage or kind of work
        shift = [] if kind == "imbalanced_dp" else ["critical_path_shift"]
        scenario.expected_findings = ["step_time_drift", *shift]
        return scenario

    return build


SCENARIOS: dict[str, Callable[[int, int, int], Scenario]] = {
    "training-fabric": training_fabric,
    "training-fabric-healthy": lambda seed, ranks, steps: training_fabric(seed, ranks, steps, healthy=True),
    "training-slow-stage": single_cause("slow_stage", 1.3),
    "training-slow-link": single_cause("slow_link", 4.0),
    "training-imbalanced-dp": single_cause("imbalanced_dp", 1.3),
}
