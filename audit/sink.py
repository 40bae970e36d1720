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

Operations (:mod:`streams.health`, :mod:`audit.offsets_guard`): a broker outage is ridden out (the
consumer reconnects and continues from its positions; the partition refresh and the checkpoint topic
retry; ``/health`` turns 503 after ``DRIFTLOG_HEALTH_BROKER_TIMEOUT_S``); a sink started while the broker is
away waits for it (503, "starting: waiting for the broker") instead of exiting. Stored offsets beyond the topic's
end refuse to run. A fatal fault is kept on ``/health`` (503, the reason) for ``FAULT_HOLD_S`` before the
process exits 1; SIGTERM ends it within ``SHUTDOWN_BUDGET_S`` in every state.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from aiokafka.errors import KafkaError, KafkaTimeoutError, OffsetOutOfRangeError

from audit import offsets_guard
from audit.checkpoint import Signer, append_line, last_seq
from audit.duckdb_store import DuckDBStore
from audit.serve import SqlServing
from audit.store import AuditStore, RawRecord, Run
from streams import ops
from streams.config import Settings
from streams.errors import DriftlogError, OffsetsMismatch, StoreError
from streams.health import Health, bounded, probe, time_left, until_broker
from streams.kafka.admin import ensure_topics, partitions
from streams.kafka.fetching import FETCH_MAX_WAIT_MS

log = logging.getLogger("driftlog.sink")
PARTITION_REFRESH_S = 30.0
FETCH_RECORDS = 16_384  # per fetch: prepared while DuckDB commits the previous batch
BACKLOG_WAITS = 10  # a batch filling from a backlog commits after at most this many sink_batch_wait_ms
PROBE_S = 5.0  # how often the broker is asked for metadata (and how long it may take to answer)
SHUTDOWN_BUDGET_S = 8.0  # SIGTERM → exit, whatever the broker does
FAULT_HOLD_S = 15.0  # a fatal fault stays on /health (503) this long before the process exits


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
        on_commit: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.routes = routes
        self.on_stop = on_stop  # before the store closes (e.g. stop the SQL snapshot publisher)
        self.on_commit = on_commit  # after rows were committed (e.g. publish them for SQL)
        self.writer = ThreadPoolExecutor(1, "driftlog-writer")  # commits only: never behind anything else
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap_servers,
            group_id=settings.sink_group,
            enable_auto_commit=False,
            isolation_level="read_committed",  # the worker writes in transactions (streams/durable.py)
            auto_offset_reset="none",  # never reset past records silently: offsets_guard says why instead
            max_partition_fetch_bytes=8 * 1024 * 1024,
            # a partition whose fetched records wait in the buffer (``max_records``) drops out of the next fetch
            # request, which the broker then holds open this long for the idle ones
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        )
        self.signer = Signer.load_or_create(settings.signing_key_path)
        self.checkpoint_seq = last_seq(settings.checkpoint_path)
        self.checkpointed: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.last_checkpoint = time.monotonic()
        self.producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
        self.unpublished: deque[bytes] = deque()  # signed checkpoints not yet on the checkpoints topic
        self.publisher: asyncio.Task[None] | None = None
        self.status = Health("sink", settings.health_broker_timeout_s, settings.health_stall_s)
        self.stopping = asyncio.Event()
        self.failed: BaseException | None = None
        self.last_commit: float | None = None
        self.reported: dict[TopicPartition, int] = {}  # positions last committed to Kafka (monitoring)
        self.rows_written = 0
        self.http_port = 0
        self.partitions_checked = 0.0
        self.pending: asyncio.Future[None] | None = None  # the commit running in DuckDB's thread
        self.filling = _Batch()  # prepared fetches to commit together
        self.sealed: deque[_Batch] = deque()  # full or due batches waiting for DuckDB, oldest first

    async def assign(self) -> None:
        """Assign every partition of the audit topic (again, if some were added) and seek to the stored offsets.
        While the broker is unreachable this is retried at the next probe instead of failing."""
        self.partitions_checked = time.monotonic()
        try:
            found = await asyncio.wait_for(
                partitions(self.settings.kafka_bootstrap_servers, [self.settings.audit_topic]), PROBE_S * 3
            )
        except (KafkaError, OSError, TimeoutError) as exc:
            self.status.broker_failed(exc)
            self.partitions_checked -= PARTITION_REFRESH_S - PROBE_S  # retry soon
            return
        if set(found) != self.consumer.assignment():
            try:
                beginning = await asyncio.wait_for(self.check_offsets(found), PROBE_S * 3)
            except (KafkaError, TimeoutError) as exc:
                self.status.broker_failed(exc)
                self.partitions_checked -= PARTITION_REFRESH_S - PROBE_S  # retry soon
                return
            self.consumer.assign(found)
            try:
                await self.check_last_records(found, beginning)
            except (KafkaError, TimeoutError) as exc:
                self.consumer.unsubscribe()  # assigned again at the next try
                self.status.broker_failed(exc)
                self.partitions_checked -= PARTITION_REFRESH_S - PROBE_S
                return
            await self.seek_to_stored(found)
        self.status.ready = True

    async def check_offsets(self, found: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Refuse stored offsets the topic cannot continue (see :mod:`audit.offsets_guard`); returns the
        topic's first offsets."""
        beginning = await self.consumer.beginning_offsets(found)
        end = await self.consumer.end_offsets(found)
        mismatch = offsets_guard.check(
            self.store.next_offsets(),
            {(tp.topic, tp.partition): o for tp, o in beginning.items()},
            {(tp.topic, tp.partition): o for tp, o in end.items()},
        )
        if mismatch is not None:
            raise mismatch
        return dict(beginning)

    async def check_last_records(self, found: list[TopicPartition], beginning: dict[TopicPartition, int]) -> None:
        """Refuse a topic whose record at each stored last offset is not the one stored (recreated with at
        least as many records). Reads one record per partition, before seeking to the stored offsets."""
        stored = {tp: r for tp, r in self.store.last_records().items() if tp[0] == self.settings.audit_topic}
        checked = [
            tp for tp in found if (tp.topic, tp.partition) in stored
            and stored[(tp.topic, tp.partition)].offset >= beginning.get(tp, 0)
        ]  # fmt: skip
        if not checked:
            return
        for tp in checked:
            self.consumer.seek(tp, stored[(tp.topic, tp.partition)].offset)
        got: dict[tuple[str, int], RawRecord | None] = {(tp.topic, tp.partition): None for tp in checked}
        deadline = time.monotonic() + PROBE_S * 3
        waiting = set(checked)
        while waiting and time.monotonic() < deadline:
            fetched = await self.consumer.getmany(*waiting, timeout_ms=500, max_records=1)
            for tp, msgs in fetched.items():
                if msgs and tp in waiting:
                    m = msgs[0]
                    got[(tp.topic, tp.partition)] = RawRecord(tp.topic, tp.partition, m.offset, m.timestamp, m.key,
                                                              b"" if m.value is None else m.value)  # fmt: skip
                    waiting.discard(tp)
        if waiting:
            raise KafkaTimeoutError(f"could not read the last stored records back from {sorted(map(str, waiting))}")
        mismatch = offsets_guard.compare_last(stored, got)
        if mismatch is not None:
            raise mismatch

    async def watch_broker(self) -> None:
        """Ask the broker for metadata every ``PROBE_S``: what ``/health`` says about it."""
        while not self.stopping.is_set():
            try:
                unreachable = await probe(self.settings.kafka_bootstrap_servers, PROBE_S / 2)
                if unreachable is not None:
                    raise OSError(unreachable)
                await asyncio.wait_for(self.consumer.topics(), PROBE_S)
                self.status.broker_ok()
            except (KafkaError, OSError, TimeoutError) as exc:
                self.status.broker_failed(exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), PROBE_S)

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
        self.status.stopping = self.stopping.is_set()
        self.status.details = {
            "rows_written": self.rows_written,
            "assigned": sorted(f"{tp.topic}/{tp.partition}" for tp in self.consumer.assignment()),
            "checkpoints_unpublished": len(self.unpublished),
        }
        return self.status.verdict()

    async def run(self, on_ready: Callable[[int], None] | None = None) -> None:
        runner, self.http_port = await ops.start_http(
            self.settings.http_host, self.settings.sink_http_port, self.health, self.routes, ops.SINK_METRICS
        )
        watcher: asyncio.Task[None] | None = None
        try:
            await self._start_clients()
            watcher = asyncio.ensure_future(self.watch_broker())
            while not self.status.ready and not self.stopping.is_set():  # the broker may be away at start
                await self.assign()
                if not self.status.ready:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopping.wait(), PROBE_S)
            if on_ready is not None:
                on_ready(self.http_port)
            while not self.stopping.is_set():
                await self._one_batch()
            left = time_left(SHUTDOWN_BUDGET_S)
            await self.flush()
            await self.checkpoint(force=True)
            if self.publisher is not None:
                await bounded(asyncio.shield(self.publisher), min(3.0, left() / 2), "publishing the last checkpoints")
        except BaseException as exc:
            self.failed = exc
            self.status.fail(_fault(exc))
            await self._hold_fault(exc)
            raise
        finally:
            left = time_left(SHUTDOWN_BUDGET_S / 2)
            for task in (watcher, self.publisher):
                if task is not None:
                    task.cancel()
            if self.pending is not None:  # never close the store under a commit still running in its thread
                await asyncio.gather(self.pending, return_exceptions=True)
            await bounded(self.consumer.stop(), left(), "closing the consumer")
            await bounded(self.producer.stop(), left(), "closing the producer")
            await runner.cleanup()
            self.on_stop()
            self.store.close()
            self.writer.shutdown()

    async def _start_clients(self) -> None:
        """Create the topics and start the Kafka clients; while the broker is away, wait for it (``/health``
        503 with the reason) instead of failing, until it answers or SIGTERM."""
        cfg = self.settings
        for step in (
            lambda: ensure_topics(cfg.kafka_bootstrap_servers, cfg.all_topics, cfg.topic_partitions),
            self.consumer.start,
            self.producer.start,
        ):
            await until_broker(step, self.status, self.stopping, PROBE_S)

    async def _hold_fault(self, exc: BaseException) -> None:
        """Keep answering /health with the fault (503) for a while, so that it is seen; SIGTERM ends it."""
        if isinstance(exc, Exception) and not self.stopping.is_set():
            log.error("sink stopped: %s", self.status.fault)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.fault_hold_s)

    fault_hold_s = FAULT_HOLD_S

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
        try:
            fetched = await self.consumer.getmany(
                timeout_ms=wait_ms, max_records=max(1, min(FETCH_RECORDS, cfg.sink_batch_max - filling.rows))
            )
        except OffsetOutOfRangeError as exc:  # the topic was recreated or truncated under the running sink
            await self.check_offsets(list(self.consumer.assignment()))
            raise OffsetsMismatch(f"the audit topic no longer holds the sink's next offsets: {exc}") from exc
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
        elif not runs and not filling.rows and not self.sealed:
            await self._commit_positions()
        await self.checkpoint()

    async def _commit_positions(self) -> None:
        """Idle and everything stored: report the consumer's positions as committed (monitoring only). They
        can be past the last stored record by the markers of the worker's transactions, which hold none.
        Bounded: with the broker away this must not hold up the loop (nor a SIGTERM)."""
        positions = {tp: await self.consumer.position(tp) for tp in self.consumer.assignment()}
        if positions and positions != self.reported and self.status.broker_down_since is None:
            with contextlib.suppress(KafkaError, TimeoutError):
                await asyncio.wait_for(self.consumer.commit(positions), 2.0)
                self.reported = positions

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
            highwater = self.consumer.last_stable_offset(tp)  # read_committed: open transactions are not lag
            if highwater is None:
                continue
            lag = max(0, highwater - await self.consumer.position(tp))
            ops.SINK_LAG.labels(tp.topic, str(tp.partition)).set(lag)
            total += lag
        self.status.observe_lag(total)
        return total

    async def _commit(self, prepared: list[Any], rows: int, offsets: dict[TopicPartition, int]) -> None:
        started = time.perf_counter()
        await self._in_writer(self.store.commit, prepared)
        took = time.perf_counter() - started
        ops.SINK_COMMIT_SECONDS.observe(took)
        log.debug("committed", extra={"rows": rows, "seconds": round(took, 6)})
        ops.SINK_ROWS.inc(rows)
        self.on_commit()
        self.rows_written += rows
        self.last_commit = time.monotonic()
        self.status.committed()
        try:  # monitoring only: the offsets that matter were stored with the rows (never wait out an outage)
            await asyncio.wait_for(self.consumer.commit(offsets), PROBE_S)
        except (KafkaError, TimeoutError) as exc:
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
        file first (fsync), then the checkpoints table, then the checkpoints topic (in the background, in
        order, retried while the broker is away)."""
        heads = self.store.heads()
        due = force or time.monotonic() - self.last_checkpoint >= self.settings.checkpoint_interval_s
        if not due or heads == self.checkpointed:
            return
        self.checkpoint_seq += 1
        line = self.signer.checkpoint(self.checkpoint_seq, heads)
        for path in (self.settings.checkpoint_path, self.settings.checkpoint_witness):
            if path is None:
                continue
            try:
                await self._in_writer(append_line, path, line)
            except OSError as exc:
                raise StoreError(f"cannot write the checkpoint file {path}: {exc}") from exc
        await self._in_writer(self.store.add_checkpoint, self.checkpoint_seq, line)
        self.checkpointed, self.last_checkpoint = heads, time.monotonic()
        ops.CHECKPOINTS.inc()
        self.unpublished.append(orjson.dumps(line))
        if self.publisher is None or self.publisher.done():
            self.publisher = asyncio.ensure_future(self._publish())

    async def _publish(self) -> None:
        """Send the signed checkpoints to the checkpoints topic, oldest first, until none is left. A send
        that is slow (the broker is away) is waited for again, not sent twice."""
        delivery: asyncio.Future[Any] | None = None
        while self.unpublished:
            try:
                if delivery is None:
                    send = self.producer.send(self.settings.checkpoint_topic, self.unpublished[0], key=b"checkpoint")
                    delivery = await asyncio.wait_for(send, PROBE_S * 2)
                await asyncio.wait_for(asyncio.shield(delivery), PROBE_S * 2)  # type: ignore[arg-type]
            except TimeoutError:
                self.status.broker_failed("a checkpoint was not acknowledged in time")
                continue
            except KafkaError as exc:
                self.status.broker_failed(exc)
                delivery = None
                await asyncio.sleep(1.0)
                continue
            self.unpublished.popleft()
            delivery = None


def run(settings: Settings, store: DuckDBStore) -> None:
    """Run the sink until SIGTERM/SIGINT; the batch in flight is written before it exits. It also serves
    read-only SQL over the snapshots it publishes on its HTTP port (``POST /sql``, audit/serve.py)."""
    serving = SqlServing(settings, store)

    async def main() -> None:
        sink = AuditSink(settings, store, serving.routes(), on_stop=serving.stop, on_commit=serving.publisher.poke)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, sink.stopping.set)
        await sink.run()

    asyncio.run(main())


def _fault(exc: BaseException) -> str:
    """The one-line reason ``/health`` gives for what stopped the sink (the original error, not a consequence)."""
    if isinstance(exc, DriftlogError):
        return str(exc)
    if isinstance(exc, asyncio.CancelledError):
        return "stopped"
    return f"{type(exc).__name__}: {exc}"
