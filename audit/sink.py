"""The audit sink: audit topic → :class:`~audit.store.AuditStore`, exactly once.

The Kafka Connect pattern: the store keeps the next offset per partition in the same transaction as the
rows, and the consumer seeks to those offsets, so Kafka's committed offsets are for monitoring only. There
is one sink per DuckDB file (DuckDB admits one writer), so it assigns itself every partition of the audit
topic instead of joining a group rebalance: a restarted sink resumes at once, not after the dead member's
session times out. New partitions are picked up every ``PARTITION_REFRESH_S``.

Fetched records are prepared (hashed, put in Arrow) at once into a filling batch; a batch is committed in one
transaction when it is full, or, near the head of the topic, old enough or caught up
(:meth:`AuditSink._seal_due`), while the next records are fetched and prepared. A SIGKILL loses only what
was prepared or committing, and that is consumed again from the stored offsets.

A batch that fails to write is not acknowledged anywhere: the sink stops with the error instead of
skipping it (it would be consumed again from the stored offsets on restart).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from audit.checkpoint import Signer, append_line, last_seq
from audit.duckdb_store import DuckDBStore
from audit.serve import SqlServing
from audit.store import AuditStore, Run
from streams import ops
from streams.config import Settings
from streams.kafka.admin import partitions

log = logging.getLogger("driftlog.sink")
PARTITION_REFRESH_S = 30.0
FETCH_RECORDS = 16_384  # per fetch: prepared while DuckDB commits the previous batch
BACKLOG_WAITS = 10  # a batch filling from a backlog commits after at most this many sink_batch_wait_ms


@dataclass
class _Batch:
    """Prepared fetches that are committed together, in one transaction."""

    prepared: list[Any] = field(default_factory=list)
    rows: int = 0
    since: float = 0.0  # when its first record was fetched
    offsets: dict[TopicPartition, int] = field(default_factory=dict)  # for Kafka's (monitoring) commit

    def add(self, prepared: Any, rows: int) -> None:
        if not self.rows:
            self.since = time.monotonic()
        self.prepared.append(prepared)
        self.rows += rows


class AuditSink:
    def __init__(
        self,
        settings: Settings,
        store: AuditStore,
        routes: Sequence[web.RouteDef] = (),
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.routes = routes
        self.on_stop = on_stop  # before the store closes (e.g. stop the SQL snapshot publisher)
        self.writer = ThreadPoolExecutor(1, "driftlog-writer")  # commits only: never behind anything else
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
        self.filling = _Batch()  # prepared fetches to commit together
        self.sealed: deque[_Batch] = deque()  # full or due batches waiting for DuckDB, oldest first

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
            self.on_stop()
            self.store.close()
            self.writer.shutdown()

    async def _one_batch(self) -> None:
        """Fetch, prepare (hash) what came into the filling batch, seal it when it is due (see
        :meth:`_seal_due`), and start committing the oldest sealed batch when DuckDB is idle."""
        if time.monotonic() - self.partitions_checked > PARTITION_REFRESH_S:
            await self.assign()
        cfg, filling = self.settings, self.filling
        wait_ms = cfg.sink_batch_wait_ms
        if filling.rows:  # wake when the filling batch is due; never 0, which would starve the fetcher task
            due_in = int(wait_ms - (time.monotonic() - filling.since) * 1000)
            wait_ms = due_in if due_in > 0 else wait_ms
        fetched = await self.consumer.getmany(
            timeout_ms=wait_ms, max_records=max(1, min(FETCH_RECORDS, cfg.sink_batch_max - filling.rows))
        )
        runs = [
            Run(tp.topic, tp.partition, [m.offset for m in msgs], [m.timestamp for m in msgs],
                [m.key for m in msgs], [b"" if m.value is None else m.value for m in msgs])
            for tp, msgs in fetched.items()
            if msgs
        ]  # fmt: skip
        if runs:
            # hash and stage while DuckDB commits an earlier batch (two cores, no GIL in DuckDB)
            prepared = self.store.prepare(runs)
            if prepared is not None:
                filling.add(prepared, sum(len(r.offsets) for r in runs))
                filling.offsets.update({tp: msgs[-1].offset + 1 for tp, msgs in fetched.items() if msgs})
        if filling.rows and self._seal_due(await self._observe_lag()):
            self.sealed.append(filling)
            self.filling = _Batch()
        if self.sealed and (
            self.pending is None
            or self.pending.done()
            or len(self.sealed) > 1  # at most two batches queue
            or self.sealed[0].rows < cfg.sink_batch_max  # near the head: fresh rows first
        ):
            await self.commit_next()  # (waits for the running commit first)
        elif not runs and self.pending is not None:
            await self.finish_pending()  # idle: let the last batch become visible and checkpointed
        await self.checkpoint()

    def _seal_due(self, lag: int) -> bool:
        """The filling batch is closed once it holds ``sink_batch_max`` records (a DuckDB row group by
        default: written once, straight to the data file). Short of that: while the topic holds enough
        records to fill it (a backlog) it keeps filling, at fetch speed; otherwise it closes once its first
        record has waited ``sink_batch_wait_ms``, or at once when the sink has caught up with the topic."""
        missing = self.settings.sink_batch_max - self.filling.rows
        if missing <= 0:
            return True
        waited_ms = (time.monotonic() - self.filling.since) * 1000
        if lag >= missing:  # (a backlog that does not arrive within BACKLOG_WAITS waits is not waited for)
            return waited_ms >= BACKLOG_WAITS * self.settings.sink_batch_wait_ms
        return lag == 0 or waited_ms >= self.settings.sink_batch_wait_ms

    async def commit_next(self) -> None:
        """Start committing the oldest sealed batch in one transaction, once the running commit is done."""
        await self.finish_pending()
        if self.sealed:
            batch = self.sealed.popleft()
            self.pending = asyncio.ensure_future(self._commit(batch.prepared, batch.rows, batch.offsets))

    async def flush(self) -> None:
        """Commit everything staged (on shutdown)."""
        if self.filling.rows:
            self.sealed.append(self.filling)
            self.filling = _Batch()
        while self.sealed:
            await self.commit_next()
        await self.finish_pending()

    async def _observe_lag(self) -> int:
        """Export the consumer lag per partition; returns the records behind in all of them."""
        total = 0
        for tp in self.consumer.assignment():
            highwater = self.consumer.highwater(tp)
            if highwater is None:
                continue
            lag = max(0, highwater - await self.consumer.position(tp))
            ops.CONSUMER_LAG.labels(tp.topic, str(tp.partition)).set(lag)
            total += lag
        return total

    async def _commit(self, prepared: list[Any], rows: int, offsets: dict[TopicPartition, int]) -> None:
        started = time.perf_counter()
        await self._in_writer(self.store.commit, prepared)
        took = time.perf_counter() - started
        ops.SINK_COMMIT_SECONDS.observe(took)
        log.debug("committed", extra={"rows": rows, "seconds": round(took, 6)})
        ops.SINK_ROWS.inc(rows)
        self.rows_written += rows
        self.last_commit = time.monotonic()
        try:  # monitoring only: the offsets that matter were stored with the rows
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            log.debug("monitoring commit to Kafka failed (harmless)", extra={"error": repr(exc)})

    async def _in_writer(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.writer, fn, *args)

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
        await self._in_writer(append_line, self.settings.checkpoint_path, line)
        if self.settings.checkpoint_witness is not None:
            await self._in_writer(append_line, self.settings.checkpoint_witness, line)
        await self.producer.send_and_wait(self.settings.checkpoint_topic, orjson.dumps(line), key=b"checkpoint")
        await self._in_writer(self.store.add_checkpoint, self.checkpoint_seq, line)
        self.checkpointed, self.last_checkpoint = heads, time.monotonic()
        ops.CHECKPOINTS.inc()


def run(settings: Settings, store: DuckDBStore) -> None:
    """Run the sink until SIGTERM/SIGINT; the batch in flight is written before it exits. It also serves
    read-only SQL over the snapshots it publishes on its HTTP port (``POST /sql``, audit/serve.py)."""
    serving = SqlServing(settings, store)

    async def main() -> None:
        sink = AuditSink(settings, store, serving.routes(), on_stop=serving.stop)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sink.stopping.set)
        await sink.run()

    asyncio.run(main())
