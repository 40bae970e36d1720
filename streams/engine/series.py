"""Which series of a job go to the series-drift detector (:mod:`detectors.series_drift`), as
``(keys, times, values)``: output per step; p99 latency and p99/p50 per service and stage; device
utilisation and power; cost and energy per output from the job's roll-up windows (at the window's end)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from streams.engine import elements
from streams.engine.detectors.series_drift import series_key, series_keys
from streams.engine.rollup import Rollup

METRICS = frozenset({"latency_p99_s", "util", "power_w"})
ROLLUPS = frozenset({"cost_per_output", "energy_j_per_output"})
WARN_ON = ("latency_p99_s",)  # early warnings (critical slowing down) on these
Series = tuple[list[str], list[float], list[float]]
Strings = npt.NDArray[np.object_]
Floats = npt.NDArray[np.float64]


def of_steps(job: str, rows: Iterable[tuple[float, float]]) -> Series:
    """(start, output units) of the job's analysed step summaries."""
    key = series_key(elements.job(job), "output_per_step")
    starts, outputs = zip(*rows, strict=True) if rows else ((), ())
    return [key] * len(starts), list(starts), list(outputs)


def of_metrics(entity: Strings, name: Strings, value: Floats, time: Floats) -> Series:
    """Metric columns (entity and name: object arrays of str): the named metrics per entity, and p99/p50 where
    a service reported both at once. Without a p50 (a training job's devices): over the columns, not a Python
    step per row."""
    names = name.tolist()
    if "latency_p50_s" in names:
        return _of_rows(list(zip(entity.tolist(), names, value.tolist(), time.tolist(), strict=True)))
    pick = np.flatnonzero(np.fromiter(map(METRICS.__contains__, names), bool, len(names)))
    return series_keys(entity[pick], name[pick]), time[pick].tolist(), value[pick].tolist()


def _of_rows(rows: list[tuple[str, str, float, float]]) -> Series:
    """:func:`of_metrics` of rows (entity, name, value, time)."""
    p50 = {(e, t): v for e, n, v, t in rows if n == "latency_p50_s"}
    keys, times, values = [], [], []
    for entity, name, v, t in rows:
        if name in METRICS:
            keys.append(series_key(entity, name))
            times.append(t)
            values.append(v)
        median = p50.get((entity, t)) if name == "latency_p99_s" else None
        if median:
            keys.append(series_key(entity, "latency_p99_over_p50"))
            times.append(t)
            values.append(v / median)
    return keys, times, values


def of_rollups(rollups: Iterable[Rollup]) -> Series:
    """Each window's mean cost or energy per output, at the window's end."""
    rows = [(series_key(r.entity, r.name), r.window_end, sum(r.values) / len(r.values)) for r in rollups
            if r.name in ROLLUPS and r.values]  # fmt: skip
    return [k for k, _, _ in rows], [t for _, t, _ in rows], [v for _, _, v in rows]
