"""A serving scenario with critical slowing down: offered load creeps towards capacity, the service recovers
from small bursts ever more slowly, then tips into overload (a queue that no longer drains).

``steps`` are windows of ``window_s`` (10 s); ``ranks`` are accelerators (4 per replica). The latency's
deviation from its typical value ``x`` follows ``x' = (1 - r)·x + noise`` where ``r``, the share of a
deviation the service works off per window, is the spare capacity ``1 - load/capacity`` relative to its
value at the start: from a fifth of the run the load rises from 50% towards 100% of capacity, so ``r``
falls from 0.5 towards 0.03 (the deviations grow and last longer: rising variance and lag-1
autocorrelation), and at seven tenths the load passes capacity: the p99 latency jumps to about three
times its old level and stays there (the regime shift). ``serving-saturation-healthy``: the same service
at a steady 50% load, nothing injected.

Per window, one message (source ``gateway/<job>``) holds a ``step`` sample (``window_summary``) and
``metric`` samples of ``service:<job>``: ``latency_p50_s``, ``latency_p99_s``, ``util`` (load over
capacity), ``queue_depth`` and ``requests``. The ground truth adds ``transition_step`` (the first window
of the new regime), ``recovery_rate`` per window and ``latency_p99_s``; its cause
``critical_slowing_down`` runs from the start of the rise to the transition (the lead time of an early
warning is ``transition_step`` minus the window it was raised in).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.sim.base import T0, Message, cause, envelope, metric_rows, window_summary

CAPACITY_RPS = 1000.0
R0, R_MIN = 0.5, 0.03  # share of a deviation worked off per window: at 50% load, and near saturation


@dataclass
class SaturationScenario:
    name: str
    seed: int
    steps: int
    accelerators: int
    healthy: bool = False
    job: str = "api"
    window_s: float = 10.0
    expected_findings: list[str] = field(default_factory=list)
    samples: int = 0

    @property
    def rise(self) -> int:
        return self.steps // 5

    @property
    def transition(self) -> int:
        return (7 * self.steps) // 10

    def load(self, w: int) -> float:
        """Offered load over capacity in window ``w``."""
        if self.healthy or w < self.rise:
            return 0.5
        if w >= self.transition:
            return 1.1
        return 0.5 + 0.5 * (w - self.rise) / (self.transition - self.rise)

    def recovery_rate(self, w: int) -> float:
        rho = self.load(w)
        return R0 if rho >= 1.0 else max(R_MIN, R0 * (1.0 - rho) / 0.5)

    def series(self) -> tuple[np.ndarray, np.ndarray]:
        """(p50, p99) latency per window, s."""
        rng = np.random.default_rng(self.seed)
        x, p50, p99 = 0.0, np.zeros(self.steps), np.zeros(self.steps)
        noise = np.sqrt(1.0 - (1.0 - R0) ** 2)  # unit variance at the start
        for w in range(self.steps):
            r = self.recovery_rate(w)
            x = (1.0 - r) * x + noise * rng.standard_normal()
            overloaded = not self.healthy and w >= self.transition
            base = 0.6 if overloaded else 0.2
            p50[w] = base * 0.5 * math.exp(0.05 * x)
            p99[w] = base * math.exp(0.08 * x)
        return p50, p99

    def run(self) -> Iterator[Message]:
        self.p50, self.p99 = self.series()
        self.samples = 0
        svc = f"service:{self.job}"
        for w in range(self.steps):
            start, rho = T0 + w * self.window_s, self.load(w)
            fresh = rho * CAPACITY_RPS * self.window_s
            good = min(fresh, CAPACITY_RPS * self.window_s)
            queue = max(0.0, (rho - 1.0) * CAPACITY_RPS * self.window_s * (w - self.transition + 1)) if rho > 1 else (
                rho / (1.0 - rho))  # fmt: skip
            summary = window_summary(self.job, w, start, self.window_s, fresh, fresh, good, 0.0, self.accelerators)
            rows = [(svc, "latency_p50_s", float(self.p50[w]), "s"), (svc, "latency_p99_s", float(self.p99[w]), "s"),
                    (svc, "util", min(rho, 1.0), "1"), (svc, "queue_depth", float(queue), "1"),
                    (svc, "requests", fresh, "1")]  # fmt: skip
            batches = [metric_rows(rows, start + self.window_s, self.job), summary]
            self.samples += sum(b["n"] for b in batches)
            yield "telemetry", self.job, envelope(f"gateway/{self.job}", w, batches)

    def ground_truth(self, seed: int) -> dict[str, Any]:
        if not hasattr(self, "p99"):
            self.p50, self.p99 = self.series()
        causes = [] if self.healthy else [cause(
            f"service:{self.job}", "critical_slowing_down", self.rise, self.transition, R0 / R_MIN,
            start_time=T0 + self.rise * self.window_s, end_time=T0 + self.transition * self.window_s,
            transition_step=self.transition)]  # fmt: skip
        return {
            "scenario": self.name, "seed": seed, "job": self.job, "steps": self.steps, "t0": T0,
            "window_s": self.window_s, "causes": causes, "expected_findings": self.expected_findings,
            "transition_step": None if self.healthy else self.transition,
            "recovery_rate": [self.recovery_rate(w) for w in range(self.steps)],
            "step_time_s": [self.window_s] * self.steps,
            "counterfactual_step_time_s": [self.window_s] * self.steps,
            "latency_p50_s": self.p50.tolist(), "latency_p99_s": self.p99.tolist(),
        }  # fmt: skip


def serving_saturation(seed: int, ranks: int, steps: int, healthy: bool = False) -> SaturationScenario:
    if steps < 100:
        raise ValueError("serving-saturation needs --steps 100 or more (the slowing down needs room to show)")
    name = "serving-saturation-healthy" if healthy else "serving-saturation"
    scenario = SaturationScenario(name, seed, steps, max(ranks, 4), healthy=healthy)
    scenario.expected_findings = [] if healthy else ["early_warning"]
    return scenario
