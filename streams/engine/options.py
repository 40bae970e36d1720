"""The engine's settings (a frozen value; the service builds it from :mod:`streams.config`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineConfig:
    step_drift_warmup: int = 20
    step_drift_threshold: float = 0.05
    structural_slowdown_threshold: float = 0.05  # T(actual) / T(ideal) - 1 of a slow step (structural_slowdown)
    rollup_steps: int = 50
    rollup_window_s: float = 600.0  # a roll-up window ends after rollup_steps steps or this long, whichever first
    price_per_accel_hour: float = 0.0
    series_every: int = 4  # the series-drift detector tests a series on every N-th of its samples (cost ÷ N)
    job_idle_s: float = 600.0  # a job without samples for this long (event time) is closed and evicted
