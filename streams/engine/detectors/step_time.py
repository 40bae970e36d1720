"""Step-time drift: a job's step duration rises above its own healthy baseline and stays there.

Baseline: median step duration over the first ``warmup`` steps. Then a one-sided CUSUM on the relative
excess ``x / baseline - 1`` with allowance ``threshold / 2`` alarms once the accumulated excess passes
``threshold * patience`` and at least ``min_steps`` steps of the episode were slow by more than the
allowance: a single slow step, however slow, does not alarm; a sustained slowdown of ``threshold`` does
after about ``2 * patience`` steps, a larger one after ``min_steps``.

river's PageHinkley is the same idea but gives neither the onset, the baseline nor the magnitude, which
the finding needs. One finding per episode; the detector re-arms once the excess has been gone for
``warmup`` steps (the sum is capped at twice the alarm level, so an episode ends soon after the job
recovers, however long it lasted).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import NamedTuple

from streams.engine.detectors.base import Detector
from streams.engine.findings import Finding


class StepObs(NamedTuple):
    """One step of one job, as the detector needs it."""

    job: str
    step: int
    start: float
    duration: float


@dataclass
class StepTimeDrift(Detector):
    job: str
    warmup: int = 20
    threshold: float = 0.10
    patience: float = 3.0
    min_steps: int = 3
    _warm: list[float] = field(default_factory=list)
    _baseline: float | None = None
    _cusum: float = 0.0
    _onset: StepObs | None = None
    _episode: list[StepObs] = field(default_factory=list)
    _alarmed: bool = False
    _slow_steps: int = 0
    _quiet_steps: int = 0

    def update(self, obs: StepObs) -> Finding | None:
        if self._baseline is None:
            self._warm.append(obs.duration)
            if len(self._warm) >= self.warmup:
                self._baseline = statistics.median(self._warm)
                self._warm = []
            return None
        excess = obs.duration / self._baseline - 1.0
        # capped at twice the alarm level, so that a long episode ends within a few healthy steps
        limit = self.threshold * self.patience
        self._cusum = min(2 * limit, max(0.0, self._cusum + excess - self.threshold / 2))
        if self._cusum == 0.0:
            self._on_quiet()
            return None
        self._quiet_steps = 0
        if self._onset is None:
            self._onset = obs
        if excess > self.threshold / 2:
            self._slow_steps += 1
        if len(self._episode) < 10_000:
            self._episode.append(obs)
        if not self._alarmed and self._cusum > limit and self._slow_steps >= self.min_steps:
            self._alarmed = True
            return self._finding(obs)
        return None

    def _on_quiet(self) -> None:
        self._onset, self._episode, self._slow_steps = None, [], 0
        self._quiet_steps += 1
        if self._alarmed and self._quiet_steps >= self.warmup:
            self._alarmed = False

    def _finding(self, last: StepObs) -> Finding:
        assert self._onset is not None and self._baseline is not None
        durations = [s.duration for s in self._episode]
        observed = statistics.median(durations)
        extra = sum(d - self._baseline for d in durations)
        return Finding(
            kind="step_time_drift",
            subjects=(f"job:{self.job}",),
            start=self._onset.start,
            end=last.start + last.duration,
            severity=round(observed / self._baseline, 6),
            evidence={
                "baseline_step_s": self._baseline,
                "observed_step_s": observed,
                "onset_step": self._onset.step,
                "detected_at_step": last.step,
                "steps": len(durations),
            },
            cost={"extra_step_seconds": round(extra, 6)},
        )
