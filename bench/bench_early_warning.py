"""Early warnings (``streams.engine.detectors.early_warning``) on the simulated critical slowing down:
the p99 latency of ``serving-saturation`` (load creeps towards capacity, then the service tips) and of its
healthy twin, per seed.

    .venv/bin/python bench/bench_early_warning.py [--seeds 1-20] [--steps 300]

Prints, per scenario: the runs warned before the transition, the lead time (transition step minus the
step the first warning was confirmed at; median and range), warnings at or after the transition, and
warnings on the healthy twin (false alarms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.engine.detectors.early_warning import EarlyWarning
from streams.sim.scenarios import SCENARIOS


def warned(name: str, seed: int, steps: int) -> tuple[list[int], int | None]:
    truth = SCENARIOS[name](seed, 64, steps).ground_truth(seed)
    detector = EarlyWarning(f"service:{truth['job']}", "latency_p99_s")
    p99 = np.log(truth["latency_p99_s"])
    return [w for w, v in enumerate(p99) if detector.update(float(w), float(v))], truth["transition_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1-20", help="a range a-b or a comma-separated list")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    if "-" in args.seeds:
        lo, hi = (int(s) for s in args.seeds.split("-"))
        seeds = list(range(lo, hi + 1))
    else:
        seeds = [int(s) for s in args.seeds.split(",")]
    leads, late = [], 0
    for seed in seeds:
        raised, transition = warned("serving-saturation", seed, args.steps)
        assert transition is not None
        leads += [transition - w for w in raised[:1] if w < transition]
        late += sum(1 for w in raised if w >= transition)
    healthy = sum(len(warned("serving-saturation-healthy", seed, args.steps)[0]) for seed in seeds)
    print(f"seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} runs each), {args.steps} windows of 10 s")
    print(f"serving-saturation: warned before the transition in {len(leads)}/{len(seeds)} runs", end="")
    if leads:
        print(f"; lead time median {statistics.median(leads)} windows (range {min(leads)}-{max(leads)})", end="")
    print(f"; warnings at or after the transition: {late}")
    print(f"serving-saturation-healthy: false alarms {healthy} in {len(seeds)} runs")


if __name__ == "__main__":
    main()
