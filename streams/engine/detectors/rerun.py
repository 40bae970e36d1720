"""Restart re-runs: steps a job runs again after a failure (from its step summaries).

A summary of a step at or before the newest step seen for the job, marked other than ``ok`` or with more
than one attempt, is a re-run; a summary with status ``failed`` is work lost (``timeout`` and ``retried``
are a serving window's retries, judged elsewhere). An episode
opens with the first of them and closes at the next fresh, successful step: one finding with the steps
re-run and the accelerator-seconds they cost (a re-sent ``ok`` summary of an old step is not a re-run).
"""

from __future__ import annotations

from dataclasses import dataclass

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.findings import Finding


def lost_share(stale: bool, status: str, attempts: int) -> float:
    """The share of a step summary's accelerator-seconds that bought nothing: all of a failed step or of a
    re-run (a stale step marked other than ``ok`` or retried), the earlier attempts of a retried step."""
    if status == "failed" or (stale and (status != "ok" or attempts > 1)):
        return 1.0
    return 0.0 if stale else (attempts - 1) / attempts


@dataclass
class _Episode:
    start: float
    steps: int = 0
    accel_s: float = 0.0
    first_step: int = -1


@dataclass
class Reruns(Detector):
    job: str
    _episode: _Episode | None = None

    def update(
        self, step: int, stale: bool, status: str, attempts: int, start: float, accel_s: float
    ) -> Finding | None:
        """One step summary; ``stale``: its step is not newer than the job's newest; ``accel_s``: duration ×
        accelerators."""
        if lost_share(stale, status, attempts) == 1.0:
            episode = self._episode = self._episode or _Episode(start, first_step=step)
            episode.steps += 1
            episode.accel_s += accel_s
            return None
        if stale or self._episode is None:
            return None
        episode, self._episode = self._episode, None
        return Finding(
            kind="restart_rerun",
            subjects=(elements.job(self.job),),
            start=episode.start,
            end=start,
            severity=float(episode.steps),
            evidence={"steps_lost_or_rerun": episode.steps, "from_step": episode.first_step, "resumed_at": step},
            cost={"accel_s": round(episode.accel_s, 6)},
        )
