"""Engine throughput on op spans (decode + validate + the engine's detectors), one core, in-process.

    .venv/bin/python bench/bench_engine.py [--ranks 1024] [--steps 20] [--repeats 3]

Issue 5's goal (>= 250k op spans/s at 1,024 ranks) counts graph building, critical path and what-if,
which the engine does not do yet: this is the baseline of what it does today (the straggler detector by
arrival lateness, per-rank compute sums, step-time drift and roll-ups), on the simulated training fabric.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.records import SourcePosition
from streams.pipeline import Processor
from streams.sim.scenarios import training_fabric


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    scenario = training_fabric(seed=1, ranks=args.ranks, steps=args.steps)
    messages = [value for kind, _, value in scenario.run() if kind == "telemetry"]
    rates = []
    for _ in range(args.repeats):
        processor = Processor()
        started = time.perf_counter()
        spans = 0
        for offset, raw in enumerate(messages):
            out = processor.telemetry(raw, SourcePosition("telemetry", 0, offset))
            spans += out.samples_by_kind.get("op", 0)
        rates.append(spans / (time.perf_counter() - started))
    rate = statistics.median(rates)
    print(f"{args.ranks} ranks, {args.steps} steps, {spans:,} op spans; median of {args.repeats}: "
          f"{rate:,.0f} op spans/s ({rate / 250_000:.2f}x issue 5's 250k goal, which also needs graph, critical path "
          "and what-if)")  # fmt: skip


if __name__ == "__main__":
    main()
