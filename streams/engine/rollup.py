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
    """Collects ``size`` steps of one job, then yields its roll-ups: ``step_s``; ``accel_s_per_output`` and
    its ratio to the job's first window (its healthy baseline, as the ratio is read); ``cost_per_output``
    when a price per accelerator-hour is set; ``energy_j`` and ``energy_j_per_output`` when power samples
    came in; ``wasted_accel_s`` of re-runs and retries (entity ``cause:retry_rerun``)."""

    job: str
    size: int = 50
    price_per_accel_hour: float = 0.0
    _rows: list[tuple[float, float, float, float]] = field(default_factory=list)  # start, duration, out, accel
    _baseline: float | None = None
    _energy_j: float = 0.0
    _rerun_accel_s: float = 0.0

    def add_energy(self, joules: float) -> None:
        self._energy_j += joules

    def add_rerun(self, accel_s: float) -> None:
        """Accelerator-seconds spent on work that had to be redone (a re-run step, a retried attempt)."""
        self._rerun_accel_s += accel_s  # 0 adds nothing: no roll-up row

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
            if self._baseline is None:
                self._baseline = float(np.median(per_output))
            ratio = tuple(v / self._baseline for v in per_output)
            out.append(Rollup(self.job, entity, "accel_s_per_output_ratio", *window, ratio, sum(ratio)))
            if self.price_per_accel_hour > 0:
                price = self.price_per_accel_hour / 3600
                cost = tuple(v * price for v in per_output)
                out.append(Rollup(self.job, entity, "cost_per_output", *window, cost, accel_s * price))
        if self._energy_j > 0:
            energy, self._energy_j = self._energy_j, 0.0
            out.append(Rollup(self.job, entity, "energy_j", *window, (energy,), energy))
            if outputs > 0:
                out.append(Rollup(self.job, entity, "energy_j_per_output", *window, (energy / outputs,), energy))
        if self._rerun_accel_s > 0:
            waste, self._rerun_accel_s = self._rerun_accel_s, 0.0
            out.append(Rollup(self.job, "cause:retry_rerun", "wasted_accel_s", *window, (waste,), waste))
        return out
