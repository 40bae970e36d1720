"""The control plane's state (a key of the engine of its own): what belongs to no single job.

It sees every decision, every topology relation and the power of racks and nodes, and judges what spans
controllers: conflicts between control loops and energy feedback loops (:mod:`detectors.coherence`), and
service metrics that name no job. It keeps the fabric's shared topology (relations of no job), which a job
created later starts from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.engine.detectors.coherence import ControlCoherence
from streams.engine.opgraph import OperatorGraph
from streams.engine.output import EngineOutput
from streams.engine.services import Services

Relation = tuple[str, str, str]


@dataclass
class ControlPlane:
    services: Services = field(default_factory=Services)
    fabric: OperatorGraph = field(default_factory=lambda: OperatorGraph(""))  # every relation, for relatedness
    shared: dict[Relation, None] = field(default_factory=dict)  # relations of no job, in arrival order
    coherence: ControlCoherence = field(default_factory=ControlCoherence)

    def topology(self, relations: list[Relation], shared: list[Relation]) -> None:
        self.fabric.add_relations(relations)
        self.shared.update(dict.fromkeys(shared))

    def power(self, rows: list[tuple[str, float, float]]) -> None:
        """``power_w`` of racks and nodes (any job's or none): (entity, time, watts)."""
        for entity, t, watts in rows:
            self.coherence.power(entity, t, watts)

    def metrics(self, c: dict[str, Any], out: EngineOutput) -> None:
        """Metrics of no job: service metrics go to the serving detectors."""
        rows = zip(c["entity"].tolist(), c["name"].tolist(), c["value"].tolist(), c["time"].tolist(), strict=True)
        findings, attributions = self.services.metrics(rows)
        out.findings.extend(findings)
        out.attributions.extend(attributions)

    def decision(self, decision: dict[str, Any], out: EngineOutput) -> None:
        self.services.decision(decision)
        out.findings.extend(self.coherence.update(decision, self.fabric))
