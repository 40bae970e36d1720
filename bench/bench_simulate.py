"""Simulator generation rate (samples/s, including encoding the envelopes) at 1k and 16k ranks: the median
of ``--repeat`` runs of the training-fabric scenario.

.venv/bin/python bench/bench_simulate.py [--steps 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.sim.scenarios import training_fabric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for ranks in (1024, 16384):
        rates, size = [], 0
        for _ in range(args.repeat):
            scenario = training_fabric(seed=1, ranks=ranks, steps=args.steps)
            started = time.perf_counter()
            size = sum(len(value) for _, _, value in scenario.run())
            rates.append(scenario.samples / (time.perf_counter() - started))
        print(f"{ranks:>6} ranks, {args.steps} steps: {scenario.samples:,} samples, {size / 1e6:,.0f} MB of envelopes;"
              f" median of {args.repeat}: {statistics.median(rates):,.0f} samples/s"
              f" (min {min(rates):,.0f}, max {max(rates):,.0f})")  # fmt: skip


if __name__ == "__main__":
    main()
