"""SIGKILL the worker at random moments while it works through a simulated job; compare the audit trail with an
uninterrupted in-process run over the same input.

    .venv/bin/python bench/worker_kill_loop.py [--scenario training-fabric] [--ranks 64] [--steps 300]
                                               [--kills 20] [--max-pause 4] [--seed 12]

The scenario is on the topics before the first worker starts; a sink runs throughout. Prints samples, kills,
each restarted worker's time from start to healthy (median, max), records and findings/attributions expected
vs found, whether ids and bodies are identical, duplicates in audit_log, and the verify outcome. Uses
KAFKA_BOOTSTRAP_SERVERS if set, else starts the local broker.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.verify import verify
from bench._broker import bench_settings
from streams.config import to_env
from streams.demo import wait_drained
from streams.kafka.admin import ensure_topics
from streams.sim.output import to_kafka
from streams.sim.scenarios import SCENARIOS
from streams.supervise import Child
from streams.testing import run_stream, stored_records, worker_kill_loop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="training-fabric", choices=sorted(SCENARIOS))
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--max-pause", type=float, default=4.0, help="longest a worker lives once healthy, s")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    scenario = SCENARIOS[args.scenario](1, args.ranks, args.steps)
    started = time.monotonic()
    expected_out = run_stream([(kind, value) for kind, _, value in scenario.run()])
    expected = {(r.type, r.id): r for r in expected_out.audit}
    samples = sum(n for k, n in expected_out.samples_by_kind.items() if k != "decision")
    print(f"{args.scenario}: {samples:,} samples; in-process run {time.monotonic() - started:.0f}s, "
          f"{len(expected)} records")  # fmt: skip
    with bench_settings() as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        topics = {"telemetry": cfg.telemetry_topic, "decisions": cfg.decisions_topic}
        work = Path(tempfile.mkdtemp())
        asyncio.run(to_kafka(scenario, 1, cfg.kafka_bootstrap_servers, topics, work / "truth.json", lambda _: None))
        sink = Child(["sink"], to_env(cfg), work / "sink.log")
        started = time.monotonic()
        try:
            sink.wait_healthy(cfg.sink_http_port)
            mid: list[bool] = []
            to_healthy = worker_kill_loop(cfg, args.kills, work, seed=args.seed, max_pause_s=args.max_pause,
                                          mid_stream=mid)  # fmt: skip
            asyncio.run(wait_drained(cfg, [sink], 600, print, worker=False))
        finally:
            sink.stop()
        stored = stored_records(cfg.db_path)
        total, distinct = run_query(cfg.db_path, "SELECT count(*), count(DISTINCT record_id) FROM audit_log").rows[0]
        report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
    kinds = Counter(t for t, _ in expected)
    found = Counter(t for t, _ in stored)
    same = stored == {k: _body(r) for k, r in expected.items()}
    print(f"kills: {args.kills}, {sum(mid)} of them before the worker had ended its input; restart to healthy: "
          f"median {statistics.median(to_healthy):.1f}s, "
          f"max {max(to_healthy):.1f}s (first start included: {to_healthy[0]:.1f}s)")  # fmt: skip
    print(f"findings expected {kinds['finding']} found {found['finding']}; attributions expected "
          f"{kinds['attribution']} found {found['attribution']}; records expected {len(expected)} found "
          f"{len(stored)}; ids and bodies identical: {same}; duplicates in audit_log: {total - distinct}")  # fmt: skip
    print(f"verify: {'OK' if report.ok else 'FAILED'} {report.problems[:3]}; wall {time.monotonic() - started:.0f}s")
    return 0 if same and total == distinct and report.ok else 1


def _body(record: object) -> bytes:
    import orjson

    return orjson.dumps(record.body, option=orjson.OPT_SORT_KEYS)  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
