"""What sampled steps and partial tracing do to the findings and costs, on the simulator's training scenarios.

Each scenario is run as simulated (every rank, every step), then with its op spans thinned the way
profilers and exporters thin real traces: only every ``--every``-th step traced (step summaries still for
every step), only tensor-parallel rank 0 of each stage traced, and both. Prints, per variant, the findings
by kind (the straggler's subject) and the job's allocated and wasted accelerator-seconds against the full
run's. A profiler's schedule (a few steps in a row, then a long gap) is the fifth variant.

    .venv/bin/python bench/sampled_partial.py [--ranks 32] [--steps 200] [--every 10] [--seed 1]
        [--scenario NAME ...] [--variant TEXT ...]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streams.sim.scenarios import SCENARIOS
from streams.testing import run_messages

Keep = Callable[[dict[str, Any]], bool]


def thinned(messages: list[bytes], keep: Keep) -> list[bytes]:
    """The messages with only the op spans ``keep`` accepts (a row as a dict of its columns)."""
    out = []
    for raw in messages:
        doc = orjson.loads(raw)
        batches = []
        for batch in doc.get("columns", []):
            n = int(batch["n"])
            data = {k: v if isinstance(v, list) else [v] * n for k, v in batch["data"].items()}
            kept = batch
            if batch["kind"] == "op":
                rows = [i for i in range(n) if keep({k: v[i] for k, v in data.items()})]
                kept = {"kind": "op", "n": len(rows), "data": {k: [v[i] for i in rows] for k, v in data.items()}}
            if kept["n"]:
                batches.append(kept)
        out.append(orjson.dumps({**doc, "columns": batches}))
    return out


def summary(messages: list[bytes]) -> tuple[Counter[str], list[str], float, float]:
    out = run_messages(messages)
    kinds: Counter[str] = Counter()
    stragglers, allocated, wasted = [], 0.0, 0.0
    for r in out.audit:
        if r.type == "finding":
            kinds[r.body["kind"]] += 1
            if r.body["kind"] == "straggler":
                stragglers.append(r.body["subjects"][0])
        elif r.type == "metrics_rollup" and r.body["name"] == "allocated_accel_s":
            allocated += r.body["total"]
        elif r.type == "metrics_rollup" and r.body["name"] == "wasted_accel_s":
            wasted += r.body["total"]
    return kinds, stragglers, allocated, wasted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=32)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scenario", action="append")
    parser.add_argument("--variant", action="append", help="only the variants whose name contains this")
    args = parser.parse_args()
    every = args.every
    variants: dict[str, Keep] = {
        "full": lambda row: True,
        f"every {every}th step": lambda row: row["step"] % every == 0,
        "tp rank 0 per stage": lambda row: row["tp"] == 0,
        "both": lambda row: row["step"] % every == 0 and row["tp"] == 0,
        f"profiler schedule (3 of every {5 * every} steps)": lambda row: row["step"] % (5 * every) < 3,
    }
    variants = {k: v for k, v in variants.items() if not args.variant or any(w in k for w in args.variant)}
    scenarios = args.scenario or ["training-fabric", "training-fabric-healthy", "training-sync-loss"]
    print("| scenario | variant | findings | straggler | allocated accel-s (vs full) | wasted accel-s (vs full) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in scenarios:
        items = SCENARIOS[name](args.seed, args.ranks, args.steps).run()
        messages = [value for kind, _, value in items if kind == "telemetry"]
        full: tuple[float, float] | None = None
        for variant, keep in variants.items():
            kinds, stragglers, allocated, wasted = summary(thinned(messages, keep))
            full = full or (allocated, wasted)
            found = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
            print(
                f"| {name} | {variant} | {found} | {' '.join(stragglers) or '-'} | {allocated:.0f} "
                f"({allocated / max(full[0], 1e-9):.2f}) | {wasted:.0f} ({wasted / max(full[1], 1e-9):.2f}) |"
            )


if __name__ == "__main__":
    main()
