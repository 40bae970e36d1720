"""driftlog's change detector (``streams.engine.detectors.changepoint``) beside river's ADWIN and PageHinkley
(streaming) and ruptures' binary segmentation (offline reference) on labelled synthetic series.

    .venv/bin/python bench/bench_changepoint.py [--seeds 1,2,3] [--json changepoint-bench.json]
    .venv/bin/python bench/bench_changepoint.py --memory    # 10M updates: the state does not grow

The families were written down before any score was looked at, and are not tuned on. Every series has a
random scale ``s = 10^U(-3, 3)`` (noise ``σ = s``) and a random level ``s·U(-5, 5)`` unless said otherwise;
change positions are uniform with at least 30 points between changes and from either end (short: 15):

- ``level``: 1–3 level shifts of ±U(1, 4)·σ, up or down;
- ``variance``: 1–3 changes of the noise by a factor 2^±U(1, 2);
- ``slope``: 1–3 changes of slope (continuous line) of ±U(0.02, 0.1)·σ per point;
- ``multi``: 3–5 changes, each a level shift, a variance change or a slope change (as above);
- ``seasonal``: 1–3 level shifts of ±U(2, 5)·σ on a sine of period U{12..48} and amplitude U(0.5, 1.5)·σ;
- ``heavy_tails``: 1–3 level shifts of ±U(2, 5)·σ in Student-t noise with 3 degrees of freedom;
- ``negative``: 1–3 level shifts of ±U(1, 4)·σ at a level of -s·U(1, 100);
- ``near_zero``: 1–3 level shifts of ±U(1, 4)·σ around 0;
- ``short``: 40–100 points, one level shift of ±U(2, 5)·σ.

Lengths are U{300..800} (short: U{40..100}); 15 series per family and seed. False alarms are counted on
separate stationary series (Gaussian, Student-t 3, and near zero with a negative level), 30 × 2,000 points
each.

Scores, per series, as in the change-point literature (van den Burg & Williams, 2020): F1 with a margin
of 5 points (a true change is found by at most one reported location within 5 points; the start of the
series counts as a change in both sets), and covering (the mean over true segments, weighted by length,
of the best Jaccard overlap with a reported segment). Streaming detectors report a location (driftlog:
the best split; ADWIN and PageHinkley give none, so their alarm time is used) and a detection time: the
delay is from a true change to the first alarm before the next one (median over found changes).
µs per update: all series updated together (driftlog: one vectorised call per time step; river: one
object per series; Binseg: its fit time per point, independent of the number of series).
``driftlog every=4`` is the same detector testing each series on every fourth of its samples (cheaper;
a change is found up to 3 samples later, located the same way).

Baselines as a user would run them: river with its defaults on the series standardised by the median and
noise (MAD of differences) of its first 20 points (ADWIN assumes values in [0, 1]; PageHinkley's threshold
is in data units); ruptures ``Binseg(model="l2", min_size=5, jump=1)`` with the BIC-style penalty
``2·σ̂²·log n`` (σ̂ from the MAD of differences, the same estimator driftlog uses).
Figures: median over seeds of the mean over series.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import ruptures as rpt
from river import drift

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from streams.engine.detectors.changepoint import MAD_TO_SIGMA, ChangePoint

FAMILIES = ("level", "variance", "slope", "multi", "seasonal", "heavy_tails", "negative", "near_zero", "short")
STATIONARY = ("gaussian", "student_t3", "negative_near_zero")
MARGIN = 5


class Series(NamedTuple):
    x: np.ndarray
    changes: list[int]  # first index of each new segment


class Result(NamedTuple):
    locations: list[int]
    detections: list[int]


def _positions(rng: np.random.Generator, n: int, count: int, gap: int) -> list[int]:
    for _ in range(1000):
        pos = sorted(int(p) for p in rng.integers(gap, n - gap, count))
        if all(b - a >= gap for a, b in itertools.pairwise(pos)):
            return pos
    return [n // 2]


def make_series(family: str, rng: np.random.Generator) -> Series:
    short = family == "short"
    n = int(rng.integers(40, 101) if short else rng.integers(300, 801))
    scale = 10 ** rng.uniform(-3, 3)
    level = scale * rng.uniform(-5, 5)
    if family == "negative":
        level = -scale * rng.uniform(1, 100)
    elif family == "near_zero":
        level = 0.0
    count = 1 if short else int(rng.integers(3, 6) if family == "multi" else rng.integers(1, 4))
    changes = _positions(rng, n, count, 15 if short else 30)
    noise = rng.standard_t(3, n) if family == "heavy_tails" else rng.standard_normal(n)
    mean, sd, slope = np.full(n, level), np.full(n, scale), np.zeros(n)
    for c in changes:
        kind = rng.choice(["level", "variance", "slope"]) if family == "multi" else family
        sign = rng.choice([-1.0, 1.0])
        if kind == "variance":
            sd[c:] *= 2.0 ** (sign * rng.uniform(1, 2))
        elif kind == "slope":
            slope[c:] += sign * rng.uniform(0.02, 0.1) * scale
        else:
            big = family in ("seasonal", "heavy_tails", "short")
            mean[c:] += sign * (rng.uniform(2, 5) if big else rng.uniform(1, 4)) * scale
    trend = np.cumsum(slope)
    x = mean + trend + sd * noise
    if family == "seasonal":
        period, amp = int(rng.integers(12, 49)), rng.uniform(0.5, 1.5) * scale
        x += amp * np.sin(2 * np.pi * np.arange(n) / period + rng.uniform(0, 2 * np.pi))
    return Series(x, changes)


def make_stationary(family: str, rng: np.random.Generator, n: int = 2000) -> Series:
    scale = 10 ** rng.uniform(-3, 3)
    if family == "gaussian":
        return Series(scale * rng.uniform(-5, 5) + scale * rng.standard_normal(n), [])
    if family == "student_t3":
        return Series(scale * rng.uniform(-5, 5) + scale * rng.standard_t(3, n), [])
    return Series(-0.1 * scale + scale * rng.standard_normal(n), [])


# ---- detectors: each takes a list of series and returns a Result per series ----


def run_driftlog(series: list[Series], every: int = 1) -> list[Result]:
    detector = ChangePoint(len(series), every=every)
    length = max(len(s.x) for s in series)
    values = np.full((len(series), length), np.nan)
    for i, s in enumerate(series):
        values[i, : len(s.x)] = s.x
    rows = np.arange(len(series))
    out = [Result([], []) for _ in series]
    lengths = np.array([len(s.x) for s in series])
    for t in range(length):
        alive = rows[t < lengths]
        for c in detector.update(alive, values[alive, t]):
            out[c.series].locations.append(c.at)
            out[c.series].detections.append(c.detected)
    return out


def _standardised(x: np.ndarray) -> np.ndarray:
    head = x[:20]
    d = np.diff(head)
    sigma = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA or 1.0
    return (x - float(np.median(head))) / sigma


def _river(make: Callable[[], Any]) -> Callable[[list[Series]], list[Result]]:
    def run(series: list[Series]) -> list[Result]:
        out = []
        for s in series:
            detector, alarms = make(), []
            for t, v in enumerate(_standardised(s.x)):
                detector.update(float(v))
                if detector.drift_detected:
                    alarms.append(t)
            out.append(Result(alarms, alarms))
        return out

    return run


def run_binseg(series: list[Series]) -> list[Result]:
    out = []
    for s in series:
        d = np.diff(s.x)
        sigma = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA or 1.0
        bkps = rpt.Binseg(model="l2", min_size=5, jump=1).fit(s.x).predict(pen=2 * sigma**2 * np.log(len(s.x)))
        out.append(Result([b for b in bkps if b < len(s.x)], []))
    return out


DETECTORS: dict[str, Callable[[list[Series]], list[Result]]] = {
    "driftlog": run_driftlog,
    "driftlog every=4": lambda series: run_driftlog(series, every=4),
    "river ADWIN": _river(drift.ADWIN),
    "river PageHinkley": _river(drift.PageHinkley),
    "ruptures Binseg": run_binseg,
}
OFFLINE = ("ruptures Binseg",)


# ---- scores ----


def f1(truth: list[int], found: list[int], margin: int = MARGIN) -> float:
    """F1 with the series start counted as a change in both sets; each true change matched at most once."""
    true_set, pred = [0, *truth], sorted({0, *found})
    used: set[int] = set()
    tp = 0
    for t in true_set:
        match = next((p for p in pred if abs(p - t) <= margin and p not in used), None)
        if match is not None:
            used.add(match)
            tp += 1
    precision, recall = tp / len(pred), tp / len(true_set)
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def covering(truth: list[int], found: list[int], n: int) -> float:
    def segments(cps: list[int]) -> list[tuple[int, int]]:
        bounds = [0, *sorted({c for c in cps if 0 < c < n}), n]
        return list(itertools.pairwise(bounds))

    mine = segments(found)
    total = 0.0
    for a, b in segments(truth):
        best = max((min(b, d) - max(a, c)) / (max(b, d) - min(a, c)) for c, d in mine)
        total += (b - a) * max(best, 0.0)
    return total / n


def delays(truth: list[int], detections: list[int], n: int) -> list[int]:
    ends = [*truth[1:], n]
    out = []
    for start, end in zip(truth, ends, strict=True):
        after = [d for d in detections if start <= d < end]
        if after:
            out.append(after[0] - start)
    return out


def score_seed(seed: int) -> dict[str, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    data = {f: [make_series(f, rng) for _ in range(15)] for f in FAMILIES}
    quiet = {f: [make_stationary(f, rng) for _ in range(30)] for f in STATIONARY}
    rows: dict[str, dict[str, Any]] = {}
    for name, run in DETECTORS.items():
        f1s, covs, lags, per_family = [], [], [], {}
        for family, series in data.items():
            results = run(series)
            fam_f1 = [f1(s.changes, r.locations) for s, r in zip(series, results, strict=True)]
            f1s += fam_f1
            covs += [covering(s.changes, r.locations, len(s.x)) for s, r in zip(series, results, strict=True)]
            per_family[family] = statistics.mean(fam_f1)
            if name not in OFFLINE:
                lags += [d for s, r in zip(series, results, strict=True) for d in delays(s.changes, r.detections,
                                                                                       len(s.x))]  # fmt: skip
        alarms = points = 0
        for series in quiet.values():
            results = run(series)
            alarms += sum(len(r.locations) for r in results)
            points += sum(len(s.x) for s in series)
        rows[name] = {"f1": statistics.mean(f1s), "covering": statistics.mean(covs),
                      "delay": statistics.median(lags) if lags else None,
                      "false_alarms_per_100k": alarms * 1e5 / points, "f1_by_family": per_family}  # fmt: skip
    rows["no change"] = {
        "f1": statistics.mean(f1(s.changes, []) for ss in data.values() for s in ss),
        "covering": statistics.mean(covering(s.changes, [], len(s.x)) for ss in data.values() for s in ss),
        "delay": None, "false_alarms_per_100k": 0.0,
        "f1_by_family": {f: statistics.mean(f1(s.changes, []) for s in ss) for f, ss in data.items()},
    }  # fmt: skip
    return rows


# ---- speed ----


def speed(series_count: int, steps: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((series_count, steps + 40))
    rows = np.arange(series_count)
    out = {}
    for name, every in (("driftlog", 1), ("driftlog every=4", 4)):
        detector = ChangePoint(series_count, every=every)
        for t in range(40):  # past the warm-up: the steady state is timed
            detector.update(rows, x[:, t])
        started = time.perf_counter()
        for t in range(40, 40 + steps):
            detector.update(rows, x[:, t])
        out[name] = (time.perf_counter() - started) * 1e6 / (series_count * steps)
    for name, make in (("river ADWIN", drift.ADWIN), ("river PageHinkley", drift.PageHinkley)):
        objs = [make() for _ in range(series_count)]
        river_steps = max(1, min(steps, 2_000_000 // series_count // 10))
        started = time.perf_counter()
        for t in range(river_steps):
            col = x[:, t].tolist()
            for d, v in zip(objs, col, strict=True):
                d.update(v)  # type: ignore[no-untyped-call]
        out[name] = (time.perf_counter() - started) * 1e6 / (series_count * river_steps)
    sample = [x[i, :500] for i in range(min(series_count, 200))]
    started = time.perf_counter()
    for s in sample:
        rpt.Binseg(model="l2", min_size=5, jump=1).fit(s).predict(pen=2 * np.log(500))
    out["ruptures Binseg"] = (time.perf_counter() - started) * 1e6 / (len(sample) * 500)
    return out


def memory(series_count: int = 100, steps: int = 100_000) -> dict[str, int]:
    """10M updates (100 series x 100,000 steps, a level shift every 1,000 steps so that it restarts
    often): the detector's pickled size after the warm-up and at the end."""
    rng = np.random.default_rng(0)
    detector, rows = ChangePoint(series_count), np.arange(series_count)
    sizes, changes = {}, 0
    for t in range(steps):
        level = 5.0 * ((t // 1000) % 2)
        changes += len(detector.update(rows, level + rng.standard_normal(series_count)))
        if t + 1 in (1_000, steps):
            sizes[f"pickled_bytes_after_{(t + 1) * series_count}_updates"] = len(pickle.dumps(detector))
    return {**sizes, "changes": changes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--json", type=Path, default=Path("changepoint-bench.json"))
    parser.add_argument("--speed-steps", type=int, default=20)
    parser.add_argument("--memory", action="store_true", help="only the 10M-update bounded-state check")
    args = parser.parse_args()
    if args.memory:
        print(json.dumps(memory(), indent=2))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    per_seed = [score_seed(s) for s in seeds]
    names = list(per_seed[0])
    fast = {k: speed(k, args.speed_steps) for k in (1_000, 100_000)}
    table: dict[str, dict[str, Any]] = {}
    for name in names:

        def med(key: str, name: str = name) -> float | None:
            vals = [r[name][key] for r in per_seed if r[name][key] is not None]
            return statistics.median(vals) if vals else None

        table[name] = {
            "f1": med("f1"), "covering": med("covering"), "delay": med("delay"),
            "false_alarms_per_100k": med("false_alarms_per_100k"),
            "us_per_update_1k": fast[1_000].get(name), "us_per_update_100k": fast[100_000].get(name),
            "f1_by_family": {f: statistics.median(r[name]["f1_by_family"][f] for r in per_seed) for f in FAMILIES},
        }  # fmt: skip
    cols = ["f1", "covering", "delay", "false_alarms_per_100k", "us_per_update_1k", "us_per_update_100k"]

    def cell(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    print(f"seeds {seeds}; median over seeds of the mean over series")
    print("detector".ljust(18) + "".join(c.rjust(24) for c in cols))
    for name, row in table.items():
        print(name.ljust(18) + "".join(cell(row[c]).rjust(24) for c in cols))
    print("\nF1 by family")
    print("detector".ljust(18) + "".join(f.rjust(12) for f in FAMILIES))
    for name, row in table.items():
        print(name.ljust(18) + "".join(cell(row["f1_by_family"][f]).rjust(12) for f in FAMILIES))
    args.json.write_text(json.dumps({"seeds": seeds, "table": table}, indent=2))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
