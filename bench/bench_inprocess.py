"""The engine in-process on the simulated training fabric, in CPU time (the honest unit on a shared machine):
samples per CPU-second, CPU µs per sample and CPU ms per step, at several sizes; optionally a profile.

    .venv/bin/python bench/bench_inprocess.py [--sizes 16x300,64x300,1024x20] [--repeats 3] [--root DIR]
        [--profile FILE.prof]

``--root``: import ``streams`` from another tree (``git archive <commit> | tar -x -C /tmp/old``), so that two
versions are measured the same way; run both one after the other and compare medians. Per-step fixed cost:
the CPU ms per step of a small job (16 ranks: the smallest the scenario lays out). Issue 15's goals: >= 500 k
samples/s at 64 ranks, >= 1 M at 1,024, <= 0.5 ms per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16x300,64x300,1024x20", help="RANKSxSTEPS,...")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--profile", type=Path, help="write a cProfile of one run of the first size here")
    args = parser.parse_args()
    sys.path[:0] = [str(args.root)]
    from streams.contract.envelope import decode_telemetry
    from streams.sim.scenarios import training_fabric
    from streams.testing import run_stream

    print(f"streams from {args.root}; medians of {args.repeats}")
    for size in args.sizes.split(","):
        ranks, steps = (int(x) for x in size.split("x"))
        items = [(kind, value) for kind, _, value in training_fabric(seed=1, ranks=ranks, steps=steps).run()]
        samples = sum(len(b) for k, v in items if k == "telemetry" for b in decode_telemetry(v).batches)
        if args.profile is not None:
            import cProfile

            cProfile.runctx("run_stream(items)", globals(), {"run_stream": run_stream, "items": items}, args.profile)
            print(f"  profile of {size} written to {args.profile}")
            return
        cpu = []
        for _ in range(args.repeats):
            started = time.process_time()
            run_stream(items)
            cpu.append(time.process_time() - started)
        s = statistics.median(cpu)
        print(f"  {ranks:>5} ranks x {steps:>3} steps, {samples:>9,} samples: {samples / s:>9,.0f} samples/CPU-s, "
              f"{s / samples * 1e6:5.2f} CPU µs/sample, {s / steps * 1e3:7.2f} CPU ms/step")  # fmt: skip


if __name__ == "__main__":
    main()
