"""Query freshness while the sink runs: how long after a record is acknowledged by Kafka does a query from
another process (through the sink's SQL endpoint) see it?

    .venv/bin/python bench/bench_freshness.py [--seconds 20] [--rate 200]

Prints p50/p99/max of acknowledge-to-visible delay (an upper bound of commit-to-visible: it includes the
sink's batching wait, DuckDB's commit and the HTTP round trip). Goal (issue 4): visible within 2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer

from audit.query import Endpoint, run_query
from bench._broker import bench_settings
from streams.config import to_env
from streams.kafka.admin import ensure_topics
from streams.supervise import Child
from tests.integration.test_sink_exactly_once import audit_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=200.0, help="records per second")
    args = parser.parse_args()
    with bench_settings() as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, 1))
        sink = Child(["sink"], to_env(cfg), Path(tempfile.mkdtemp()) / "sink.log")
        try:
            sink.wait_healthy(cfg.sink_http_port)
            acked: dict[int, float] = {}
            seen: dict[int, float] = {}
            done = threading.Event()
            endpoint = Endpoint(f"http://127.0.0.1:{cfg.sink_http_port}/sql")

            def poll() -> None:
                last = -1
                while not done.is_set() or last < max(acked, default=-1):
                    top = run_query(cfg.db_path, 'SELECT max("offset") FROM audit_log', endpoint=endpoint).rows[0][0]
                    now = time.monotonic()
                    if top is not None and top > last:
                        for offset in range(last + 1, top + 1):
                            seen[offset] = now
                        last = top
                    time.sleep(0.01)

            poller = threading.Thread(target=poll)
            poller.start()

            async def produce() -> None:
                producer = AIOKafkaProducer(bootstrap_servers=cfg.kafka_bootstrap_servers, acks="all")
                await producer.start()
                try:
                    records = audit_records(int(args.seconds * args.rate))
                    for value in records:
                        meta = await producer.send_and_wait(cfg.audit_topic, value, partition=0)
                        acked[meta.offset] = time.monotonic()
                        await asyncio.sleep(1 / args.rate)
                finally:
                    await producer.stop()

            asyncio.run(produce())
            done.set()
            poller.join(timeout=60)
        finally:
            sink.stop()
        delays = sorted(seen[o] - acked[o] for o in acked if o in seen)
        p99 = delays[int(0.99 * (len(delays) - 1))]
        print(f"{len(delays):,} records at {args.rate:g}/s; acknowledged-to-visible through the sink's SQL endpoint:")
        p50, worst = statistics.median(delays) * 1000, delays[-1] * 1000
        print(f"  p50 {p50:.0f} ms   p99 {p99 * 1000:.0f} ms   max {worst:.0f} ms")
        print(f"  (goal: visible within 2000 ms; the sink waits up to {cfg.sink_batch_wait_ms} ms to fill a batch)")


if __name__ == "__main__":
    main()
