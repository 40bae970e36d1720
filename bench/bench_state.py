"""Bounded state: jobs come and go; idle ones are closed and evicted, so state and memory stay flat.

    .venv/bin/python bench/bench_state.py [--jobs 10000] [--steps 20] [--every 10] [--idle 60]

Job k sends ``--steps`` step summaries of 1 s starting at k × ``--every`` seconds of event time (one message
each), through one processor. Every tenth of the way it prints the jobs held, the pickled state size (engine,
and the whole processor with its event-time buffer and admission) and the process's RSS. With eviction the
numbers stay flat; ``--idle 1e9`` (never evict) shows the growth the engine had before.
"""

from __future__ import annotations

import argparse
import pickle
import resource
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.records import SourcePosition
from streams.contract.admission import Admission
from streams.contract.schema import TELEMETRY_SCHEMA
from streams.engine.engine import Engine, EngineConfig
from streams.pipeline import Processor

T0 = 1_767_225_600.0


def message(k: int, steps: int, every: float) -> bytes:
    start = T0 + k * every
    data = {"job": f"job-{k}", "step": list(range(steps)), "start": [start + i for i in range(steps)],
            "duration": 1.0, "output_units": 1000.0, "accelerators": 8}  # fmt: skip
    return orjson.dumps({"schema": TELEMETRY_SCHEMA, "source": f"exporter-{k}", "seq": 0,
                         "columns": [{"kind": "step", "n": steps, "data": data}]})  # fmt: skip


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=float, default=10.0, help="seconds of event time between job starts")
    parser.add_argument("--idle", type=float, default=60.0, help="job idle period before eviction (event s)")
    args = parser.parse_args()
    processor = Processor(Engine(EngineConfig(job_idle_s=args.idle, rollup_steps=50)), Admission(allowed_lateness=30))
    processor.declare([SourcePosition("telemetry", 0, 0)])
    started = time.perf_counter()
    print(f"{'jobs sent':>9} {'jobs held':>9} {'engine B':>10} {'processor B':>12} {'B/job held':>10} {'RSS MB':>7}")
    records = 0
    for k in range(args.jobs):
        out = processor.telemetry(message(k, args.steps, args.every), SourcePosition("telemetry", 0, k))
        records += len(out.audit)
        if (k + 1) % max(1, args.jobs // 10) == 0:
            engine_b = len(pickle.dumps(processor.engine))
            held = len(processor.engine.jobs)
            print(f"{k + 1:>9,} {held:>9,} {engine_b:>10,} {len(pickle.dumps(processor)):>12,} "
                  f"{engine_b / max(held, 1):>10,.0f} {rss_mb():>7.1f}")  # fmt: skip
    records += len(processor.flush(SourcePosition("telemetry", 0, args.jobs)).audit)
    elapsed = time.perf_counter() - started
    print(f"{args.jobs:,} jobs, {records:,} records, evicted {processor.engine.evicted:,}, {elapsed:.1f}s "
          f"({args.jobs * args.steps / elapsed:,.0f} step samples/s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
