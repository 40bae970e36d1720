"""The engine: routes validated samples to per-job state and collects what the detectors find."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel

from streams.contract.samples import StepSample
from streams.engine.detectors.step_time import StepTimeDrift
from streams.engine.findings import Finding


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.10


@dataclass
class Engine:
    """Holds per-job detector state. Steps of a job are taken in step order; a step at or before the
    last one seen for that job is a duplicate or too late and is ignored (counted in ``stale_steps``)."""

    config: EngineConfig = field(default_factory=EngineConfig)
    stale_steps: int = 0
    _step_detectors: dict[str, StepTimeDrift] = field(default_factory=dict)
    _last_step: dict[str, int] = field(default_factory=dict)

    def process(self, samples: Iterable[BaseModel]) -> list[Finding]:
        findings: list[Finding] = []
        for sample in samples:
            if isinstance(sample, StepSample):
                found = self._on_step(sample)
                if found is not None:
                    findings.append(found)
        return findings

    def _on_step(self, step: StepSample) -> Finding | None:
        if step.step <= self._last_step.get(step.job, -1):
            self.stale_steps += 1
            return None
        self._last_step[step.job] = step.step
        detector = self._step_detectors.get(step.job)
        if detector is None:
            detector = StepTimeDrift(
                step.job, warmup=self.config.step_drift_warmup, threshold=self.config.step_drift_threshold
            )
            self._step_detectors[step.job] = detector
        return detector.update(step)
