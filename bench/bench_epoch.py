"""The engine's fixed cost per released epoch (1 s of event time): the canonical sort of an epoch's samples on
a dense simulation, and the whole cost per epoch on sparse input, split into the job states' work (detectors,
step analysis) and everything around it (timeline, pipeline, routing, records).

    .venv/bin/python bench/bench_epoch.py [--ranks 64] [--steps 100] [--jobs 400] [--root DIR]

``--root``: import ``streams`` from another tree (e.g. ``git archive <commit> | tar -x -C /tmp/old``), so
that two versions are measured the same way; run the two one after the other, several times, and compare
medians. Sparse input: bench_state's messages (jobs of 20 one-second steps, one starting every 10 s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    sys.path[:0] = [str(args.root), str(Path(__file__).resolve().parent)]
    buffered = dense_epochs(args.ranks, args.steps)
    sort_ms = statistics.median(sort_ms_per_epoch(buffered) for _ in range(args.repeats))
    definition_ms = statistics.median(sort_ms_per_epoch(buffered, native=False) for _ in range(args.repeats))
    sparse = [sparse_epoch_ms(args.jobs) for _ in range(args.repeats)]
    print(f"streams from {args.root}; medians of {args.repeats}")
    print(f"  canonical sort, {args.ranks} ranks x {args.steps} steps: {sort_ms:.2f} CPU ms per epoch "
          f"({definition_ms:.2f} by the definition, without the native core)")  # fmt: skip
    print(f"  sparse input, {args.jobs} jobs: {statistics.median(s[0] for s in sparse):.3f} CPU ms per epoch, of "
          f"which {statistics.median(s[1] for s in sparse):.3f} outside the job states")  # fmt: skip


def dense_epochs(ranks: int, steps: int) -> list[dict[str, Any]]:
    """The epochs' parts of a dense simulation, as the watermark releases them (everything buffered)."""
    from streams.contract.envelope import decode_telemetry
    from streams.engine.timeline import Timeline
    from streams.sim.scenarios import training_fabric

    timeline = Timeline(lateness=1e9)
    for kind, _, value in training_fabric(seed=1, ranks=ranks, steps=steps).run():
        if kind == "telemetry":
            timeline.add_samples("t/0", decode_telemetry(value).batches)
    return [e.parts for _, e in sorted(timeline._epochs.items())]


def sort_ms_per_epoch(buffered: list[dict[str, Any]], native: bool = True) -> float:
    """CPU ms per epoch of the canonical sort; ``native=False``: its definition (a tree from before the
    native sort has only that)."""
    from streams.engine import timeline

    was = getattr(timeline, "_NATIVE_SORT", False)
    timeline._NATIVE_SORT = was and native
    try:
        started = time.process_time()
        for parts in buffered:
            for kind, batches in parts.items():
                timeline.canonical(kind, batches)
        return (time.process_time() - started) / max(1, len(buffered)) * 1e3
    finally:
        timeline._NATIVE_SORT = was


def sparse_epoch_ms(jobs: int) -> tuple[float, float]:
    from bench_state import message  # type: ignore[import-not-found]

    from audit.records import SourcePosition
    from streams.contract.admission import Admission
    from streams.engine import job
    from streams.engine.engine import Engine, EngineConfig
    from streams.pipeline import Processor

    inside = [0.0]
    names = ("ops", "step_summaries", "metrics", "topology", "due", "close", "decision", "shared_power",
             "shared_topology")  # fmt: skip
    originals = {n: getattr(job.JobState, n) for n in names}
    for name, method in originals.items():
        setattr(job.JobState, name, _timed(method, inside))
    try:
        processor = Processor(Engine(EngineConfig(job_idle_s=60, rollup_steps=50)), Admission(allowed_lateness=30))
        processor.declare([SourcePosition("telemetry", 0, 0)])
        started = time.process_time()
        for k in range(jobs):
            processor.telemetry(message(k, 20, 10.0), SourcePosition("telemetry", 0, k))
        processor.flush(SourcePosition("telemetry", 0, jobs))
        total, epochs = time.process_time() - started, jobs * 10 + 10
    finally:
        for name, method in originals.items():
            setattr(job.JobState, name, method)
    return total / epochs * 1e3, (total - inside[0]) / epochs * 1e3


def _timed(method: Callable[..., Any], inside: list[float]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            inside[0] += time.process_time() - started

    return timed


if __name__ == "__main__":
    main()
