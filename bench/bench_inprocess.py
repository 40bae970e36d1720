"""The engine in-process on the simulated training fabric, in CPU time (the honest unit on a shared machine):
samples per CPU-second, CPU µs per sample and CPU ms per step, at several sizes; optionally a profile.

    .venv/bin/python bench/bench_inprocess.py [--sizes 16x300,64x300,1024x20] [--repeats 3] [--root DIR]
        [--base DIR] [--profile FILE.prof] [--scenario NAME]

``--root``: import ``streams`` from another tree (``git archive <commit> | tar -x -C /tmp/old``). ``--base``:
measure that tree and this one side by side, one run of each in turn (each in its own process), and print
both medians and their ratio: the way to compare two versions on a machine whose load changes. Per-step
fixed cost: the CPU ms per step of a small job (16 ranks: the smallest ``training-fabric`` lays out; 8 with a
``realistic-*`` scenario, whose ms per step are per traced step). Issue 15's goals: >= 500 k samples/s at 64
ranks, >= 1 M at 1,024, <= 0.5 ms per step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16x300,64x300,1024x20", help="RANKSxSTEPS,...")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--base", type=Path, help="a tree to measure side by side with --root (medians, ratio)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of one run of the first size here")
    parser.add_argument("--json", type=Path, help="write {size: [samples, steps, CPU seconds per run]} here")
    parser.add_argument("--scenario", default="training-fabric", help="a simulator scenario (streams.sim.scenarios)")
    args = parser.parse_args()
    if args.base is not None:
        side_by_side(args)
        return
    sys.path[:0] = [str(args.root)]
    from streams.contract.envelope import decode_telemetry
    from streams.sim.scenarios import SCENARIOS
    from streams.testing import run_stream

    print(f"streams from {args.root}, {args.scenario}; medians of {args.repeats}")
    runs: dict[str, list[float]] = {}
    for size in args.sizes.split(","):
        ranks, steps = (int(x) for x in size.split("x"))
        items = [(kind, value) for kind, _, value in SCENARIOS[args.scenario](1, ranks, steps).run()]
        samples = sum(len(b) for k, v in items if k == "telemetry" for b in decode_telemetry(v).batches)
        steps = len({int(s) for k, v in items if k == "telemetry" for b in decode_telemetry(v).batches
                     if b.kind == "op" for s in np.unique(b.columns["step"])})  # fmt: skip
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
        runs[size] = [samples, steps, *cpu]
        print(line(size, samples, steps, statistics.median(cpu)))
    if args.json is not None:
        args.json.write_text(json.dumps(runs))


def line(size: str, samples: int, steps: int, s: float) -> str:
    ranks = size.split("x", maxsplit=1)[0]
    return (f"  {ranks:>5} ranks x {steps:>3} steps, {samples:>9,} samples: {samples / s:>9,.0f} samples/CPU-s, "
            f"{s / samples * 1e6:5.2f} CPU µs/sample, {s / steps * 1e3:7.2f} CPU ms/step")  # fmt: skip


def side_by_side(args: argparse.Namespace) -> None:
    """One run of each tree in turn, ``--repeats`` times; medians per tree and size, and new/base CPU."""
    trees = {"base": args.base, "new": args.root}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    shape: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeats):
            for name, tree in trees.items():
                out = Path(tmp) / f"{name}.json"
                cmd = [sys.executable, __file__, "--root", str(tree), "--sizes", args.sizes, "--repeats", "1",
                       "--scenario", args.scenario]  # fmt: skip
                subprocess.run([*cmd, "--json", str(out)], check=True, stdout=subprocess.DEVNULL)
                for size, (samples, steps, s) in json.loads(out.read_text()).items():
                    cpu[name].setdefault(size, []).append(s)
                    shape[size] = (samples, steps)
    print(f"side by side, {args.scenario}, medians of {args.repeats} (CPU s per run listed): base {args.base}, "
          f"new {args.root}")  # fmt: skip
    for size, (samples, steps) in shape.items():
        medians = {name: statistics.median(cpu[name][size]) for name in trees}
        for name in trees:
            runs = ", ".join(f"{s:.2f}" for s in cpu[name][size])
            print(f"{name:>4}{line(size, samples, steps, medians[name])} [{runs}]")
        print(f"       new/base CPU: {medians['new'] / medians['base']:.2f}")


if __name__ == "__main__":
    main()
