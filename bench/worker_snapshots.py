"""The live worker's state snapshots: bytes and encode time per snapshot, and samples/s, for this tree and
(optionally) another source tree of driftlog run side by side, interleaved, in every repeat.

    .venv/bin/python bench/worker_snapshots.py [--repeats 3] [--smoke] [--base DIR]

The workload of ``bench/suite.py`` (several jobs, keyed by job) is produced once to a 4-partition telemetry
topic; each run is one ``driftlog worker`` and the sink over it, in a fresh namespace, from healthy to lag 0
(samples/s) and until its input ended; the worker's ``/metrics`` histograms
``driftlog_worker_snapshot_bytes`` / ``_seconds`` then give the mean per snapshot. ``--base DIR``: a tree
(e.g. ``git archive <commit> | tar -x -C DIR``) run with ``PYTHONPATH=DIR``; it must expose the same two
histograms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._broker import bench_settings
from bench.suite import FULL_JOBS, SMOKE_JOBS, Workload, _lag, _until
from streams.config import Settings, to_env
from streams.demo import input_ended
from streams.kafka.admin import ensure_topics
from streams.supervise import Child

NAMES = ("worker_group", "sink_group", "audit_topic", "state_topic", "checkpoint_topic", "shared_topic")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("driftlog_worker_snapshot_") and name.endswith(("_sum", "_count")):
            out[name] = float(value)
    return out


def one_run(cfg: Settings, w: Workload, tree: Path | None, logs: Path) -> dict[str, float]:
    tag = f"{'base' if tree else 'this'}-{time.monotonic_ns()}"
    run = cfg.model_copy(update={**{n: f"{getattr(cfg, n)}-{tag}" for n in NAMES},
                                 "db_path": logs / f"audit-{tag}.duckdb"})  # fmt: skip
    # (PYTHONSAFEPATH: ``python -m`` must not put the working directory, this tree, before the other one)
    env = {**to_env(run), **({"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"} if tree else {})}
    sink = Child(["sink"], env, logs / f"sink-{tag}.log")
    worker = Child(["worker"], env, logs / f"worker-{tag}.log")
    try:
        sink.wait_healthy(run.sink_http_port)
        worker.wait_healthy(run.worker_http_port, timeout=180)
        started = time.perf_counter()
        lag = _lag(run, run.worker_group, run.telemetry_topic)
        drained = _until(lambda: lag() == 0, [worker], 900)
        _until(lambda: input_ended(run.worker_http_port), [worker], 300)
        m = scrape(run.worker_http_port)
    finally:
        worker.stop()
        sink.stop()
    count = m.get("driftlog_worker_snapshot_bytes_count", 0.0) or float("nan")
    return {
        "samples/s to lag 0": w.samples / (drained - started),
        "snapshots": count,
        "bytes per snapshot": m.get("driftlog_worker_snapshot_bytes_sum", 0.0) / count,
        "encode ms per snapshot": 1000 * m.get("driftlog_worker_snapshot_seconds_sum", 0.0) / count,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--base", type=Path, help="another driftlog source tree to run side by side")
    args = parser.parse_args()
    jobs = SMOKE_JOBS if args.smoke else FULL_JOBS
    w = Workload.of(jobs)
    print(f"workload: {w.samples:,} samples in {len(w.items):,} messages", flush=True)
    trees: list[Path | None] = [None] + ([args.base.resolve()] if args.base else [])
    runs: dict[str, dict[str, list[float]]] = {}
    with bench_settings(topic_partitions=4, checkpoint_interval_s=10.0) as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        from tests.integration.test_scale_out import produce_keyed

        topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
        asyncio.run(produce_keyed(cfg.kafka_bootstrap_servers, topics, w.items))
        logs = cfg.db_path.parent
        for r in range(args.repeats):
            for tree in reversed(trees) if r % 2 else trees:
                name = "base" if tree else "this tree"
                figures = one_run(cfg, w, tree, logs)
                print(f"repeat {r + 1} {name}: {figures}", flush=True)
                for k, v in figures.items():
                    runs.setdefault(name, {}).setdefault(k, []).append(v)
    print(f"{'figure':<24}" + "".join(f"{n:>16}" for n in runs) + ("     this / base" if len(runs) > 1 else ""))
    for figure in next(iter(runs.values())):
        medians: list[Any] = [statistics.median(runs[n][figure]) for n in runs]
        ratio = f"{medians[0] / medians[1]:>16.3g}" if len(medians) > 1 and medians[1] else ""
        print(f"{figure:<24}" + "".join(f"{m:>16,.1f}" for m in medians) + ratio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
