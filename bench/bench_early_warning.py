"""Early warnings (``streams.engine.detectors.early_warning``): warned before a transition, and false alarms.

    .venv/bin/python bench/bench_early_warning.py [--seeds 1-40] [--steps 300] [--every 2] [--alpha 0.001]
    .venv/bin/python bench/bench_early_warning.py --indicators [--seeds 1-40] [--every 2] [--alpha 0.001]

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
  ``ar1-ramp`` and ``ar1-steady`` also ``sampled/2``, ``noisy`` and ``heavy`` as above (settings of the
  detector are compared on these families; serving-saturation is held out). ``--every`` and ``--alpha``
  run the detector with other settings than its defaults.

Prints per case: runs warned before the transition (with a transition), lead time median and range,
warnings at or after it, and false alarms (warnings in runs without a transition); then the detector's
µs per update over all cases (wall clock on a shared machine: compare runs made side by side).

``--indicators`` compares the tests themselves, offline (no hold, no change detector), on every span the
detector would test (every 2 points, 60-150 points): runs of the AR(1) families in which each test
(or combination) reaches its level at least once, before the transition of ``ar1-ramp`` and its
``sampled/2``, ``noisy``, ``heavy`` variants, and anywhere in ``ar1-steady``, ``ar1-trend``,
``heavy-tails``, ``ar1-steady noisy`` and ``ar1-steady heavy``.
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.engine.detectors.early_warning import EarlyWarning, calibrated, detrended, slowing_down
from streams.engine.detectors.kendall import autocorrelation_trend, variance_trend
from streams.engine.detectors.rolling_trend import rolling_trend
from streams.sim.scenarios import SCENARIOS

Case = tuple[np.ndarray, int | None]  # the series, the transition's index (None: none)


def warned(x: np.ndarray, restarts: int | None = None, **settings: float) -> list[int]:
    detector = EarlyWarning("service:s", "latency_p99_s", **settings)  # type: ignore[arg-type]
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


TESTS = ("AR trend", "AR trend, not winsorised", "variance tau", "autocovariance tau", "rolling variance tau",
         "rolling autocorrelation tau", "rolling variance + autocorrelation tau")  # fmt: skip
COMBINED = ("AR trend or variance tau (Bonferroni)", "AR trend or either tau (Bonferroni)",
            "AR trend or rolling sum (Bonferroni)", "AR trend and its noise-aware surrogates")  # fmt: skip


def smallest_p_values(x: np.ndarray, span: int = 150, min_span: int = 60, every: int = 2) -> np.ndarray:
    """Per test (``TESTS``, then ``COMBINED``), the smallest p-value over the spans the detector would test,
    then the p-values of the last span alone (one look, as in an offline analysis)."""
    rows = []
    for end in range(min_span, len(x) + 1, every):
        part = x[max(0, end - span) : end]
        r = detrended(part)
        z = (slowing_down(part)[0], slowing_down(part, clip=float("inf"))[0])
        p = [0.5 * math.erfc(v / math.sqrt(2)) for v in z] + [variance_trend(r)[1], autocorrelation_trend(r)[1]]
        p += rolling_trend(part)[1].tolist()
        noise_aware = max(p[0], calibrated(part, z[0], 999)) if p[0] <= 0.01 else p[0]  # (only where it may matter)
        rows.append([*p, 2 * min(p[0], p[2]), 3 * min(p[0], p[2], p[3]), 2 * min(p[0], p[6]), noise_aware])
    smallest: np.ndarray = np.r_[np.array(rows).min(axis=0), rows[-1]]
    return smallest


def compare_indicators(seeds: list[int], every: int, alpha: float) -> None:
    ramp, steady = family("ar1-ramp"), family("ar1-steady")
    signal = [ramp, sampled(ramp), noisy(ramp, 1.0, 1.0), noisy(ramp, 0.1, 5.0)]
    null = [family(name) for name in ("ar1-steady", "ar1-trend", "heavy-tails")]
    null += [noisy(steady, 1.0, 1.0), noisy(steady, 0.1, 5.0)]
    p_signal = np.array([smallest_p_values(x[:at], every=every) for make in signal for x, at in map(make, seeds)])
    p_null = np.array([smallest_p_values(make(seed)[0], every=every) for make in null for seed in seeds])
    print(f"{len(p_signal)} ramp runs (before the transition), {len(p_null)} runs without one")
    print("| test | level | ramps warned | runs without one warned |")
    print("| --- | --- | --- | --- |")
    names = TESTS + COMBINED
    for level in (alpha / 2, alpha, 2 * alpha):
        for j, name in enumerate(names):
            warned_ramps, false = int((p_signal[:, j] <= level).sum()), int((p_null[:, j] <= level).sum())
            print(f"| {name} | {level:g} | {warned_ramps} | {false} |", flush=True)
    print("one look (the last span: the 150 points before the transition, the last 150 of the others)")
    for level in (alpha, 10 * alpha, 50 * alpha):
        for j, name in enumerate(names, start=len(names)):
            warned_ramps, false = int((p_signal[:, j] <= level).sum()), int((p_null[:, j] <= level).sum())
            print(f"| {name} (one look) | {level:g} | {warned_ramps} | {false} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-40", help="a range a-b or a comma-separated list")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--indicators", action="store_true", help="compare the tests offline on the AR(1) families")
    parser.add_argument("--every", type=int, default=2, help="test every N points (the detector's every)")
    parser.add_argument("--alpha", type=float, default=0.001, help="its alpha (--indicators: half, double too)")
    parser.add_argument("--surrogates", type=int, default=0, help="confirm against N noise-aware surrogates")
    parser.add_argument("--span", type=int, default=150, help="its span (the most points it tests at once)")
    args = parser.parse_args()
    if "-" in args.seeds:
        lo, hi = (int(s) for s in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    if args.indicators:
        compare_indicators(seeds, args.every, args.alpha)
        return
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
    settings = {"every": args.every, "alpha": args.alpha, "span": args.span, "surrogates": args.surrogates}
    for label, make in cases.items():
        leads, late, false, shifted = [], 0, 0, 0
        for seed in seeds:
            x, at = make(seed)
            started = time.perf_counter()
            raised = warned(x, **settings)
            seconds, updates = seconds + time.perf_counter() - started, updates + len(x)
            if label.endswith("as is"):
                same &= warned(x, restarts=seed, **settings) == raised
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
