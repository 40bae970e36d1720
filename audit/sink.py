"""The audit sink: audit topic → :class:`~audit.store.AuditStore`, exactly once.

The Kafka Connect pattern: the store keeps the next offset per partition in the same transaction as the
rows, and the consumer seeks to those offsets, so Kafka's committed offsets are for monitoring only. There
is one sink per DuckDB file (DuckDB admits one writer), so it assigns itself every partition of the audit
topic instead of joining a group rebalance: a restarted sink resumes at once, not after the dead member's
session times out. New partitions are picked up every ``PARTITION_REFRESH_S``.

Fetched records are prepared (hashed, classified) at once and staged; the staged records are committed in
one transaction when the batch is full, old enough, or the sink has caught up (:meth:`AuditSink._commit_due`),
while the next records are fetched and prepared. A SIGKILL loses only what was staged or committing, and
that is consumed again from the stored offsets.

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
from audit.store import AuditStore, Run
from streams import ops
from streams.config import Settings
from streams.kafka.admin import partitions

log = logging.getLogger("driftlog.sink")
PARTITION_REFRESH_S = 30.0
FETCH_RECORDS = 16_384  # per fetch: prepared while DuckDB commits the previous batch


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
        self.pending: asyncio.Future[None] | None = None  # the commit running in DuckDB's thread
        self.staged: list[Any] = []  # prepared, not yet committing
        self.staged_rows = 0
        self.staged_since = 0.0
        self.staged_offsets: dict[TopicPartition, int] = {}

    async def assign(self) -> None:
        """Assign every partition of the audit topic (again, if some were added) and seek to the stored offsets."""
        found = await partitions(self.settings.kafka_bootstrap_servers, [self.settings.audit_topic])
        self.partitions_checked = time.monotonic()
        if set(found) != self.consumer.assignment():
            self.consumer.assign(found)
            await self.seek_to_stored(found)

    async def seek_to_stored(self, assigned: list[TopicPartition]) -> None:
        """Seek every partition to the store's next offset; a partition the store has nothing of is read
        from its beginning (not from the group's committed offset, which is monitoring only)."""
        stored = self.store.next_offsets()
        for tp in assigned:
            nxt = stored.get((tp.topic, tp.partition))
            if nxt is None:
                await self.consumer.seek_to_beginning(tp)
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
            await self.flush()
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
        """Fetch, prepare (hash) what came, and start a commit when it is due (see :meth:`_commit_due`)."""
        if time.monotonic() - self.partitions_checked > PARTITION_REFRESH_S:
            await self.assign()
        cfg = self.settings
        wait_ms = cfg.sink_batch_wait_ms
        if self.staged_rows:
            wait_ms = max(0, int(wait_ms - (time.monotonic() - self.staged_since) * 1000))
        fetched = await self.consumer.getmany(
            timeout_ms=wait_ms, max_records=max(1, min(FETCH_RECORDS, cfg.sink_batch_max - self.staged_rows))
        )
        runs = [
            Run(tp.topic, tp.partition, [m.offset for m in msgs], [m.timestamp for m in msgs],
                [m.key for m in msgs], [b"" if m.value is None else m.value for m in msgs])
            for tp, msgs in fetched.items()
            if msgs
        ]  # fmt: skip
        if runs:
            # hash and stage while DuckDB commits the previous batch (two cores, no GIL in DuckDB)
            prepared = self.store.prepare(runs)
            if prepared is not None:
                if not self.staged_rows:
                    self.staged_since = time.monotonic()
                self.staged.append(prepared)
                self.staged_rows += sum(len(r.offsets) for r in runs)
                self.staged_offsets.update({tp: msgs[-1].offset + 1 for tp, msgs in fetched.items() if msgs})
        caught_up = await self._observe_lag()
        if self.staged_rows and self._commit_due(caught_up):
            await self.flush()
        elif not runs and self.pending is not None:
            await self.finish_pending()  # idle: let the last batch become visible and checkpointed
        await self.checkpoint()

    def _commit_due(self, caught_up: bool) -> bool:
        """A batch is committed once it holds ``sink_batch_max`` records (a DuckDB row group by default:
        written once, straight to the data file), once its first record has waited
        ``sink_batch_wait_ms``, or at once when the sink has caught up with the topic and DuckDB is idle
        (a quiet topic gets fresh rows; a backlog gets full batches)."""
        waited_ms = (time.monotonic() - self.staged_since) * 1000
        idle = self.pending is None or self.pending.done()
        return (
            self.staged_rows >= self.settings.sink_batch_max
            or waited_ms >= self.settings.sink_batch_wait_ms
            or (caught_up and idle)
        )

    async def flush(self) -> None:
        """Start committing what is staged, in one transaction, once the previous commit is done."""
        await self.finish_pending()
        if self.staged:
            staged, rows, offsets = self.staged, self.staged_rows, self.staged_offsets
            self.staged, self.staged_rows, self.staged_offsets = [], 0, {}
            self.pending = asyncio.ensure_future(self._commit(staged, rows, offsets))

    async def _observe_lag(self) -> bool:
        """Export the consumer lag per partition; True when every partition is caught up."""
        caught_up = True
        for tp in self.consumer.assignment():
            highwater = self.consumer.highwater(tp)
            if highwater is None:
                continue
            lag = max(0, highwater - await self.consumer.position(tp))
            ops.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)
            caught_up = caught_up and lag == 0
        return caught_up

    async def _commit(self, prepared: list[Any], rows: int, offsets: dict[TopicPartition, int]) -> None:
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
