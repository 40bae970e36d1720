"""A control-storm scenario: the control plane (``streams.sim.control``) as telemetry, decisions and ground
truth. ``steps`` are control windows of 10 s; ``ranks`` are the rack's accelerators, 8 per node (4 to 32
nodes; the last node runs a batch job).

Per window, one message (source ``rack-exporter/r0``) holds, at the window's end:

- ``metric`` samples: ``power_w`` of every ``node:n<k>`` and of ``rack:r0``; of ``service:<job>``:
  ``replicas``, ``latency_p50_s``, ``latency_p99_s``, ``requests`` (fresh), ``attempts``, ``retries``,
  ``failed``, ``goodput`` (requests/s) and ``util`` (mean over replicas);
- a ``step`` sample (``streams.sim.base.window_summary``): ``job`` = the service, ``step`` = window
  index, ``duration`` = the window, ``output_units`` = requests answered before the timeout,
  ``attempts``, ``status``, ``accelerators`` = replicas × 2.

Topology: each node ``placed_on`` ``rack:r0`` and ``connected_to`` its leaf switch, each initial replica
``placed_on`` its node; a replica a ``scale_out`` adds is placed (a topology sample) at the decision's time.
Decisions as the controllers take them (``streams.sim.control``), at the end of the window they looked at.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from streams.sim.base import T0, Message, cause, decision, envelope, metric_rows, window_summary
from streams.sim.control import GPUS_PER_REPLICA, ControlPlane, Decision, Window

NODE_BUDGET_W = 1937.5  # the rack's power budget per node in the storm (15.5 kW for 8 nodes)


@dataclass
class ControlScenario:
    name: str
    plane: ControlPlane
    steps: int
    expected_findings: list[str] = field(default_factory=list)
    samples: int = 0

    @property
    def job(self) -> str:
        return self.plane.job

    def run(self) -> Iterator[Message]:
        p = self.plane
        self.windows, self.decisions = p.run(self.steps)
        calm = replace(p, budget_w=float("inf"), reserve_at=-1, taint_at=-1, retry_tuner=False)
        self.healed, _ = calm.run(self.steps)
        topo = self._topology(self.windows[0].replicas if self.windows else {}, T0)
        self.samples = topo["n"]
        yield "telemetry", self.job, envelope("topology/rack0", 0, [topo])
        by_window: dict[int, list[Decision]] = {}
        for d in self.decisions:
            by_window.setdefault(d.window, []).append(d)
        placements = 1
        for w, win in enumerate(self.windows):
            end = T0 + (w + 1) * p.window_s
            summary = window_summary(self.job, w, end - p.window_s, p.window_s, win.fresh, win.offered, win.good,
                                     win.offered - win.good, len(win.replicas) * GPUS_PER_REPLICA)  # fmt: skip
            batches = [self._metrics(win, end), summary]
            self.samples += sum(b["n"] for b in batches)
            yield "telemetry", self.job, envelope("rack-exporter/r0", w, batches)
            for d in by_window.get(w, []):
                yield "decisions", self.job, decision(end, id=d.id, controller=d.controller, layer=d.layer,
                                                      action=d.action, targets=d.targets, parameters=d.parameters,
                                                      reason=d.reason, expected_effect=d.expected_effect,
                                                      job=self.job)  # fmt: skip
                if d.action == "scale_out":
                    rid = int(d.parameters["replica"].rsplit("/", 1)[1])
                    moved = self._topology({rid: int(d.targets[1][6:])}, end, racks=False)
                    self.samples += moved["n"]
                    yield "telemetry", self.job, envelope("topology/rack0", placements, [moved])
                    placements += 1

    def _topology(self, replicas: dict[int, int], time: float, racks: bool = True) -> dict[str, Any]:
        nodes = range(self.plane.nodes) if racks else range(0)
        src = [f"replica:{self.job}/{i}" for i in replicas] + [f"node:n{n}" for n in nodes] * 2
        dst = ([f"node:n{n}" for n in replicas.values()] + ["rack:r0"] * len(nodes)
               + [f"switch:leaf{n // 4}" for n in nodes])  # fmt: skip
        relation = ["placed_on"] * (len(replicas) + len(nodes)) + ["connected_to"] * len(nodes)
        return {"kind": "topology", "n": len(src), "data": {"relation": relation, "src": src, "dst": dst,
                                                            "time": time, "job": self.job}}  # fmt: skip

    def _metrics(self, win: Window, time: float) -> dict[str, Any]:
        svc = f"service:{self.job}"
        rows = [(f"node:n{n}", "power_w", float(w), "W") for n, w in enumerate(win.node_power_w.tolist())]
        rows += [("rack:r0", "power_w", float(win.node_power_w.sum()), "W"),
                 (svc, "replicas", float(len(win.replicas)), "1"), (svc, "latency_p50_s", win.p50_s, "s"),
                 (svc, "latency_p99_s", win.p99_s, "s"), (svc, "requests", win.fresh, "1"),
                 (svc, "attempts", win.offered, "1"), (svc, "retries", win.retries, "1"),
                 (svc, "failed", win.failed, "1"), (svc, "goodput", win.good / self.plane.window_s, "1/s"),
                 (svc, "util", win.util, "1")]  # fmt: skip
        return metric_rows(rows, time, self.job)

    def ground_truth(self, seed: int) -> dict[str, Any]:
        p, window = self.plane, self.plane.window_s
        by_id = {d.id: d for d in self.decisions}
        pairs = [{"first": d.caused_by, "second": d.id,
                  "controllers": [f"controller:{by_id[d.caused_by].controller}", f"controller:{d.controller}"],
                  "shared": self._shared(by_id[d.caused_by], d)} for d in self.decisions if d.caused_by]  # fmt: skip
        causes = [c for c in (self._energy_loop(pairs), self._churn(pairs)) if c is not None]
        energy = [float(w.node_power_w.sum()) * window for w in self.windows]
        energy_healed = [float(w.node_power_w.sum()) * window for w in self.healed]
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0, "window_s": window,
            "rack": {"nodes": p.nodes, "batch_node": f"node:n{p.service_nodes}", "budget_w": p.budget_w,
                     "target_p99_s": p.target_p99_s},
            "causes": causes,
            "expected_findings": self.expected_findings,
            "conflicting_decisions": pairs,
            "loop_period_s": next((c["period_s"] for c in causes if c["kind"] == "energy_feedback_loop"), None),
            "step_time_s": [window] * self.steps,
            "counterfactual_step_time_s": [window] * self.steps,
            "latency_p99_s": [w.p99_s for w in self.windows],
            "replicas": [len(w.replicas) for w in self.windows],
            "rack_power_w": [float(w.node_power_w.sum()) for w in self.windows],
            "goodput": [w.good for w in self.windows],
            "energy_j": sum(energy),
            "counterfactual_latency_p99_s": [w.p99_s for w in self.healed],
            "counterfactual_replicas": [len(w.replicas) for w in self.healed],
            "counterfactual_rack_power_w": [float(w.node_power_w.sum()) for w in self.healed],
            "counterfactual_goodput": [w.good for w in self.healed],
            "counterfactual_energy_j": sum(energy_healed),
        }  # fmt: skip

    def _shared(self, first: Decision, second: Decision) -> list[str]:
        """What both decisions act on: their common nodes, else the service (its replicas or its latency)."""
        nodes = sorted({t for t in first.targets if t.startswith("node:")} & set(second.targets))
        return nodes or [f"service:{self.job}"]

    def _energy_loop(self, pairs: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Autoscaler against power manager: the pairs between them, and the period of the power cycle
        (median windows between caps that follow a lifted cap)."""
        loop = {f"controller:hpa/{self.job}", "controller:power-manager/rack0"}
        ours = [pr for pr in pairs if set(pr["controllers"]) == loop]
        if not ours:
            return None
        at = {d.id: d.window for d in self.decisions}
        power = [d for d in self.decisions if d.layer == "power"]
        starts = [d.window for i, d in enumerate(power)
                  if d.action == "power_cap" and (i == 0 or power[i - 1].action == "power_uncap")]  # fmt: skip
        period = float(statistics.median(np.diff(starts).tolist())) if len(starts) > 2 else None
        first = min(at[pr["first"]] for pr in ours)
        last = max(at[pr["second"]] for pr in ours)
        rack = [float(w.node_power_w.sum()) for w in self.windows[first : last + 1]]
        nodes = sorted({t for d in self.decisions if d.id in {x for pr in ours for x in (pr["first"], pr["second"])}
                        for t in d.targets if t.startswith("node:")}, key=lambda n: int(n[6:]))  # fmt: skip
        return cause(
            f"service:{self.job}", "energy_feedback_loop", first, last + 1, max(rack) - min(rack),
            min(ours, key=lambda pr: at[pr["first"]])["first"],
            controllers=sorted(loop), nodes=nodes,
            conflicts=[[pr["first"], pr["second"]] for pr in ours], cycles=len(starts),
            period_steps=period, period_s=None if period is None else period * self.plane.window_s,
        )  # fmt: skip

    def _churn(self, pairs: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Scheduler against autoscaler on the reserved node, with the retry tuner amplifying the failures."""
        ours = [pr for pr in pairs if "controller:k8s-scheduler" in pr["controllers"]]
        preempts = [d for d in self.decisions if d.action == "preempt" and len(d.targets) > 1
                    and d.targets[1].startswith("replica:")]  # fmt: skip
        if not ours or not preempts:
            return None
        retry = next((d.id for d in self.decisions if d.layer == "retry"), None)
        taint = next((d.id for d in self.decisions if d.action == "taint"), None)
        first, last = preempts[0].window + 1, preempts[-1].window + 1  # a preemption acts on the next window
        return cause(
            f"node:n{self.plane.reserved}", "preemption_churn", first, last + 1, len(preempts), preempts[0].id,
            controllers=["controller:k8s-scheduler", f"controller:hpa/{self.job}"],
            conflicts=[[pr["first"], pr["second"]] for pr in ours], retry_decision=retry, ended_by=taint,
            retries=float(sum(w.retries for w in self.windows[first : last + 1])),
        )  # fmt: skip


def control_storm(seed: int, ranks: int, steps: int, healthy: bool = False) -> ControlScenario:
    """An autoscaler and a power manager on the same nodes (a surge at a tenth in; the power manager's caps
    raise latency, the autoscaler's replicas raise power: an energy feedback loop that oscillates), and
    from 55% in a scheduler that empties a reserved service node while the autoscaler keeps placing
    replicas there, preempted requests retried (a retry tuner raises attempts) until a policy gate taints
    the node at 80%. Healthy: the same surge, budget and controllers, but the power manager caps only nodes
    that serve nothing (the batch node) and the scheduler reserves the batch node: they act, but not
    against each other."""
    nodes = ranks // 8
    if not 4 <= nodes <= 32:
        raise ValueError("control scenarios need --ranks between 32 and 256 (one rack of 4 to 32 nodes of 8)")
    if steps < 60:
        raise ValueError("control scenarios need --steps 60 or more (control windows of 10 s)")
    service = nodes - 1
    reserved = service if healthy else (seed * 7919 + 2) % service
    plane = ControlPlane(
        seed, nodes, surge_at=steps // 10, budget_w=NODE_BUDGET_W * nodes, spare_service=healthy,
        reserve_at=(55 * steps) // 100, reserved=reserved, taint_at=-1 if healthy else (8 * steps) // 10,
        retry_tuner=not healthy,
    )  # fmt: skip
    scenario = ControlScenario("control-storm-healthy" if healthy else "control-storm", plane, steps)
    if not healthy:
        scenario.expected_findings = ["control_conflict", "energy_feedback_loop"]
    return scenario
