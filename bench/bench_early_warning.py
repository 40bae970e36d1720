"""Early warnings (``streams.engine.detectors.early_warning``): warned before a transition, and false alarms.

    .venv/bin/python bench/bench_early_warning.py [--seeds 1-40] [--steps 300] [--every 2] [--alpha 0.001]
        [--trigger variance_autocorrelation_tau,ar_trend]
        (the detector before: --trigger autocorrelation_tau,ar_trend; before that: --trigger ar_trend)
    .venv/bin/python bench/bench_early_warning.py --indicators [--seeds 1-40] [--every 2] [--rolling]

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
warnings at or after it, false alarms (warnings in runs without a transition) and which tests raised the
warnings (``raised_by``, ``+`` when several reached their level); then the detector's µs per update over
all cases (wall clock on a shared machine: compare runs made side by side).

``--indicators`` compares the tests themselves, offline (no hold, no change detector), on every span the
detector would test (every ``--every`` points, 60-150 points), as curves over the level (ROC): runs of the
AR(1) families in which each test (or combination: k tests each at the level / k) reaches its level at
least once, before the transition of ``ar1-ramp`` and its ``sampled/2``, ``noisy``, ``heavy`` variants,
and anywhere in ``ar1-steady``, ``ar1-trend``, ``heavy-tails``, ``ar1-steady noisy`` and ``ar1-steady
heavy``; then the same at one look (the last span). ``--rolling`` adds the rolling indicators against 999
surrogates (Dakos et al. 2012; about 0.1 s a span: use ``--every 10``).
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.engine.detectors.early_warning import (
    TESTS,
    TRIGGER,
    EarlyWarning,
    ar_fit,
    detrended,
    slowing_down,
    winsorised,
)
from streams.engine.detectors.kendall import autocorrelation_trend, joint_trend, one_sided, variance_trend
from streams.engine.detectors.rolling_trend import rolling_trend
from streams.sim.scenarios import SCENARIOS

Case = tuple[np.ndarray, int | None]  # the series, the transition's index (None: none)


def warned(
    x: np.ndarray, settings: dict[str, object], restarts: int | None = None, raisers: Counter[str] | None = None
) -> list[int]:
    """Indices of the warnings on ``x`` (``raisers`` counts the tests that raised them)."""
    detector = EarlyWarning("service:s", "latency_p99_s", **settings)  # type: ignore[arg-type]
    points = set(np.random.default_rng(restarts).choice(len(x), 5, replace=False).tolist()) if restarts else set()
    out = []
    for i, v in enumerate(x):
        if i in points:
            detector = pickle.loads(pickle.dumps(detector))
        if (found := detector.update(float(i), float(v))) is not None:
            out.append(i)
            if raisers is not None:
                raisers["+".join(found.evidence["raised_by"])] += 1
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


SINGLE = ("AR trend", "AR trend, not winsorised", "variance tau", "autocovariance tau",
          "variance tau, winsorised", "autocovariance tau, winsorised", "joint tau, winsorised")  # fmt: skip
ROLLING = ("rolling variance tau", "rolling autocorrelation tau", "rolling variance + autocorrelation tau")
COMBINED = {  # Bonferroni: k tests, each at the level / k
    "either tau, winsorised": ("variance tau, winsorised", "autocovariance tau, winsorised"),
    "AR trend or joint tau, winsorised (the trigger)": ("AR trend", "joint tau, winsorised"),
    "AR trend or autocovariance tau, winsorised (the trigger before)": ("AR trend", "autocovariance tau, winsorised"),
    "AR trend or autocovariance tau": ("AR trend", "autocovariance tau"),
    "AR trend or either tau, winsorised": ("AR trend", "variance tau, winsorised", "autocovariance tau, winsorised"),
    "either rolling tau": ("rolling variance tau", "rolling autocorrelation tau"),
    "AR trend or the rolling sum": ("AR trend", "rolling variance + autocorrelation tau"),
}
LEVELS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)


def span_p_values(part: np.ndarray, rolling: bool) -> list[float]:
    """One-sided p-values of each test (``SINGLE``, then ``ROLLING`` if ``rolling``) on one span."""
    r = detrended(part)
    y = winsorised(r)
    z = (float(ar_fit(y[None, :])[0][0]), slowing_down(part, clip=float("inf"))[0])
    p = [one_sided(v) for v in z] + [variance_trend(r)[1], autocorrelation_trend(r)[1]]
    p += [variance_trend(y)[1], autocorrelation_trend(y)[1], joint_trend(y)[1]]
    return p + (rolling_trend(part)[1].tolist() if rolling else [])


def look_p_values(x: np.ndarray, every: int, rolling: bool, span: int = 150, min_span: int = 60) -> np.ndarray:
    """p-values (looks × tests) over the spans the detector would test: every ``every`` points, the last
    ``span`` (at least ``min_span``)."""
    ends = range(min_span, len(x) + 1, every)
    return np.array([span_p_values(x[max(0, end - span) : end], rolling) for end in ends])


def curves(p_signal: list[np.ndarray], p_null: list[np.ndarray], names: tuple[str, ...], one_look: bool) -> None:
    """ROC over the level: ramps warned / runs without a transition warned, per test and combination."""
    column = {name: j for j, name in enumerate(names)}
    rows = {name: (name,) for name in names} | {k: v for k, v in COMBINED.items() if set(v) <= set(names)}
    print("| test | " + " | ".join(f"{level:g}" for level in LEVELS) + " |")
    print("| --- |" + " --- |" * len(LEVELS))
    for label, members in rows.items():
        idx = [column[m] for m in members]

        def smallest(p: np.ndarray, idx: list[int] = idx) -> float:
            looks = p[-1:] if one_look else p
            return float(len(idx) * looks[:, idx].min())

        s, n = np.array([smallest(p) for p in p_signal]), np.array([smallest(p) for p in p_null])
        cells = [f"{int((s <= level).sum())} / {int((n <= level).sum())}" for level in LEVELS]
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def compare_indicators(seeds: list[int], every: int, rolling: bool) -> None:
    ramp, steady = family("ar1-ramp"), family("ar1-steady")
    signal = [ramp, sampled(ramp), noisy(ramp, 1.0, 1.0), noisy(ramp, 0.1, 5.0)]
    null = [family(name) for name in ("ar1-steady", "ar1-trend", "heavy-tails")]
    null += [noisy(steady, 1.0, 1.0), noisy(steady, 0.1, 5.0)]
    p_signal = [look_p_values(x[:at], every, rolling) for make in signal for x, at in map(make, seeds)]
    p_null = [look_p_values(make(seed)[0], every, rolling) for make in null for seed in seeds]
    names = SINGLE + (ROLLING if rolling else ())
    print(f"{len(p_signal)} ramp runs (before the transition), {len(p_null)} runs without one; every {every}")
    print("cells: ramps warned / runs without one warned, at each level (a combination: k tests at level / k)")
    curves(p_signal, p_null, names, one_look=False)
    print("one look (the last span: the 150 points before the transition, the last 150 of the others)")
    curves(p_signal, p_null, names, one_look=True)


def all_cases(steps: int) -> dict[str, Callable[[int], Case]]:
    cases: dict[str, Callable[[int], Case]] = {}
    for name in ("serving-saturation", "serving-saturation-healthy"):
        base = saturation(name, steps)
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
    return cases


def detect(seeds: list[int], steps: int, settings: dict[str, object]) -> None:
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs per case); {settings}")
    print("| case | warned before the transition | lead time (points) median (range) | at or after it | "
          "false alarms (runs without one) | raised by |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- |")
    same, seconds, updates = True, 0.0, 0
    for label, make in all_cases(steps).items():
        leads, late, false, shifted = [], 0, 0, 0
        raisers: Counter[str] = Counter()
        for seed in seeds:
            x, at = make(seed)
            started = time.perf_counter()
            raised = warned(x, settings, raisers=raisers)
            seconds, updates = seconds + time.perf_counter() - started, updates + len(x)
            if label.endswith("as is"):
                same &= warned(x, settings, restarts=seed) == raised
            if at is None:
                false += len(raised)
                continue
            shifted += 1
            leads += [at - w for w in raised[:1] if w < at]
            late += sum(1 for w in raised if w >= at)
        lead = f"{statistics.median(leads):g} ({min(leads)}-{max(leads)})" if leads else "-"
        warned_cell = f"{len(leads)}/{shifted}" if shifted else "-"
        by = ", ".join(f"{name} {count}" for name, count in sorted(raisers.items())) or "-"
        print(f"| {label} | {warned_cell} | {lead} | {late if shifted else '-'} | "
              f"{false if not shifted else '-'} | {by} |", flush=True)  # fmt: skip
    print(f"restarts (pickled at 5 random points) give the same warnings: {same}")
    print(f"{1e6 * seconds / updates:.1f} µs per update ({updates} updates)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-40", help="a range a-b or a comma-separated list")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--indicators", action="store_true", help="compare the tests offline on the AR(1) families")
    parser.add_argument("--rolling", action="store_true", help="--indicators: the rolling taus too (slow)")
    parser.add_argument("--every", type=int, default=EarlyWarning.every, help="test every N points")
    parser.add_argument("--alpha", type=float, default=EarlyWarning.alpha, help="the level of each test of the trigger")
    parser.add_argument("--trigger", default=",".join(TRIGGER), help=f"tests raising a warning: {', '.join(TESTS)}")
    parser.add_argument("--surrogates", type=int, default=0, help="confirm against N noise-aware surrogates")
    parser.add_argument("--span", type=int, default=150, help="its span (the most points it tests at once)")
    args = parser.parse_args()
    if "-" in args.seeds:
        lo, hi = (int(s) for s in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    if args.indicators:
        compare_indicators(seeds, args.every, args.rolling)
        return
    trigger = tuple(args.trigger.split(","))
    settings = {"every": args.every, "alpha": args.alpha, "span": args.span, "surrogates": args.surrogates,
                "trigger": trigger}  # fmt: skip
    detect(seeds, args.steps, settings)


if __name__ == "__main__":
    main()
