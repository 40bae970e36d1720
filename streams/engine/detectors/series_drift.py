"""Drift of many named series at once: one ``ChangePoint`` row per series, findings by name.

A series is named by ``series_key(element, metric)`` (``"latency_p99_s@service:chat"``: the metric, then
the operator-graph element it belongs to); ``update(keys, times, values)`` takes arrays of samples in
input order (a key may repeat: its samples are applied in order) and returns ``series_drift`` findings:

- ``subjects``: the element; ``start``: the time of the first sample after the change (the best split,
  not the alarm); ``end``: the time of the sample that raised it;
- ``evidence``: ``metric``, ``change`` (``level``, ``slope`` or ``variance``), ``direction`` (``up`` or
  ``down``), ``before``/``after`` (the level either side, or the noise for a variance change, in the
  series' units), ``slope_before``/``slope_after`` (per sample), ``detected_after_samples``;
- ``severity``: the test statistic over its threshold (scale-free: > 1, larger is clearer).

Changes smaller than ``min_change`` (relative to the level before; the engine uses the step-drift
threshold) are not reported. Changes of one metric that start at the same sample in several series (every
device of a job after a straggler) are one finding on the job, its members in the evidence
(:mod:`series_groups`). A periodic series (found in its first samples, :mod:`seasonal`) is tested without
its seasonal profile. Call ``flush()`` at the end of the input for the groups still held. Series whose
metric is in ``warn_on`` also get an ``EarlyWarning`` (``early_warning`` findings). State: per series a
fixed window of values and times (and an early-warning window), so it is bounded by the number of series.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from streams.engine import elements
from streams.engine.detectors.base import Detector
from streams.engine.detectors.changepoint import Change, ChangePoint
from streams.engine.detectors.early_warning import EarlyWarning
from streams.engine.detectors.rows import with_rows
from streams.engine.detectors.seasonal import Deseason
from streams.engine.detectors.series_groups import CoMoving
from streams.engine.findings import Finding

_AT = "@"  # a series key: <metric>@<element>


def series_key(element: str, metric: str) -> str:
    return f"{metric}{_AT}{element}"


def series_keys(entities: npt.NDArray[np.object_], metrics: npt.NDArray[np.object_]) -> list[str]:
    """:func:`series_key` of each row (object arrays of str), all at once."""
    keys: list[str] = (metrics + _AT + entities).tolist()
    return keys


def parse_series_key(key: str) -> tuple[str, str]:
    """(element, metric) of a ``series_key``."""
    metric, _, element = key.partition(_AT)
    return element, metric


@dataclass
class SeriesDrift(Detector):
    warn_on: tuple[str, ...] = ()
    detector: ChangePoint = field(default_factory=ChangePoint)
    _rows: dict[str, int] = field(default_factory=dict)
    _keys: list[str] = field(default_factory=list)
    _metrics: list[str] = field(default_factory=list)  # the metrics of the series, each once
    _metric_of: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, np.int64))  # per row
    _times: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros((0, ChangePoint.window)))
    _warnings: dict[str, EarlyWarning] = field(default_factory=dict)
    job: str = ""  # the key whose series these are (a job, or '' for the control plane)
    min_change: float = 0.0  # relative: changes smaller than this share of the level before are not reported
    _season: Deseason = field(default_factory=Deseason)
    _groups: CoMoving = field(init=False)

    def __post_init__(self) -> None:
        self._groups = CoMoving(elements.job(self.job), every=self.detector.every)

    def update(self, keys: Sequence[str], times: npt.ArrayLike, values: npt.ArrayLike) -> list[Finding]:
        t = np.asarray(times, np.float64)
        v = np.asarray(values, np.float64)
        self._add(keys)
        rows = np.fromiter(map(self._rows.__getitem__, keys), np.int64, len(keys))
        keep = np.isfinite(v) & np.isfinite(t)
        if not keep.all():
            rows, t, v = rows[keep], t[keep], v[keep]
        # the newest sample time of each metric (an array over the metrics seen, not a step per sample)
        newest = np.full(len(self._metrics), -np.inf)
        np.maximum.at(newest, self._metric_of[rows], t)
        clock = {m: at for m, at in zip(self._metrics, newest.tolist(), strict=True) if at > -np.inf}
        order = np.argsort(rows, kind="stable")
        repeats = rows.size > 1 and bool((rows[order][1:] == rows[order][:-1]).any())
        # each key once (the usual batch): one round
        out = self._rounds(rows, t, v, order) if repeats else self._round(rows, t, v)
        drift = [f for f in out if f.kind == "series_drift"]
        return [f for f in out if f.kind != "series_drift"] + self._groups.add(drift, clock)

    def _rounds(self, rows: npt.NDArray[np.int64], times: npt.NDArray[np.float64],
                values: npt.NDArray[np.float64], order: npt.NDArray[np.intp]) -> list[Finding]:  # fmt: skip
        """A key that repeats within the batch (``order``: the samples by key, stable): its first samples in
        one round, the next ones in the next."""
        by_row = rows[order]
        first = np.concatenate(([True], by_row[1:] != by_row[:-1]))  # (not np.r_: its index tricks cost more)
        starts = np.maximum.accumulate(np.where(first, np.arange(rows.size), 0))
        occurrence = np.empty(rows.size, np.int64)
        occurrence[order] = np.arange(rows.size) - starts
        out: list[Finding] = []
        for r in range(int(occurrence.max()) + 1):
            pick = np.flatnonzero(occurrence == r)
            out += self._round(rows[pick], times[pick], values[pick])
        return out

    def flush(self) -> list[Finding]:
        """The end of the input: the groups of co-moving changes still held."""
        return self._groups.flush()

    def keep(self, keys: Sequence[str]) -> None:
        """Only the series of ``keys`` (and those added later): the others get no more samples (the last ones
        of a closing job), so their state goes (at a large job's close, one row per device and metric)."""
        kept = sorted({self._rows[k] for k in keys if k in self._rows})  # (their order, and so their findings')
        rows = np.array(kept, np.int64)
        self.detector.keep(rows)
        self._season.keep(rows)
        self._times = self._times[rows]
        self._metric_of = self._metric_of[rows]
        self._keys = [self._keys[r] for r in kept]
        self._rows = {k: r for r, k in enumerate(self._keys)}
        self._warnings = {k: w for k, w in self._warnings.items() if k in self._rows}

    def _add(self, keys: Sequence[str]) -> None:
        new = [k for k in dict.fromkeys(keys) if k not in self._rows]
        if not new:
            return
        codes = []
        for key in new:
            self._rows[key] = len(self._keys)
            self._keys.append(key)
            element, metric = parse_series_key(key)
            if metric not in self._metrics:
                self._metrics.append(metric)
            codes.append(self._metrics.index(metric))
            if metric in self.warn_on:
                self._warnings[key] = EarlyWarning(element, metric)
        self._metric_of = with_rows(self._metric_of, len(new), codes)
        # tested on every ``detector.every``-th sample at a phase from the key's name (not its arrival order)
        self.detector.grow(len(new), np.array([zlib.crc32(k.encode()) for k in new], np.int64))
        self._times = with_rows(self._times, len(new))
        self._season.grow(len(new))

    def _round(self, rows: npt.NDArray[np.int64], times: npt.NDArray[np.float64],
               values: npt.NDArray[np.float64]) -> list[Finding]:  # fmt: skip
        self._times[rows, :-1] = self._times[rows, 1:]
        self._times[rows, -1] = times
        adjusted, seasonal = self._season.adjust(rows, values)
        if seasonal.size:
            self.detector.restart(seasonal)  # what it learned of these included their pattern
        found = [self._finding(c) for c in self.detector.update(rows, adjusted, self._material)]
        if not self._warnings:
            return found
        for row, time, value in zip(rows.tolist(), times.tolist(), values.tolist(), strict=True):
            warning = self._warnings.get(self._keys[row])
            if warning is not None and (f := warning.update(time, value)) is not None:
                found.append(f)
        return found

    def _material(self, c: Change) -> bool:
        """Whether the change moved the series by at least ``min_change`` of its level before (or its noise,
        for a variance change): a statistically clear but tiny change is not reported."""
        return abs(c.after - c.before) >= self.min_change * abs(c.before)

    def _finding(self, c: Change) -> Finding:
        element, metric = parse_series_key(self._keys[c.series])
        w = self.detector.window
        return Finding(
            kind="series_drift",
            subjects=(element,),
            series=metric,
            start=float(self._times[c.series, w - 1 - (c.detected - c.at)]),
            end=float(self._times[c.series, -1]),
            severity=round(c.score, 6),
            evidence={
                "metric": metric,
                "change": c.kind,
                "direction": c.direction,
                "before": c.before,
                "after": c.after,
                "slope_before": c.slope_before,
                "slope_after": c.slope_after,
                "detected_after_samples": c.detected - c.at,
            },
        )
