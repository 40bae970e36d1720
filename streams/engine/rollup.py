"""Windowed roll-ups of a job's key series: step time and accelerator-seconds per output unit."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Rollup:
    job: str
    entity: str
    name: str
    window_start: float
    window_end: float
    values: tuple[float, ...]
    total: float

    @property
    def id(self) -> str:
        key = f"rollup|{self.job}|{self.entity}|{self.name}|{self.window_start!r}"
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        v = np.asarray(self.values)
        return {
            "id": self.id, "job": self.job, "entity": self.entity, "name": self.name,
            "window_start": self.window_start, "window_end": self.window_end, "n": len(v),
            "mean": float(v.mean()), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "min": float(v.min()), "max": float(v.max()), "total": self.total,
        }  # fmt: skip


@dataclass
class StepWindow:
    """Collects ``size`` steps of one job, then yields its roll-ups (``step_s``, ``accel_s_per_output``)."""

    job: str
    size: int = 50
    _rows: list[tuple[float, float, float, float]] = field(default_factory=list)  # start, duration, out, accel

    def add(self, start: float, duration: float, output_units: float, accelerators: float) -> list[Rollup]:
        self._rows.append((start, duration, output_units, accelerators))
        if len(self._rows) < self.size:
            return []
        rows, self._rows = self._rows, []
        first, last = rows[0], rows[-1]
        entity = f"job:{self.job}"
        window = (first[0], last[0] + last[1])
        durations = tuple(r[1] for r in rows)
        out = [Rollup(self.job, entity, "step_s", *window, durations, sum(durations))]
        outputs = sum(r[2] for r in rows)
        if outputs > 0 and all(r[3] > 0 for r in rows):
            per_output = tuple(r[1] * r[3] / r[2] for r in rows if r[2] > 0)
            accel_s = sum(r[1] * r[3] for r in rows)
            out.append(Rollup(self.job, entity, "accel_s_per_output", *window, per_output, accel_s))
        return out
