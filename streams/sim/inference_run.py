"""An inference scenario: the serving pipeline (``streams.sim.inference``) as telemetry, decisions and ground
truth. ``steps`` are time windows of ``window_s``; ``ranks`` are accelerators, 4 per replica, a third of
the replicas on prefill and the rest on decode.

Per window, one message (source ``gateway/<job>``) holds, at the window's end:

- a ``step`` sample (``streams.sim.base.window_summary``): ``job`` = the service, ``step`` = window
  index, ``start`` = window start, ``duration`` = the window, ``output_units`` = requests answered before
  the client timeout (goodput), ``attempts`` = offered attempts per fresh request, ``status``,
  ``accelerators``;
- ``metric`` samples of ``service:<job>``: ``latency_p50_s``, ``latency_p99_s`` (end to end),
  ``requests`` (fresh), ``attempts``, ``retries``, ``timeouts``, ``failed`` (out of attempts), ``goodput``
  (requests/s), ``wasted`` (served after the client gave up); of each stage ``service:<job>-router``,
  ``-prefill``, ``-decode``: ``latency_p50_s``, ``latency_p99_s``, and ``queue_depth`` for prefill and
  decode; of each replica ``replica:<job>-prefill/<i>``, ``replica:<job>-decode/<i>``: ``util``,
  ``queue_depth``.

Topology once: each replica ``placed_on`` its node (2 replicas per node) and ``member_of`` its stage.
Decisions of the ``retry`` layer (``retry_policy``, ``retry_budget``) change the clients' ``max_attempts``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from streams.sim.base import T0, Message, cause, decision, envelope, metric_rows, window_summary
from streams.sim.inference import ServingPipeline, Slowdown, Stats

GPUS_PER_REPLICA = 4
STAGES = ("prefill", "decode")


@dataclass
class InferenceScenario:
    name: str
    pipeline: ServingPipeline
    steps: int
    job: str = "chat"
    sla_p99_s: float = 2.5
    decisions: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # (window, decision fields)
    expected_findings: list[str] = field(default_factory=list)
    samples: int = 0

    @property
    def accelerators(self) -> int:
        return (self.pipeline.prefill + self.pipeline.decode) * GPUS_PER_REPLICA

    def run(self) -> Iterator[Message]:
        pipe, job = self.pipeline, self.job
        self.stats = pipe.run(self.steps)
        self.healed = pipe.run(self.steps, healed=True)
        topo = self._topology()
        self.samples = topo["n"]
        yield "telemetry", job, envelope(f"topology/{job}", 0, [topo])
        due = dict(self.decisions)
        for w, st in enumerate(self.stats):
            start = T0 + w * pipe.window_s
            if w in due:
                yield "decisions", job, decision(start, **due[w])
            summary = window_summary(job, w, start, pipe.window_s, st.fresh, st.offered, st.good, st.timeouts,
                                     self.accelerators)  # fmt: skip
            batches = [self._metrics(st, start + pipe.window_s), summary]
            self.samples += sum(b["n"] for b in batches)
            yield "telemetry", job, envelope(f"gateway/{job}", w, batches)

    def _topology(self) -> dict[str, Any]:
        replicas = [f"replica:{self.job}-{stage}/{i}" for stage in STAGES
                    for i in range(getattr(self.pipeline, stage))]  # fmt: skip
        nodes = [f"node:n{i // 2}" for i in range(len(replicas))]
        stages = [r.split("/")[0].replace("replica:", "service:") for r in replicas]
        return {"kind": "topology", "n": 2 * len(replicas), "data": {
            "relation": ["placed_on"] * len(replicas) + ["member_of"] * len(replicas),
            "src": replicas + replicas, "dst": nodes + stages, "time": T0, "job": self.job}}  # fmt: skip

    def _metrics(self, st: Stats, time: float) -> dict[str, Any]:
        svc = f"service:{self.job}"
        rows = [(svc, "latency_p50_s", st.latency["e2e"][0], "s"), (svc, "latency_p99_s", st.latency["e2e"][1], "s"),
                (svc, "requests", st.fresh, "1"), (svc, "attempts", st.offered, "1"), (svc, "retries", st.retries, "1"),
                (svc, "timeouts", st.timeouts, "1"), (svc, "failed", st.failed, "1"),
                (svc, "goodput", st.good / self.pipeline.window_s, "1/s"), (svc, "wasted", st.wasted, "1")]  # fmt: skip
        for stage in ("router", *STAGES):
            entity = f"{svc}-{stage}"
            rows += [(entity, "latency_p50_s", st.latency[stage][0], "s"),
                     (entity, "latency_p99_s", st.latency[stage][1], "s")]  # fmt: skip
        for stage in STAGES:
            rows.append((f"{svc}-{stage}", "queue_depth", float(st.backlog[stage].sum()), "1"))
            for i, (util, depth) in enumerate(zip(st.util[stage].tolist(), st.backlog[stage].tolist(), strict=True)):
                replica = f"replica:{self.job}-{stage}/{i}"
                rows += [(replica, "util", util, "1"), (replica, "queue_depth", depth, "1")]
        return metric_rows(rows, time, self.job)

    def ground_truth(self, seed: int) -> dict[str, Any]:
        pipe = self.pipeline
        causes = [self._slowdown(s) for s in pipe.slowdowns]
        storm = self._storm()
        if storm is not None:
            causes.append(storm)
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0,
            "window_s": pipe.window_s,
            "sla": {"latency_p99_s": self.sla_p99_s, "timeout_s": pipe.timeout_s},
            "service": {"prefill_replicas": pipe.prefill, "decode_replicas": pipe.decode,
                        "accelerators": self.accelerators, "max_attempts": pipe.max_attempts},
            "causes": sorted(causes, key=lambda c: (c["start_step"], c["kind"])),
            "expected_findings": self.expected_findings,
            "step_time_s": [pipe.window_s] * self.steps,
            "counterfactual_step_time_s": [pipe.window_s] * self.steps,
            "latency_p50_s": [s.latency["e2e"][0] for s in self.stats],
            "latency_p99_s": [s.latency["e2e"][1] for s in self.stats],
            "goodput": [s.good for s in self.stats],
            "counterfactual_latency_p50_s": [s.latency["e2e"][0] for s in self.healed],
            "counterfactual_latency_p99_s": [s.latency["e2e"][1] for s in self.healed],
            "counterfactual_goodput": [s.good for s in self.healed],
        }  # fmt: skip

    def _slowdown(self, s: Slowdown) -> dict[str, Any]:
        element = (f"replica:{self.job}-decode/{s.replica}" if s.kind == "slow_replica"
                   else f"service:{self.job}-decode")  # fmt: skip
        window = self.pipeline.window_s
        return cause(element, s.kind, s.start, min(s.end, self.steps), s.magnitude,
                     start_time=T0 + s.start * window, end_time=T0 + min(s.end, self.steps) * window)  # fmt: skip

    def _storm(self) -> dict[str, Any] | None:
        """The retry storm, measured on the run: from the first window at or after the trigger where goodput
        falls under half the fresh requests, to the first window from which it stays above 90% of them."""
        trigger = next((s for s in self.pipeline.slowdowns if s.kind == "capacity_drop"), None)
        if trigger is None:
            return None
        st = self.stats
        collapsed = [w for w in range(trigger.start, self.steps) if st[w].good < 0.5 * st[w].fresh]
        if not collapsed:
            return None
        start = collapsed[0]
        end = next((w for w in range(start, self.steps)
                    if all(s.good >= 0.9 * s.fresh for s in st[w:])), self.steps)  # fmt: skip
        ended_by = [d["id"] for w, d in self.decisions if d["action"] == "retry_budget" and w <= end]
        enabled_by = [d["id"] for w, d in self.decisions if d["action"] == "retry_policy" and w <= start]
        # metastable: left alone (no decision after the trigger), the storm lasts to the end of the run
        alone = replace(self.pipeline, policy={w: a for w, a in self.pipeline.policy.items() if w <= trigger.start})
        left = alone.run(self.steps)[trigger.end :]
        window = self.pipeline.window_s
        return cause(
            f"service:{self.job}", "retry_storm", start, end, float(max(s.offered / s.fresh for s in st[start:end])),
            enabled_by[-1] if enabled_by else None, start_time=T0 + start * window, end_time=T0 + end * window,
            trigger={"element": f"service:{self.job}-decode", "kind": trigger.kind, "start_step": trigger.start,
                     "end_step": trigger.end},
            persists_after_trigger=end > trigger.end, persisted_steps=max(0, end - trigger.end),
            metastable=bool(left) and all(s.good < 0.5 * s.fresh for s in left[-max(1, len(left) // 4) :]),
            ended_by=ended_by[-1] if ended_by else None,
            retries=float(sum(s.retries for s in st[start:end])),
            wasted_requests=float(sum(s.wasted for s in st[start:end])),
        )  # fmt: skip


def inference_sla(seed: int, ranks: int, steps: int, healthy: bool = False) -> InferenceScenario:
    """Router → prefill → decode under a p99 SLA. From a sixth in, one decode replica serves 2× slower (the
    p99 inflates, the p50 does not move); at a quarter, a retry tuner raises the clients' attempts from 2
    to 4 (a ``retry_policy`` decision); at a third, every decode replica is 3× slower for a few windows (the
    trigger); the retry storm it starts outlives it until a ``retry_budget`` decision at three quarters
    cuts attempts to 1. Healthy: the same service and load, nothing injected, no decisions."""
    replicas = ranks // GPUS_PER_REPLICA
    if replicas < 3:
        raise ValueError("inference scenarios need --ranks 12 or more (4 accelerators per replica, 3 replicas)")
    if steps < 24:
        raise ValueError("inference scenarios need --steps 24 or more (windows of 1 s)")
    prefill = max(1, replicas // 3)
    pipe = ServingPipeline(seed, prefill=prefill, decode=replicas - prefill)
    scenario = InferenceScenario("inference-sla-healthy" if healthy else "inference-sla", pipe, steps)
    if healthy:
        return scenario
    tail, raised, trigger, budget = steps // 6, steps // 4, steps // 3, (3 * steps) // 4
    pipe.slowdowns += [Slowdown("slow_replica", 2.0, tail, steps, replica=(seed * 7919 + 6) % pipe.decode),
                       Slowdown("capacity_drop", 3.0, trigger, trigger + max(6, steps // 30))]  # fmt: skip
    pipe.policy = {raised: 4, budget: 1}
    svc = f"service:{scenario.job}"
    scenario.decisions = [
        (raised, {"id": f"retry-policy-{scenario.job}-{raised}", "controller": f"retry-tuner/{scenario.job}",
                  "layer": "retry", "action": "retry_policy", "targets": [svc],
                  "parameters": {"max_attempts": 4, "previous_max_attempts": pipe.max_attempts},
                  "reason": "p99 above the SLA: allow more attempts to keep the success rate up",
                  "expected_effect": {"metric": "goodput", "direction": "up"}, "job": scenario.job}),
        (budget, {"id": f"retry-budget-{scenario.job}-{budget}", "controller": f"sre/{scenario.job}",
                  "layer": "retry", "action": "retry_budget", "targets": [svc],
                  "parameters": {"max_attempts": 1, "previous_max_attempts": 4},
                  "reason": "retry storm: attempts far above fresh requests, goodput near zero",
                  "expected_effect": {"metric": "retries", "direction": "down"}, "job": scenario.job}),
    ]  # fmt: skip
    scenario.expected_findings = ["tail_latency_inflation", "retry_storm"]
    return scenario
