"""SIGKILL the audit sink at random moments while it consumes, then count and verify.

    .venv/bin/python bench/kill_loop.py [--records 100000] [--kills 20] [--seed 11] [--max-pause 2.0]
                                        [--live-rate 0]

By default the records are on the topic before the first sink starts (a backlog). With ``--live-rate R``
they are produced during the kills, R records/s from a thread of this process, so that the kills land in
a live stream (the last sink starts once everything is produced). Prints records expected vs found,
duplicates, how many kills landed while records were still unwritten, and the verify outcome. Uses
KAFKA_BOOTSTRAP_SERVERS if set, else starts the local broker.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaProducer

from audit.checkpoint import public_key_path
from audit.query import run_query
from audit.verify import verify
from bench._broker import bench_settings
from streams.demo import produce
from streams.kafka.admin import ensure_topics
from streams.testing import sigkill_loop
from tests.integration.test_sink_exactly_once import audit_records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument(
        "--max-pause",
        type=float,
        default=2.0,
        help="longest a sink lives after it is healthy, s (long enough to commit 122,880-row batches)",
    )
    parser.add_argument("--live-rate", type=float, default=0.0, help="produce during the kills, records/s")
    args = parser.parse_args()
    # the sink's default batching: a backlog is written in row-group transactions of 122,880 records
    with bench_settings(checkpoint_interval_s=0.5) as cfg:
        asyncio.run(ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions))
        records = audit_records(args.records)
        live = Paced(cfg.kafka_bootstrap_servers, cfg.audit_topic, records, args.live_rate)
        if args.live_rate > 0:
            live.start()
        else:
            asyncio.run(produce(cfg.kafka_bootstrap_servers, cfg.audit_topic, records))
        started = time.monotonic()
        seen = sigkill_loop(cfg, args.kills, Path(tempfile.mkdtemp()), seed=args.seed, max_pause_s=args.max_pause,
                            before_last=live.finish if args.live_rate > 0 else None)  # fmt: skip
        total, distinct = run_query(
            cfg.db_path, 'SELECT count(*), count(DISTINCT ("partition", "offset")) FROM audit_log'
        ).rows[0]
        report = verify(cfg.db_path, cfg.checkpoint_path, public_key_path(cfg.signing_key_path))
        unwritten, first = sum(c < args.records for c in seen), sum(c == 0 for c in seen)
        print(f"kills: {args.kills}, {unwritten} with records still unwritten ({first} of them before the first "
              f"commit); rows after each kill: {seen}")  # fmt: skip
        print(f"records expected: {args.records:,}  found: {total:,}  duplicates: {total - distinct:,}"
              f"  missing: {args.records - distinct:,}")  # fmt: skip
        print(f"verify: {'OK' if report.ok else 'FAILED'} ({report.records:,} records, {report.checkpoints} signed "
              f"checkpoints) {report.problems[:3]}")  # fmt: skip
        print(f"wall time {time.monotonic() - started:.0f}s")
        return 0 if report.ok and total == distinct == args.records else 1


class Paced(threading.Thread):
    """Produces ``records`` at about ``rate`` per second (a slice every tenth of a second) with one
    producer, on a thread of its own; :meth:`finish` waits for it and raises what made it fail."""

    def __init__(self, bootstrap: str, topic: str, records: list[bytes], rate: float) -> None:
        super().__init__(name="paced-producer")
        self.bootstrap, self.topic, self.records, self.rate = bootstrap, topic, records, rate
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as exc:
            self.error = exc

    async def _produce(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            step, started = max(1, int(self.rate / 10)), time.monotonic()
            for i in range(0, len(self.records), step):
                for value in self.records[i : i + step]:
                    await producer.send(self.topic, value)
                await asyncio.sleep(max(0.0, started + (i + step) / self.rate - time.monotonic()))
            await producer.flush()
        finally:
            await producer.stop()

    def finish(self) -> None:
        self.join()
        if self.error is not None:
            raise RuntimeError("producing the live stream failed") from self.error


if __name__ == "__main__":
    sys.exit(main())
