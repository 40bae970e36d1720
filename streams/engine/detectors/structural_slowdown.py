"""Structural slowdown: the job runs persistently slower than its ideal step from peers (:mod:`ideal`).

No history is needed, so a straggler present from the first step is found as well as one that appears
later. A step is *slow* when its blocking slowdown T(actual) / T(ideal) is at least ``1 + threshold``; a
finding when ``persistence`` of the last ``window`` analysed steps are slow, starting at the first slow
step of the episode. One finding per episode (re-armed after ``window`` steps in a row that are not slow);
its cost is the accelerator-seconds of the episode's steps above their ideal, up to the finding.

The threshold (``EngineConfig.structural_slowdown_threshold``, default 0.05: the relative change of step
time the step-time detector also treats as drift) leaves room for what a healthy job always has: the ideal
puts every op at its peers' typical duration, while a real step waits at every barrier for the slowest of its
peers' jitter (1–2% on the simulator's healthy runs, ideal and realistic modes; 7% on average, 3.5–14% per
step, on the real healthy torch traces made on a loaded 2-core machine, tests/data/torch_traces: 7 of 12
steps slow, one short of a finding).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.detectors.episode import KOfN
from streams.engine.findings import Finding


@dataclass(frozen=True)
class IdealStep:
    """One analysed step against its ideal (modelled seconds)."""

    step: int
    t0: float
    end: float
    actual_s: float
    ideal_s: float
    ranks: int

    @property
    def slowdown(self) -> float:
        return self.actual_s / self.ideal_s if self.ideal_s > 0 else 1.0


@dataclass
class StructuralSlowdown(Detector):
    job: str
    threshold: float = 0.05
    window: int = 10
    persistence: int = 8
    _recent: deque[IdealStep] = field(default_factory=deque)
    _episode: KOfN | None = None

    def wants_causes(self, s: IdealStep) -> bool:
        """Whether ``s`` may belong to an episode not reported yet and is slow enough (half the threshold) to
        be decomposed: the causes of a finding are judged on its episode's steps up to the finding."""
        return s.slowdown >= 1 + self.threshold / 2 and not (self._episode is not None and self._episode.alarmed)

    def update(self, s: IdealStep) -> Finding | None:
        self._recent.append(s)
        if len(self._recent) > self.window:
            self._recent.popleft()
        self._episode = self._episode or KOfN(self.window, self.persistence)
        onset = self._episode.update(s.slowdown >= 1 + self.threshold, s.t0)
        if onset is None:
            return None
        steps = [r for r in self._recent if r.t0 >= onset]
        actual, ideal = sum(r.actual_s for r in steps), sum(r.ideal_s for r in steps)
        return Finding(
            "structural_slowdown",
            (elements.job(self.job),),
            onset,
            s.end,
            actual / ideal,
            {"blocking_slowdown": round(actual / ideal, 6), "first_step": steps[0].step, "last_step": s.step,
             "steps": len(steps), "threshold": self.threshold},
            {"accel_s": round(sum(r.ranks * (r.actual_s - r.ideal_s) for r in steps), 6)},
        )  # fmt: skip
