"""Engine throughput with the structural baseline (issue 13): op spans per second through the whole
in-process pipeline (``streams.testing.run_stream``: decode, admission, step graphs, the what-if with the
ideal step from peers and its decomposition, detectors, roll-ups) on the simulated training fabric.

    .venv/bin/python bench/bench_structural.py --ranks 64 --steps 60
    .venv/bin/python bench/bench_structural.py --ranks 1024 --steps 12
    # before/after in one run: a checkout of the old code as --tree, the same input, alternating
    git archive <rev> | tar -x -C /tmp/old && .venv/bin/python bench/bench_structural.py --tree /tmp/old --tree .

Prints per tree the median rate of ``--repeats`` runs (runs of the trees alternate, so load on the machine
hits both alike) and its ratio to the first tree's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(ranks: int, steps: int) -> float:
    """Spans per second of one run of this interpreter's tree (its modules are imported here)."""
    from streams.sim.scenarios import training_fabric
    from streams.testing import run_stream

    items = [(kind, value) for kind, _, value in training_fabric(seed=1, ranks=ranks, steps=steps).run()]
    started = time.perf_counter()
    out = run_stream(items)
    elapsed = time.perf_counter() - started
    return out.samples_by_kind.get("op", 0) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", action="append", type=Path, help="a checkout to import driftlog from (repeatable)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(one_run(args.ranks, args.steps))
        return
    trees = [t.resolve() for t in args.tree or [ROOT]]
    rates: dict[Path, list[float]] = {t: [] for t in trees}
    for _ in range(args.repeats):
        for tree in trees:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--ranks", str(args.ranks),
                   "--steps", str(args.steps)]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(tree)}
            rates[tree].append(float(subprocess.run(cmd, env=env, cwd=tree, check=True, capture_output=True,
                                                    text=True).stdout.split()[-1]))  # fmt: skip
    first = statistics.median(rates[trees[0]])
    for tree in trees:
        median = statistics.median(rates[tree])
        print(
            f"{tree}: {args.ranks} ranks x {args.steps} steps, median of {args.repeats}: {median:,.0f} op spans/s "
            f"({median / first:.2f}x the first tree; runs: {', '.join(f'{r:,.0f}' for r in rates[tree])})"
        )


if __name__ == "__main__":
    main()
