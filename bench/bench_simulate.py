"""Simulator generation rate (samples/s, including encoding the envelopes) at 1k and 16k ranks.

.venv/bin/python bench/bench_simulate.py [--steps 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.sim.scenarios import training_fabric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    for ranks in (1024, 16384):
        scenario = training_fabric(seed=1, ranks=ranks, steps=args.steps)
        started = time.perf_counter()
        size = sum(len(value) for _, _, value in scenario.run())
        elapsed = time.perf_counter() - started
        print(f"{ranks:>6} ranks, {args.steps} steps: {scenario.samples:,} samples, {size / 1e6:,.0f} MB of envelopes"
              f" in {elapsed:.1f}s = {scenario.samples / elapsed:,.0f} samples/s")  # fmt: skip


if __name__ == "__main__":
    main()
