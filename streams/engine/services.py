"""Services: windowed metrics of ``service:<name>`` entities through the serving detectors, and the causes
they name.

- A tail-latency finding ranks the service's replicas (``replica:<name>-<stage>/<i>`` or
  ``replica:<name>/<i>``) by how far their utilisation (then queue depth) stood above the median of their
  stage's replicas since the finding began: a slow replica is busier than its peers for the same traffic.
- A retry storm ranks the decisions of the last ``DECISION_HORIZON_S`` that acted on the service (retry
  policies first): the controller that let the storm feed itself.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from streams.engine import elements
from streams.engine.attribution import Attribution
from streams.engine.detectors.serving import RetryStorm, TailLatency
from streams.engine.findings import Finding

HISTORY = 64  # windows of replica metrics kept per replica
DECISION_HORIZON_S = 3600.0
NAMES = ("latency_p50_s", "latency_p99_s", "requests", "attempts")
REPLICA_NAMES = ("util", "queue_depth")


@dataclass
class Services:
    _tails: dict[str, TailLatency] = field(default_factory=dict)
    _storms: dict[str, RetryStorm] = field(default_factory=dict)
    _replicas: dict[str, deque[tuple[float, str, float]]] = field(default_factory=dict)  # (time, name, value)
    _decisions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=256))

    def decision(self, decision: dict[str, Any]) -> None:
        self._decisions.append(decision)

    @property
    def decisions(self) -> tuple[dict[str, Any], ...]:
        return tuple(self._decisions)

    def metrics(self, rows: Iterable[tuple[str, str, float, float]]) -> tuple[list[Finding], list[Attribution]]:
        """(entity, name, value, time) rows of one batch."""
        windows: dict[tuple[str, float], dict[str, float]] = {}
        for entity, name, value, t in rows:  # the name first: most rows are of neither (a device's power)
            if name in NAMES and elements.is_kind(entity, "service"):
                windows.setdefault((entity, t), {})[name] = value
            elif name in REPLICA_NAMES and elements.is_kind(entity, "replica"):
                self._replicas.setdefault(entity, deque(maxlen=HISTORY)).append((t, name, value))
        findings: list[Finding] = []
        attributions: list[Attribution] = []
        for (entity, t), values in sorted(windows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            for found in self._update(entity, t, values):
                findings.append(found)
                attributions.extend(self._causes(found))
        return findings, attributions

    def _update(self, entity: str, t: float, v: dict[str, float]) -> list[Finding]:
        out = []
        if "latency_p50_s" in v and "latency_p99_s" in v:
            tail = self._tails.setdefault(entity, TailLatency(entity))
            if (f := tail.update(t, v["latency_p50_s"], v["latency_p99_s"])) is not None:
                out.append(f)
        if "requests" in v and "attempts" in v:
            storm = self._storms.setdefault(entity, RetryStorm(entity))
            if (f := storm.update(t, v["requests"], v["attempts"])) is not None:
                out.append(f)
        return out

    def _causes(self, finding: Finding) -> list[Attribution]:
        if finding.kind == "tail_latency_inflation":
            return self._busiest_replicas(finding)
        if finding.kind == "retry_storm":
            return self._decisions_behind(finding)
        return []

    def _busiest_replicas(self, finding: Finding) -> list[Attribution]:
        mine = [e for e in self._replicas if elements.in_service(e, finding.subjects[0])]
        util, queue = (self._over_peers(mine, metric, finding.start) for metric in REPLICA_NAMES)
        ranked = sorted((e for e in util if util[e] > 1.05), key=lambda e: (-util[e], -queue.get(e, 1.0), e))
        total = sum(util[e] - 1 for e in ranked) or 1.0
        return [
            Attribution(
                finding.id,
                i,
                "element",
                e,
                (util[e] - 1) / total,
                finding.severity,
                0.0,
                {"util_over_peer_median": round(util[e], 4), "queue_over_peer_median": round(queue.get(e, 1.0), 4)},
            )
            for i, e in enumerate(ranked[:5], start=1)
        ]

    def _over_peers(self, replicas: list[str], metric: str, since: float) -> dict[str, float]:
        """Per replica: its mean ``metric`` since ``since`` over the median of its stage's replicas."""
        means = {}
        for e in replicas:
            vals = [v for t, n, v in self._replicas[e] if n == metric and t >= since]
            if vals:
                means[e] = sum(vals) / len(vals)
        out = {}
        for e, m in means.items():
            median = statistics.median(v for p, v in means.items() if elements.parent(p) == elements.parent(e))
            out[e] = m / median if median > 0 else 1.0
        return out

    def _decisions_behind(self, finding: Finding) -> list[Attribution]:
        service = finding.subjects[0]
        job = elements.name_of(service, "service")
        before = [d for d in self._decisions if finding.start - DECISION_HORIZON_S <= d["time"] <= finding.start
                  and (service in d["targets"] or d.get("job") == job)]  # fmt: skip
        before.sort(key=lambda d: (d["layer"] != "retry", -d["time"], d["id"]))
        return [
            Attribution(
                finding.id,
                i,
                "decision",
                d["id"],
                1.0 / len(before),
                finding.severity,
                0.0,
                {
                    "controller": d["controller"],
                    "action": d["action"],
                    "seconds_before": round(finding.start - d["time"], 3),
                },
            )
            for i, d in enumerate(before[:5], start=1)
        ]


def restart_causes(finding: Finding, decisions: Iterable[dict[str, Any]]) -> list[Attribution]:
    """For a restart re-run: the restart decisions taken for the job during it, and the nodes they moved
    the job away from (the targets other than the job and the replacement), the node first."""
    job = elements.name_of(finding.subjects[0], "job")
    found = [d for d in decisions if d.get("job") == job and d["layer"] in ("orchestrator", "scheduler")
             and finding.start - DECISION_HORIZON_S <= d["time"] <= finding.end]  # fmt: skip
    out: list[Attribution] = []
    for d in found:
        keep = {elements.job(job), str((d.get("parameters") or {}).get("replacement", ""))}
        cost = finding.cost.get("accel_s", 0.0)
        for node in (t for t in d["targets"] if t not in keep):
            out.append(Attribution(finding.id, len(out) + 1, "element", node, 1.0, 1.0, cost,
                                   {"via_decision": d["id"], "reason": d.get("reason", "")}))  # fmt: skip
        out.append(Attribution(finding.id, len(out) + 1, "decision", d["id"], 1.0, 1.0, 0.0,
                               {"controller": d["controller"], "action": d["action"]}))  # fmt: skip
    return out[:5]
