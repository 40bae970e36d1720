"""Critical-path shifts: the step's critical path moves to other stages or other kinds of work.

Each analysed step's critical path is summarised as a composition: the share of its time per pipeline
stage and per kind of work (compute, collective, transfer). The job's baseline is the mean composition of
its first ``warmup`` steps. A step *shifted* when the total-variation distance between its composition and
the baseline (half the L1 distance, 0..1) exceeds ``threshold``; a finding when ``persistence`` of the last
``window`` steps shifted. One finding per episode; the detector re-arms after ``window`` steps in a row
without a shift.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.detectors.episode import KOfN
from streams.engine.findings import Finding


def composition(stages: dict[int, float], kinds: dict[str, float]) -> dict[str, float]:
    """Shares of the critical path's time by stage and by kind of work (each part sums to 1)."""
    out: dict[str, float] = {}
    for prefix, part in (("stage", {str(k): v for k, v in stages.items()}), ("work", kinds)):
        total = sum(part.values())
        for key, seconds in part.items():
            out[elements.element(prefix, key)] = seconds / total if total > 0 else 0.0
    return out


def distance(a: dict[str, float], b: dict[str, float]) -> float:
    """Total-variation distance per part (stage, work), averaged: 0 same, 1 disjoint."""
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b)) / 4


@dataclass
class CriticalPathShift(Detector):
    job: str
    warmup: int = 10
    threshold: float = 0.08  # healthy runs of the simulator stay under 0.04
    window: int = 10
    persistence: int = 6
    _baseline: list[dict[str, float]] = field(default_factory=list)
    _reference: dict[str, float] | None = None
    _episode: KOfN | None = None

    def update(self, step: int, t0: float, end: float, comp: dict[str, float]) -> Finding | None:
        if self._reference is None:
            self._baseline.append(comp)
            if len(self._baseline) == self.warmup:
                keys = {k for c in self._baseline for k in c}
                self._reference = {k: sum(c.get(k, 0.0) for c in self._baseline) / self.warmup for k in sorted(keys)}
                self._baseline = []
            return None
        ref = self._reference
        d = distance(comp, ref)
        self._episode = self._episode or KOfN(self.window, self.persistence)
        onset = self._episode.update(d > self.threshold, t0)
        if onset is None:
            return None
        grew = sorted(comp, key=lambda k: comp.get(k, 0.0) - ref.get(k, 0.0), reverse=True)[:2]
        return Finding(
            kind="critical_path_shift",
            subjects=(elements.job(self.job),),
            start=onset,
            end=end,
            severity=round(d, 6),
            evidence={
                "step": step,
                "distance": round(d, 6),
                "grew": {k: [round(ref.get(k, 0.0), 4), round(comp[k], 4)] for k in grew},
                "baseline": {k: round(v, 4) for k, v in ref.items()},
                "now": {k: round(v, 4) for k, v in sorted(comp.items())},
                "measure": "share of critical-path time per stage and kind of work vs the job's first steps",
            },
        )
