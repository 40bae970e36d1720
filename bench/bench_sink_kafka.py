"""End to end from Kafka: a pre-filled audit topic drained by the sink into DuckDB, beside aiokafka alone
draining the same topic, so that it shows whether consumption or the store is the limit.

    .venv/bin/python bench/bench_sink_kafka.py [--records 500000] [--repeats 3]

Each repeat: (1) aiokafka alone fetches every record (``getmany``, as the sink does, nothing else);
(2) the sink (``AuditSink`` over ``DuckDBStore``, in this process, default batching) consumes the topic
from the beginning into a fresh DuckDB file until every record is committed; the time ends after its
final commit. Uses KAFKA_BOOTSTRAP_SERVERS if set, else starts the local broker. Beside the rates it prints
the CPU time this process used per record (every thread): what a sink needs in cores at a given rate.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer

from audit.duckdb_store import DuckDBStore
from audit.sink import FETCH_RECORDS, AuditSink
from bench._broker import bench_settings
from streams.config import Settings
from streams.demo import produce
from streams.kafka.admin import ensure_topics, partitions
from tests.integration.test_sink_exactly_once import audit_records


async def consume_only(cfg: Settings, n: int) -> tuple[float, float]:
    consumer = AIOKafkaConsumer(bootstrap_servers=cfg.kafka_bootstrap_servers, enable_auto_commit=False,
                                max_partition_fetch_bytes=8 * 1024 * 1024)  # fmt: skip
    await consumer.start()
    try:
        consumer.assign(await partitions(cfg.kafka_bootstrap_servers, [cfg.audit_topic]))
        await consumer.seek_to_beginning()
        started, cpu, seen = time.perf_counter(), time.process_time(), 0
        while seen < n:
            fetched = await consumer.getmany(timeout_ms=200, max_records=FETCH_RECORDS)
            seen += sum(len(msgs) for msgs in fetched.values())
        return n / (time.perf_counter() - started), (time.process_time() - cpu) / n * 1e6
    finally:
        await consumer.stop()


async def sink_drain(cfg: Settings, n: int) -> tuple[float, float]:
    store = DuckDBStore(Path(tempfile.mkdtemp(prefix="driftlog-bench-sink-")) / "a.duckdb")
    sink = AuditSink(cfg, store)
    started = cpu = 0.0

    def ready(_port: int) -> None:
        nonlocal started, cpu
        started, cpu = time.perf_counter(), time.process_time()

    task = asyncio.ensure_future(sink.run(on_ready=ready))
    while sink.rows_written < n:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    elapsed, used = time.perf_counter() - started, time.process_time() - cpu
    sink.stopping.set()
    await task
    return n / elapsed, used / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with bench_settings(sink_http_port=0, checkpoint_interval_s=10.0) as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        started = time.perf_counter()
        asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, audit_records(args.records)))
        produced = args.records / (time.perf_counter() - started)
        consume, sink = [], []
        for _ in range(args.repeats):  # interleaved
            consume.append(asyncio.run(consume_only(cfg, args.records)))
            sink.append(asyncio.run(sink_drain(cfg, args.records)))
    print(f"{args.records:,} audit records (~300 bytes) on {cfg.topic_partitions} partitions "
          f"(produced at {produced:,.0f}/s); median of {args.repeats} interleaved runs")  # fmt: skip
    for name, runs in (("aiokafka alone (getmany, nothing else)", consume),
                       ("sink, Kafka -> DuckDB (prepare + commit)", sink)):  # fmt: skip
        rate, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"  {name}: {rate:>9,.0f} records/s  {cpu:.1f} CPU µs/record in this process"
              f"  (runs {', '.join(f'{r[0]:,.0f}' for r in runs)})")  # fmt: skip
    print("  (the broker runs on the same machine and shares its cores)")


if __name__ == "__main__":
    main()
