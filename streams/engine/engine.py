"""The engine: routes validated sample batches to per-job state and collects what the detectors find."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streams.contract.envelope import SampleBatch
from streams.engine.detectors.step_time import StepObs, StepTimeDrift
from streams.engine.findings import Finding


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.10


@dataclass
class Engine:
    """Holds per-job detector state. Steps of a job are taken in arrival order; a step at or before the
    last one seen for that job (a re-sent or late step) is ignored and counted in ``stale_steps``."""

    config: EngineConfig = field(default_factory=EngineConfig)
    stale_steps: int = 0
    _step_detectors: dict[str, StepTimeDrift] = field(default_factory=dict)
    _last_step: dict[str, int] = field(default_factory=dict)

    def process(self, batches: Iterable[SampleBatch]) -> list[Finding]:
        findings: list[Finding] = []
        for batch in batches:
            if batch.kind == "step":
                findings.extend(self._on_steps(batch))
        return findings

    def _on_steps(self, batch: SampleBatch) -> list[Finding]:
        c = batch.columns
        found = []
        rows = zip(c["job"], c["step"].tolist(), c["start"].tolist(), c["duration"].tolist(), strict=True)
        for obs in map(StepObs._make, rows):
            if obs.step <= self._last_step.get(obs.job, -1):
                self.stale_steps += 1
                continue
            self._last_step[obs.job] = obs.step
            detector = self._step_detectors.get(obs.job)
            if detector is None:
                detector = StepTimeDrift(
                    obs.job, warmup=self.config.step_drift_warmup, threshold=self.config.step_drift_threshold
                )
                self._step_detectors[obs.job] = detector
            finding = detector.update(obs)
            if finding is not None:
                found.append(finding)
        return found
