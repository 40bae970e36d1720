"""Cost per series update of the engine's series-drift detector (``SeriesDrift``: named keys, ``ChangePoint``
under it, co-moving changes grouped) at thousands of series, for several ``every`` (a series is tested on
every N-th of its samples; ``DRIFTLOG_SERIES_EVERY``).

    .venv/bin/python bench/bench_series_drift.py [--series 1000,4000,16000] [--steps 200] [--every 1,2,4,8]

The input is what a large job sends: one ``util`` sample per device per call (a metrics batch), device
utilisation around 0.8 with noise, every device's level stepping down by 10% at 60% of the run and a tenth
of them stepping up at 30%. Prints, per series count and ``every``, the median over ``--repeat`` runs of
the microseconds per series update after the warm-up (the detector's first ``warmup`` samples are not
timed: they only fill windows), and the ``series_drift`` findings of the run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.engine.detectors.changepoint import ChangePoint
from streams.engine.detectors.series_drift import SeriesDrift, series_key


def run(series: int, steps: int, every: int, seed: int) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    keys = [series_key(f"device:n{i // 8}/gpu{i % 8}", "util") for i in range(series)]
    up = np.arange(series) % 10 == 0
    detector = SeriesDrift(job="bench", detector=ChangePoint(every=every))
    warm = detector.detector.warmup + 2
    found, elapsed = 0, 0.0
    for step in range(steps):
        level = 0.8 * (0.9 if step >= 0.6 * steps else 1.0) + np.where(up & (step >= 0.3 * steps), 0.1, 0.0)
        values = level + 0.01 * rng.standard_normal(series)
        times = np.full(series, 10.0 * step)
        start = time.perf_counter()
        found += len(detector.update(keys, times, values))
        if step >= warm:
            elapsed += time.perf_counter() - start
    found += len(detector.flush())
    return elapsed / (series * (steps - warm)) * 1e6, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", default="1000,4000,16000")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", default="1,2,4,8")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print("| series | every | µs / series update (median) | findings |")
    print("| --- | --- | --- | --- |")
    for n in (int(s) for s in args.series.split(",")):
        for every in (int(e) for e in args.every.split(",")):
            runs = [run(n, args.steps, every, seed) for seed in range(1, args.repeat + 1)]
            us = statistics.median(r[0] for r in runs)
            print(f"| {n:,} | {every} | {us:.1f} | {runs[0][1]} |", flush=True)


if __name__ == "__main__":
    main()
