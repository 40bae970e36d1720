"""Early warnings (``streams.engine.detectors.early_warning``): warned before a transition, and false alarms.

    .venv/bin/python bench/bench_early_warning.py [--seeds 1-40] [--steps 300]

Cases (none of them was used to choose the detector's settings: ``alpha`` is a significance level, the
span is as long as its bounded state allows):

- ``serving-saturation`` (the simulator: load creeps towards capacity, the p99 latency's recovery slows,
  then it tips) and its healthy twin, on the log of the p99 latency; and adversarial variations of both:
  ``sampled/2`` (every second window only), ``noisy`` (white measurement noise as large as the series'
  own spread added), ``heavy`` (a tenth of the points off by 5 spreads), ``restarts`` (the detector
  pickled and restored at 5 random points: must give the same warnings as ``as is``);
- families drawn here, not from the simulator: ``ar1-ramp`` (an AR(1) whose coefficient rises from 0.3
  to 0.97 over 200 points, then a jump of 8 spreads: the transition), ``ar1-steady`` (coefficient drawn
  from 0.1-0.95, constant), ``ar1-trend`` (the same plus a linear trend of 5 spreads), ``ar1-shift`` (a
  level shift of 6 spreads in the middle, no slowing down), ``seasonal`` (AR(1) plus a sine of period
  24 and 3 spreads), ``heavy-tails`` (Student-t, 3 degrees of freedom, innovations), each 300 points;
  ``ar1-ramp`` and ``ar1-steady`` also ``sampled/2``, ``noisy`` and ``heavy`` as above. The detector's
  ``every`` and ``alpha`` were chosen on these families only (serving-saturation is held out).

Prints per case: runs warned before the transition (with a transition), lead time median and range,
warnings at or after it, and false alarms (warnings in runs without a transition); then the detector's
µs per update over all cases (wall clock on a shared machine: compare runs made side by side).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.engine.detectors.early_warning import EarlyWarning
from streams.sim.scenarios import SCENARIOS

Case = tuple[np.ndarray, int | None]  # the series, the transition's index (None: none)


def warned(x: np.ndarray, restarts: int | None = None) -> list[int]:
    detector = EarlyWarning("service:s", "latency_p99_s")
    points = set(np.random.default_rng(restarts).choice(len(x), 5, replace=False).tolist()) if restarts else set()
    out = []
    for i, v in enumerate(x):
        if i in points:
            detector = pickle.loads(pickle.dumps(detector))
        if detector.update(float(i), float(v)) is not None:
            out.append(i)
    return out


def saturation(name: str, steps: int) -> Callable[[int], Case]:
    def make(seed: int) -> Case:
        truth = SCENARIOS[name](seed, 64, steps).ground_truth(seed)
        return np.log(truth["latency_p99_s"]), truth["transition_step"]

    return make


def sampled(make: Callable[[int], Case]) -> Callable[[int], Case]:
    def case(seed: int) -> Case:
        x, at = make(seed)
        return x[::2], None if at is None else at // 2

    return case


def noisy(make: Callable[[int], Case], share: float, size: float) -> Callable[[int], Case]:
    """Measurement noise on every point (``share`` 1) or outliers on a share of them, ``size`` spreads."""

    def case(seed: int) -> Case:
        x, at = make(seed)
        rng = np.random.default_rng(seed + 10_000)
        spread = float(np.std(x[: at or len(x)]))
        hit = rng.random(len(x)) < share
        return x + np.where(hit, size * spread * rng.standard_normal(len(x)), 0.0), at

    return case


def ar1(phi: np.ndarray, rng: np.random.Generator, innovations: np.ndarray | None = None) -> np.ndarray:
    e = rng.standard_normal(len(phi)) if innovations is None else innovations
    x = np.zeros(len(phi))
    for i in range(1, len(phi)):
        x[i] = phi[i] * x[i - 1] + e[i]
    return x


def family(name: str) -> Callable[[int], Case]:
    def make(seed: int) -> Case:
        rng = np.random.default_rng([seed, len(name)])
        n = 300
        if name == "ar1-ramp":
            phi = np.r_[np.linspace(0.3, 0.97, 200), np.full(100, 0.3)]
            x = ar1(phi, rng)
            return x + np.where(np.arange(n) >= 200, 8 * np.std(x[:100]), 0.0), 200
        phi = np.full(n, rng.uniform(0.1, 0.95))
        if name == "heavy-tails":
            return ar1(phi, rng, rng.standard_t(3, n)), None
        x = ar1(phi, rng)
        spread = float(np.std(x))
        t = np.arange(n)
        extra = {
            "ar1-steady": 0.0 * t,
            "ar1-trend": 5 * spread * t / n,
            "ar1-shift": np.where(t >= n // 2, 6 * spread, 0.0),
            "seasonal": 3 * spread * np.sin(2 * np.pi * t / 24),
        }[name]
        return x + extra, None

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-40", help="a range a-b or a comma-separated list")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if "-" in args.seeds:
        lo, hi = (int(s) for s in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    cases: dict[str, Callable[[int], Case]] = {}
    for name in ("serving-saturation", "serving-saturation-healthy"):
        base = saturation(name, args.steps)
        cases[f"{name} as is"] = base
        cases[f"{name} sampled/2"] = sampled(base)
        cases[f"{name} noisy"] = noisy(base, 1.0, 1.0)
        cases[f"{name} heavy"] = noisy(base, 0.1, 5.0)
    for name in ("ar1-ramp", "ar1-steady", "ar1-trend", "ar1-shift", "seasonal", "heavy-tails"):
        cases[name] = family(name)
    for name in ("ar1-ramp", "ar1-steady"):
        cases[f"{name} sampled/2"] = sampled(family(name))
        cases[f"{name} noisy"] = noisy(family(name), 1.0, 1.0)
        cases[f"{name} heavy"] = noisy(family(name), 0.1, 5.0)
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs per case)")
    print("| case | warned before the transition | lead time (points) median (range) | at or after it | "
          "false alarms (runs without one) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- |")
    same, seconds, updates = True, 0.0, 0
    for label, make in cases.items():
        leads, late, false, shifted = [], 0, 0, 0
        for seed in seeds:
            x, at = make(seed)
            started = time.perf_counter()
            raised = warned(x)
            seconds, updates = seconds + time.perf_counter() - started, updates + len(x)
            if label.endswith("as is"):
                same &= warned(x, restarts=seed) == raised
            if at is None:
                false += len(raised)
                continue
            shifted += 1
            leads += [at - w for w in raised[:1] if w < at]
            late += sum(1 for w in raised if w >= at)
        lead = f"{statistics.median(leads):g} ({min(leads)}-{max(leads)})" if leads else "-"
        warned_cell = f"{len(leads)}/{shifted}" if shifted else "-"
        print(f"| {label} | {warned_cell} | {lead} | {late if shifted else '-'} | "
              f"{false if not shifted else '-'} |", flush=True)  # fmt: skip
    print(f"restarts (pickled at 5 random points) give the same warnings: {same}")
    print(f"{1e6 * seconds / updates:.1f} µs per update ({updates} updates)")


if __name__ == "__main__":
    main()
