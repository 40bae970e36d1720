"""Step analysis alone, in CPU time: per step of a simulated training-fabric job, the step graph's build and
the whole analysis of the step (graph, what-if, ideal step, critical path: ``JobSteps._report``), on the op
span columns the engine hands it (captured from one run), in one process.

    .venv/bin/python bench/bench_step_analysis.py [--sizes 16x40,64x40,1024x6] [--root DIR]

``--root``: import ``streams`` from another tree (``git archive <commit> | tar -x -C /tmp/old``); run both
one after the other, twice, to compare two versions on a loaded machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16x40,64x40,1024x6", help="RANKSxSTEPS,...")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    sys.path[:0] = [str(args.root)]
    from streams.engine import steps
    from streams.engine.stepgraph import Codebook, build
    from streams.sim.scenarios import training_fabric
    from streams.testing import run_stream

    print(f"streams from {args.root}")
    for size in args.sizes.split(","):
        ranks, n = (int(x) for x in size.split("x"))
        captured = columns_of(steps, build, training_fabric(seed=1, ranks=ranks, steps=n).run(), run_stream)
        ops, groups, cache = Codebook(), Codebook(), dict[bytes, Any]()
        started = time.process_time()
        for c in captured:
            build(c, ops, groups, cache)
        built = (time.process_time() - started) / len(captured)
        job = steps.JobSteps("job")
        job._report(0, captured[0])  # the first step of a structure prepares it
        started = time.process_time()
        for i, c in enumerate(captured[1:], 1):
            job._report(i, c)
        analysed = (time.process_time() - started) / (len(captured) - 1)
        print(f"  {ranks:>5} ranks, {len(captured)} steps: build {built * 1e3:7.2f} CPU ms/step, "
              f"analysis {analysed * 1e3:7.2f} CPU ms/step")  # fmt: skip


def columns_of(steps: Any, build: Any, run: Any, run_stream: Any) -> list[dict[str, Any]]:
    """The op span columns of every step the engine analyses in ``run``."""
    captured: list[dict[str, Any]] = []

    def capture(c: dict[str, Any], *rest: Any) -> Any:
        captured.append({k: v.copy() for k, v in c.items()})
        return build(c, *rest)

    steps.build = capture
    run_stream([(kind, value) for kind, _, value in run])
    steps.build = build
    return captured


if __name__ == "__main__":
    main()
