"""The control plane's state (a key of the engine of its own): what belongs to no single job.

It takes the samples that name no job: service metrics of no job go to the serving detectors (with every
decision, to name the ones behind a retry storm), and topology relations of no job (device → node, node →
switch) are kept as the fabric's shared topology, which a job created later starts from. Conflicts between
control loops are judged per job (:class:`streams.engine.job.JobState`), on the job's own operator graph,
so that no finding depends on which worker holds which partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.engine.output import EngineOutput
from streams.engine.services import Services

Relation = tuple[str, str, str]


@dataclass
class ControlPlane:
    services: Services = field(default_factory=Services)
    shared: dict[Relation, None] = field(default_factory=dict)  # relations of no job, in arrival order

    def topology(self, shared: list[Relation]) -> None:
        self.shared.update(dict.fromkeys(shared))

    def metrics(self, c: dict[str, Any], out: EngineOutput) -> None:
        """Metrics of no job: service metrics go to the serving detectors."""
        rows = zip(c["entity"].tolist(), c["name"].tolist(), c["value"].tolist(), c["time"].tolist(), strict=True)
        findings, attributions = self.services.metrics(rows)
        out.findings.extend(findings)
        out.attributions.extend(attributions)

    def decision(self, decision: dict[str, Any]) -> None:
        self.services.decision(decision)
