"""The engine's settings (a frozen value; the service builds it from :mod:`streams.config`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.05
    structural_slowdown_threshold: float = 0.10  # T(actual) / T(ideal) - 1 of a slow step (structural_slowdown)
    rollup_steps: int = 50
    price_per_accel_hour: float = 0.0
    job_idle_s: float = 600.0  # a job without samples for this long (event time) is closed and evicted
