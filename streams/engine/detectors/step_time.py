"""Step-time drift: a job's step duration moves away from its own reference level, up or down, and stays.

The change itself is found by the scale-free change detector (``changepoint.ChangePoint``: level, slope or
noise, located at the best split of the segment, relearned after each change). A change becomes a
finding once the job's current step time (the median of its last ``2 * min_steps + 1`` steps) differs
from the reference (the level before the first change, then the level the last finding reported) by more
than ``threshold`` (relative; 5% by default, the allowance of the CUSUM this detector replaces, so the same
slowdowns count as drift): a jitter-sized change is not drift, a slow trend is reported once it has added up to
that, from the change where it began. ``direction`` is ``up`` (slower) or
``down`` (faster); ``onset_step`` is where the change happened, not when it was found.

``warmup`` is the number of steps the first reference level is taken from; a change whose level stays
within ``threshold`` of the reference for ``2 * min_steps + 1`` steps is dropped. ``patience`` is kept
for callers of the former CUSUM detector and no longer used.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.detectors.changepoint import ChangePoint
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
    threshold: float = 0.05
    patience: float = 3.0
    min_steps: int = 3
    _detector: ChangePoint = field(default_factory=lambda: ChangePoint(1))
    _recent: deque[StepObs] = field(default_factory=lambda: deque(maxlen=ChangePoint.window))
    _reference: float | None = None
    _warm: list[float] = field(default_factory=list)
    _onset: StepObs | None = None  # the change not yet reported (its first step)
    _extra: float = 0.0  # seconds above the reference since the onset
    _steps: int = 0

    def update(self, obs: StepObs) -> Finding | None:
        self._recent.append(obs)
        if self._reference is None:
            self._warm.append(obs.duration)
            if len(self._warm) >= self.warmup:
                self._reference, self._warm = statistics.median(self._warm), []
        for change in self._detector.update(np.zeros(1, np.int64), np.array([obs.duration])):
            at = len(self._recent) - 1 - (change.detected - change.at)
            onset = self._recent[max(at, 0)]
            self._onset, self._steps = onset, 0
            self._extra = 0.0
            for s in list(self._recent)[max(at, 0) : -1]:
                self._note(s)
        if self._onset is None or self._reference is None:
            return None
        self._note(obs)
        current = statistics.median(s.duration for s in list(self._recent)[-(2 * self.min_steps + 1) :])
        ratio = current / self._reference if self._reference > 0 else 1.0
        material = abs(ratio - 1.0) > self.threshold
        if not material or self._steps < self.min_steps:
            if not material and self._steps >= 2 * self.min_steps + 1:
                self._onset = None  # the change stayed within the threshold: not drift
            return None
        return self._finding(obs, current)

    def _note(self, s: StepObs) -> None:
        assert self._reference is not None
        self._extra += s.duration - self._reference
        self._steps += 1

    def _finding(self, last: StepObs, current: float) -> Finding:
        assert self._onset is not None and self._reference is not None
        onset, baseline = self._onset, self._reference
        since = [s.duration for s in self._recent if s.step >= onset.step]
        observed = statistics.median(since)
        finding = Finding(
            kind="step_time_drift",
            subjects=(elements.job(self.job),),
            start=onset.start,
            end=last.start + last.duration,
            severity=round(observed / baseline, 6),
            evidence={
                "baseline_step_s": baseline,
                "observed_step_s": observed,
                "direction": "up" if observed > baseline else "down",
                "onset_step": onset.step,
                "detected_at_step": last.step,
                "steps": self._steps,
            },
            cost={"extra_step_seconds": round(self._extra, 6)},
        )
        self._reference, self._onset = current, None
        return finding
