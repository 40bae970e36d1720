"""Serving detectors over a service's windowed metrics (``service:<name>`` entities).

- **Tail-latency inflation**: the tail grows while the middle does not. Per window the ratio p99 / p50 is
  compared with its median over the first ``warmup`` windows; a window is *inflated* when the ratio rose by
  more than ``tail_rise`` while the p50 rose by less than ``middle_rise`` (when both rise it is a slowdown
  or an overload, not a tail). A finding when ``persistence`` of the last ``window`` windows were inflated.
- **Retry storm**: attempts per fresh request at least ``amplification`` for ``persistence`` windows in a
  row. Its evidence says how long it has lasted; a second finding, ``metastable_state``, when it has lasted
  ``metastable_windows`` windows (a storm that feeds itself outlives whatever started it).

Both re-arm after ``window`` quiet windows. Ranking the replicas behind a tail and the decisions behind a
storm is done by the caller (it knows the operator graph and the decision log).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from streams.engine.detectors.base import Detector
from streams.engine.detectors.episode import KOfN
from streams.engine.findings import Finding


@dataclass
class TailLatency(Detector):
    job: str  # the service entity
    warmup: int = 20
    tail_rise: float = 0.15
    middle_rise: float = 0.07
    window: int = 8
    persistence: int = 5
    _ratios: list[float] = field(default_factory=list)
    _p50s: list[float] = field(default_factory=list)
    _base: tuple[float, float] | None = None
    _episode: KOfN | None = None

    def update(self, time: float, p50: float, p99: float) -> Finding | None:
        if p50 <= 0:
            return None
        if self._base is None:
            self._ratios.append(p99 / p50)
            self._p50s.append(p50)
            if len(self._ratios) == self.warmup:
                self._base = (statistics.median(self._ratios), statistics.median(self._p50s))
                self._ratios, self._p50s = [], []
            return None
        ratio0, p50_0 = self._base
        inflated = p99 / p50 > (1 + self.tail_rise) * ratio0 and p50 < (1 + self.middle_rise) * p50_0
        self._episode = self._episode or KOfN(self.window, self.persistence)
        onset = self._episode.update(inflated, time)
        if onset is None:
            return None
        return Finding(
            kind="tail_latency_inflation",
            subjects=(self.job,),
            start=onset,
            end=time,
            severity=round(p99 / p50 / ratio0, 6),
            evidence={
                "p99_over_p50": round(p99 / p50, 4),
                "baseline_p99_over_p50": round(ratio0, 4),
                "p50_s": round(p50, 6),
                "baseline_p50_s": round(p50_0, 6),
                "p99_s": round(p99, 6),
                "measure": "p99/p50 against the service's first windows, with the p50 flat",
            },
        )


@dataclass
class RetryStorm(Detector):
    job: str  # the service entity
    amplification: float = 1.5
    persistence: int = 3
    metastable_windows: int = 30
    window: int = 8
    _run: int = 0
    _onset: float | None = None
    _peak: float = 0.0
    _reported: int = 0  # 0: nothing yet, 1: the storm, 2: also its metastable state
    _quiet: int = 0

    def update(self, time: float, requests: float, attempts: float) -> Finding | None:
        if requests <= 0:
            return None
        amp = attempts / requests
        if amp < self.amplification:
            self._run = 0
            self._quiet += 1
            if self._quiet >= self.window:
                self._onset, self._reported, self._peak = None, 0, 0.0
            return None
        self._quiet = 0
        self._run += 1
        self._onset = time if self._onset is None else self._onset
        self._peak = max(self._peak, amp)
        if self._reported == 0 and self._run >= self.persistence:
            self._reported = 1
            return self._finding("retry_storm", time, amp)
        if self._reported == 1 and self._run >= self.metastable_windows:
            self._reported = 2
            return self._finding("metastable_state", time, amp)
        return None

    def _finding(self, kind: str, time: float, amp: float) -> Finding:
        assert self._onset is not None
        return Finding(
            kind=kind,
            subjects=(self.job,),
            start=self._onset,
            end=time,
            severity=round(self._peak, 6),
            evidence={
                "attempts_per_request": round(amp, 4),
                "peak_attempts_per_request": round(self._peak, 4),
                "windows": self._run,
                "measure": f"attempts per fresh request, windows in a row at or above {self.amplification}",
            },
        )
