"""What the engine emits for a piece of input: findings, roll-ups, attributions and graph snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.engine.attribution import Attribution
from streams.engine.findings import Finding
from streams.engine.opgraph import GraphSnapshot
from streams.engine.rollup import Rollup
from streams.engine.steps import StepReport
from streams.engine.structural import Derived


@dataclass
class EngineOutput:
    findings: list[Finding] = field(default_factory=list)
    rollups: list[Rollup] = field(default_factory=list)
    attributions: list[Attribution] = field(default_factory=list)
    snapshots: list[GraphSnapshot] = field(default_factory=list)
    reports: list[StepReport] = field(default_factory=list)  # analysed steps (not audit records themselves)

    def add(self, derived: Derived) -> None:
        self.findings.extend(derived.findings)
        self.attributions.extend(derived.attributions)
        self.rollups.extend(derived.rollups)

    def extend(self, other: EngineOutput) -> None:
        self.findings.extend(other.findings)
        self.rollups.extend(other.rollups)
        self.attributions.extend(other.attributions)
        self.snapshots.extend(other.snapshots)
        self.reports.extend(other.reports)
