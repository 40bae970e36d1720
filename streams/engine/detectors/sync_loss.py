"""Partial synchronisation loss: a subset of a job's ranks drifts apart from the rest.

Ranks that synchronise (collectives every step) report spans of the same step at about the same time. So
the detector keeps, per rank, the newest step it has reported, and each time the job's newest step
advances it measures every rank's lag behind it. Lag is counted in the job's own sequence of observed
steps (the distinct step numbers any rank reported), not in step numbers: profilers trace every N-th step,
and a gap of hundreds of step numbers between two traced steps is one step of that sequence. A rank is
*behind* when it lags by at least ``min_lag`` observed steps; a finding when a proper subset of the ranks
is behind at ``persistence`` advances in a row and its lag has grown over them (a fixed lag is a pipeline,
not a drift). One finding per episode; the detector re-arms when no rank is behind. Subjects: the
data-parallel replicas whose every rank is behind, else the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.findings import Finding

Ints = npt.NDArray[np.int64]
KEEP_OBSERVED = 256  # the newest observed steps kept: lags are counted up to this many


@dataclass
class SyncLoss(Detector):
    job: str
    min_lag: int = 2
    persistence: int = 5
    _latest: Ints = field(default_factory=lambda: np.full(0, -1, np.int64))
    _replica: Ints = field(default_factory=lambda: np.full(0, -1, np.int64))
    _newest: int = -1
    _observed: Ints = field(default_factory=lambda: np.full(0, -1, np.int64))  # newest distinct steps, ascending
    _lags: list[int] = field(default_factory=list)  # the largest lag at each of the last advances
    _onset: float | None = None
    _alarmed: bool = False

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        # (an unpickled array's dtype is a copy of numpy's, and ufunc.at on it skips its fast loop: ~30x slower)
        self._latest = np.asarray(self._latest, np.int64)

    def update(self, ranks: Ints, steps: Ints, replicas: Ints, time: float) -> Finding | None:
        """Spans' ranks, steps and data-parallel replicas (one batch, in arrival order); ``time``: the
        batch's newest event time."""
        if not len(ranks):
            return None
        top = int(ranks.max()) + 1
        if top > len(self._latest):
            self._latest = np.concatenate([self._latest, np.full(top - len(self._latest), -1, np.int64)])
            self._replica = np.concatenate([self._replica, np.full(top - len(self._replica), -1, np.int64)])
        np.maximum.at(self._latest, ranks, steps)
        self._replica[ranks] = replicas
        self._observed = _observed(self._observed, steps)
        newest = int(steps.max())
        if newest <= self._newest:
            return None
        self._newest = newest
        seen = self._latest >= 0
        newer = len(self._observed) - np.searchsorted(self._observed, self._latest, side="right")
        lag = np.where(seen, newer, 0)  # observed steps newer than the rank's newest
        behind = seen & (lag >= self.min_lag)
        if not behind.any() or behind.sum() == seen.sum():
            self._lags, self._onset, self._alarmed = [], None, False
            return None
        self._onset = time if self._onset is None else self._onset
        self._lags = [*self._lags, int(lag.max())][-self.persistence :]
        if self._alarmed or len(self._lags) < self.persistence or self._lags[-1] <= self._lags[0]:
            return None
        self._alarmed = True
        return self._finding(np.flatnonzero(behind), lag, time)

    def _finding(self, behind: Ints, lag: Ints, time: float) -> Finding:
        replicas = sorted(set(self._replica[behind].tolist()) - {-1})
        reporting = self._replica[self._latest >= 0]
        whole = [d for d in replicas if (reporting == d).sum() == (self._replica[behind] == d).sum()]
        subjects = tuple(elements.dp(self.job, d) for d in whole) or tuple(
            elements.rank(self.job, r) for r in behind[:16]
        )
        assert self._onset is not None
        return Finding(
            kind="sync_loss",
            subjects=subjects,
            start=self._onset,
            end=time,
            severity=float(lag.max()),
            evidence={
                "ranks_behind": len(behind),
                "ranks_reporting": int((self._latest >= 0).sum()),
                "replicas_behind": replicas,
                "lag_steps": self._lags,
                "newest_step": self._newest,
                "sample_ranks": [int(r) for r in behind[:32]],
                "measure": "observed steps a subset of ranks lags behind the job's newest step, growing",
            },
        )


def _observed(observed: Ints, steps: Ints) -> Ints:
    """The newest ``KEEP_OBSERVED`` distinct steps of ``observed`` (distinct, ascending) and a batch's
    ``steps``, ascending: ``np.union1d``'s. The usual batch (its steps ascend, from the newest observed
    on) is appended without a sort."""
    if (steps[1:] >= steps[:-1]).all():
        distinct = np.empty(len(steps), np.bool_)
        distinct[0] = True
        np.not_equal(steps[1:], steps[:-1], out=distinct[1:])
        steps = steps[distinct]
        if not len(observed) or steps[0] >= observed[-1]:
            new = steps[1:] if len(observed) and steps[0] == observed[-1] else steps
            return np.concatenate([observed, new])[-KEEP_OBSERVED:] if len(new) else observed
    return np.union1d(observed, steps)[-KEEP_OBSERVED:]


@dataclass
class PhaseDrift(Detector):
    """The same loss seen within a step's spans: each data-parallel replica's phase (its first span's start
    less the median over replicas) against its own over the job's first ``warmup`` analysed steps. Drifting:
    a replica whose phase moved by more than ``min_drift`` of the step; a finding when fewer than half the
    replicas drift, at ``persistence`` analysed steps in a row, and their drift has grown over them."""

    job: str
    warmup: int = 10
    min_drift: float = 0.05
    persistence: int = 5
    _warm: list[npt.NDArray[np.float64]] = field(default_factory=list)
    _base: npt.NDArray[np.float64] | None = None
    _drifts: list[float] = field(default_factory=list)
    _onset: float | None = None
    _alarmed: bool = False

    def update(self, step: int, t0: float, step_s: float, phases: npt.NDArray[np.float64]) -> Finding | None:
        """``phases``: per replica (index = dp), NaN for a replica without spans in the step."""
        if self._base is None or len(phases) != len(self._base):
            self._warm = [w for w in self._warm if len(w) == len(phases)] + [phases]
            if len(self._warm) >= self.warmup:
                self._base, self._warm = np.nanmedian(np.stack(self._warm), axis=0), []
            return None
        drift, threshold = np.abs(phases - self._base), self.min_drift * step_s
        # (NaN, a replica absent, is not over a threshold >= 0: no np.nan_to_num copy to compare)
        drifting = np.flatnonzero((drift if threshold >= 0 else np.nan_to_num(drift)) > threshold)
        if not len(drifting) or 2 * len(drifting) >= len(phases):
            self._drifts, self._onset, self._alarmed = [], None, False
            return None
        self._onset = t0 if self._onset is None else self._onset
        self._drifts = [*self._drifts, float(np.nanmax(drift))][-self.persistence :]
        if self._alarmed or len(self._drifts) < self.persistence or self._drifts[-1] <= self._drifts[0]:
            return None
        self._alarmed = True
        return Finding(
            kind="sync_loss",
            subjects=tuple(elements.dp(self.job, d) for d in drifting.tolist()),
            start=self._onset,
            end=t0 + step_s,
            severity=round(self._drifts[-1] / step_s, 6),
            evidence={
                "replicas_drifting": drifting.tolist(),
                "phase_drift_s": [round(d, 6) for d in self._drifts],
                "replicas": len(phases),
                "step": step,
                "measure": "a replica's start within the step against the others', drifting further",
            },
        )
