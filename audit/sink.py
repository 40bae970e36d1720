"""The audit sink: audit topic → :class:`~audit.store.AuditStore`, exactly once.

The Kafka Connect pattern: the store keeps the next offset per partition in the same transaction as the
rows, and the consumer seeks to those offsets, so Kafka's committed offsets are for monitoring only. There
is one sink per DuckDB file (DuckDB admits one writer), so it assigns itself every partition of the audit
topic instead of joining a group rebalance: a restarted sink resumes at once, not after the dead member's
session times out. New partitions are picked up every ``PARTITION_REFRESH_S``.

A batch that fails to write is not acknowledged anywhere: the sink stops with the error instead of
skipping it (it would be consumed again from the stored offsets on restart).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from audit.checkpoint import Signer, append_line, last_seq
from audit.duckdb_store import DuckDBStore
from audit.sql_service import Limits, require_token_off_loopback, sql_routes
from audit.store import AuditStore, RawRecord
from streams import ops
from streams.config import Settings
from streams.kafka.admin import partitions

log = logging.getLogger("driftlog.sink")
PARTITION_REFRESH_S = 30.0


class AuditSink:
    def __init__(self, settings: Settings, store: AuditStore, routes: Sequence[web.RouteDef] = ()) -> None:
        self.settings = settings
        self.store = store
        self.routes = routes
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap_servers,
            group_id=settings.sink_group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        self.signer = Signer.load_or_create(settings.signing_key_path)
        self.checkpoint_seq = last_seq(settings.checkpoint_path)
        self.checkpointed: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.last_checkpoint = time.monotonic()
        self.producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
        self.stopping = asyncio.Event()
        self.failed: BaseException | None = None
        self.last_commit: float | None = None
        self.rows_written = 0
        self.http_port = 0
        self.partitions_checked = 0.0
        self.pending: asyncio.Future[None] | None = None

    async def assign(self) -> None:
        """Assign every partition of the audit topic (again, if some were added) and seek to the stored offsets."""
        found = await partitions(self.settings.kafka_bootstrap_servers, [self.settings.audit_topic])
        self.partitions_checked = time.monotonic()
        if set(found) != self.consumer.assignment():
            self.consumer.assign(found)
            self.seek_to_stored(found)

    def seek_to_stored(self, assigned: list[TopicPartition]) -> None:
        stored = self.store.next_offsets()
        for tp in assigned:
            nxt = stored.get((tp.topic, tp.partition))
            if nxt is None:
                self.consumer.seek_to_beginning(tp)
            else:
                self.consumer.seek(tp, nxt)
        log.info("partitions assigned", extra={"assigned": [f"{tp.topic}/{tp.partition}" for tp in assigned]})

    def health(self) -> tuple[bool, dict[str, Any]]:
        details = {
            "role": "sink",
            "rows_written": self.rows_written,
            "last_commit_age_s": None if self.last_commit is None else round(time.monotonic() - self.last_commit, 3),
            "assigned": sorted(f"{tp.topic}/{tp.partition}" for tp in self.consumer.assignment()),
        }
        if self.failed is not None:
            details["error"] = repr(self.failed)
        return (self.failed is None and not self.stopping.is_set(), details)

    async def run(self, on_ready: Callable[[int], None] | None = None) -> None:
        runner, self.http_port = await ops.start_http(
            self.settings.http_host, self.settings.sink_http_port, self.health, self.routes
        )
        await self.consumer.start()
        await self.producer.start()
        await self.assign()
        if on_ready is not None:
            on_ready(self.http_port)
        try:
            while not self.stopping.is_set():
                await self._one_batch()
            await self.finish_pending()
            await self.checkpoint(force=True)
        except BaseException as exc:
            self.failed = exc
            raise
        finally:
            if self.pending is not None:  # never close the store under a commit still running in its thread
                await asyncio.gather(self.pending, return_exceptions=True)
            await self.consumer.stop()
            await self.producer.stop()
            await runner.cleanup()
            self.store.close()

    async def _one_batch(self) -> None:
        if time.monotonic() - self.partitions_checked > PARTITION_REFRESH_S:
            await self.assign()
        fetched = await self.consumer.getmany(
            timeout_ms=self.settings.sink_batch_wait_ms, max_records=self.settings.sink_batch_max
        )
        batch = [
            RawRecord(m.topic, m.partition, m.offset, m.timestamp, m.key, m.value if m.value is not None else b"")
            for msgs in fetched.values()
            for m in msgs
        ]
        if batch:
            # hash and stage this batch while DuckDB commits the previous one (two cores, no GIL in DuckDB)
            prepared = self.store.prepare(batch)
            await self.finish_pending()
            if prepared is not None:
                offsets = {tp: msgs[-1].offset + 1 for tp, msgs in fetched.items() if msgs}
                self.pending = asyncio.ensure_future(self._commit(prepared, len(batch), offsets))
        elif self.pending is not None:
            await self.finish_pending()  # idle: let the last batch become visible and checkpointed
        await self.checkpoint()
        for tp in self.consumer.assignment():
            highwater = self.consumer.highwater(tp)
            if highwater is not None:
                lag = max(0, highwater - await self.consumer.position(tp))
                ops.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)

    async def _commit(self, prepared: Any, rows: int, offsets: dict[TopicPartition, int]) -> None:
        started = time.perf_counter()
        await asyncio.to_thread(self.store.commit, prepared)
        ops.SINK_COMMIT_SECONDS.observe(time.perf_counter() - started)
        ops.SINK_ROWS.inc(rows)
        self.rows_written += rows
        self.last_commit = time.monotonic()
        try:  # monitoring only: the offsets that matter were stored with the rows
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            log.debug("monitoring commit to Kafka failed (harmless)", extra={"error": repr(exc)})

    async def finish_pending(self) -> None:
        """Wait for the batch being committed, if any (its failure stops the sink)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            await pending

    async def checkpoint(self, force: bool = False) -> None:
        """Sign the chain heads if they moved (every ``checkpoint_interval_s``, or now when ``force``): the
        file first (fsync), then the checkpoints topic, then the checkpoints table."""
        heads = self.store.heads()
        due = force or time.monotonic() - self.last_checkpoint >= self.settings.checkpoint_interval_s
        if not due or heads == self.checkpointed:
            return
        self.checkpoint_seq += 1
        line = self.signer.checkpoint(self.checkpoint_seq, heads)
        await asyncio.to_thread(append_line, self.settings.checkpoint_path, line)
        await self.producer.send_and_wait(self.settings.checkpoint_topic, orjson.dumps(line), key=b"checkpoint")
        await asyncio.to_thread(self.store.add_checkpoint, self.checkpoint_seq, line)
        self.checkpointed, self.last_checkpoint = heads, time.monotonic()
        ops.CHECKPOINTS.inc()


def run(settings: Settings, store: DuckDBStore) -> None:
    """Run the sink until SIGTERM/SIGINT; the batch in flight is written before it exits. It also serves
    read-only SQL over the store on its HTTP port (``POST /sql``)."""
    require_token_off_loopback(settings.http_host, settings.sql_token)
    limits = Limits(settings.query_max_rows, settings.query_timeout_s)
    routes = sql_routes(store.con.cursor(), settings.sql_token, limits)

    async def main() -> None:
        sink = AuditSink(settings, store, routes)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sink.stopping.set)
        await sink.run()

    asyncio.run(main())
