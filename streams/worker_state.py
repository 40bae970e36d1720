"""What the live worker keeps per telemetry partition (a *task*, as Kafka Streams calls it) between Kafka
and its processor: the offsets its state covers, the outputs and acknowledgements waiting for the next
transaction, and when to commit one (:mod:`durable`). A task's input is its telemetry partition (and the
metrics partition of the same number) plus **every** partition of the decisions topic, which the task reads
itself from the offsets its snapshot covers: so each job sees every decision whichever worker holds it, and
a task's records do not depend on how many workers share the partitions.

- Input below the restored snapshot's offsets was already processed: it is acknowledged and skipped.
- A channel (topic partition) whose next offset has reached its high watermark is *caught up*: it does not
  hold the watermark back (:mod:`streams.engine.timeline`).
- When every input has been caught up for ``idle_flush_s`` (wall clock), the worker ends its input as a file's
  end does: every epoch is released and every job closed, so a job's last steps and windows are emitted
  live. This is the one place where the wall clock matters: a job whose samples resume after such a flush
  starts over (a new baseline), and samples older than the flushed watermark are dead-lettered as late.
  While a transaction of the task fails (the broker is away), the idle clock does not run: nobody can tell
  whether the input has ended.
- A transaction that fails (the broker went away, :mod:`durable`) does not lose the task: what it carried is
  kept, and once the broker answers again the producer is replaced (the broker resolves the open
  transaction) and the state topic says whether it was committed after all; if not, its records go again
  with the next snapshot. Input is acknowledged only after the transaction that covers it, so Faust's
  committed offsets never pass the snapshot's. Only a fenced producer, or a snapshot committed meanwhile
  by another instance (:class:`TaskTakenOver`), stops the worker.
- The decision reader reports a failure (``problems``, shown on ``/health``) and starts again from the
  task's offsets, instead of dying silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ProducerFenced

from audit.records import SourcePosition
from streams.contract.envelope import Reject
from streams.durable import Offsets, Snapshot, Transactions, digest, ensure_state_topic, load_snapshot
from streams.health import bounded
from streams.kafka.admin import partitions
from streams.pipeline import Output, Processor, channel_of

Highwater = Callable[[str, int], int | None]
SNAPSHOT_SHARE = 0.2  # at most this share of the time goes to encoding snapshots
TRANSACTION_TIMEOUT_S = 30.0  # a commit that takes longer failed (the broker is away)
RECOVER_TIMEOUT_S = 10.0  # for each step of getting a new producer after a failed commit
READER_BACKOFF_S = (0.5, 10.0)  # the decision reader's wait after a failure: first, at most
log = logging.getLogger("driftlog.worker")


class TransactionFailed(Exception):
    """A task's transaction failed; what it carried is kept and committed once the broker is back."""


@dataclass
class _Unresolved:
    """A transaction whose outcome the task did not learn: the snapshot it carried and what it wrote."""

    seq: int
    digest: bytes  # of the snapshot as sent (durable.digest)
    offsets: Offsets
    outputs: list[Output]
    acks: list[tuple[Any, Any]]
    since: float  # monotonic time of the first failure


class TaskTakenOver(Exception):
    """While the broker was away, another instance took the task over and committed its state: this one
    must stop (a restart resumes from the newest committed snapshot)."""


@dataclass
class WorkerState:
    partition: int
    processor: Processor
    transactions: Transactions
    highwater: Highwater
    idle_flush_s: float
    seq: int = 0
    offsets: Offsets = field(default_factory=dict)
    outputs: list[Output] = field(default_factory=list)
    acks: list[tuple[Any, Any]] = field(default_factory=list)  # (stream, event) to ack after the commit
    dirty: bool = False
    idle_since: float | None = None
    flushed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    encode_s: float = 0.0  # how long the last snapshot took to encode
    committed_at: float = 0.0  # monotonic time of the last commit
    committed_offsets: Offsets = field(default_factory=dict)  # what the newest committed snapshot covers
    unresolved: _Unresolved | None = None  # a failed transaction, until the broker says what became of it
    error: str = ""  # why the last commit or recovery failed
    reader_error: str = ""  # why the decision reader last failed (cleared when it reads again)

    channels: list[str] = field(default_factory=list)
    decisions: AIOKafkaConsumer | None = None
    reader: asyncio.Task[None] | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self, bootstrap: str, state_topic: str, topics: list[str], decisions_topic: str) -> None:
        """Fence an earlier owner of the task (its open transaction is aborted), restore the task's newest
        committed snapshot, declare its input channels (partition ``partition`` of ``topics``, every
        partition of ``decisions_topic``) and start reading the decisions."""
        await ensure_state_topic(bootstrap, state_topic)
        await self.transactions.start()
        snapshot = await load_snapshot(bootstrap, state_topic, self.transactions.group)
        if snapshot is not None:
            self.processor, self.offsets, self.seq = snapshot.processor, dict(snapshot.offsets), snapshot.seq
            self.committed_offsets = dict(snapshot.offsets)
        everything = await partitions(bootstrap, [*topics, decisions_topic])
        inputs = [tp for tp in everything if tp.topic == decisions_topic or tp.partition == self.partition]
        telemetry_partitions = max(1, len({tp.partition for tp in everything if tp.topic == topics[0]}))
        self.processor.decision_share = (self.partition % telemetry_partitions, telemetry_partitions)
        for tp in inputs:
            self.channels.append(channel_of(tp.topic, tp.partition))
            self.offsets.setdefault((tp.topic, tp.partition), 0)
        self.processor.declare(SourcePosition(tp.topic, tp.partition, 0) for tp in inputs)
        self.decisions = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                          isolation_level="read_committed")  # fmt: skip
        await self.decisions.start()
        mine = [tp for tp in inputs if tp.topic == decisions_topic]
        self.decisions.assign(mine)
        for tp in mine:
            self.decisions.seek(tp, self.offsets[(tp.topic, tp.partition)])
        self.reader = asyncio.ensure_future(self._read_decisions())
        self.ready.set()

    async def stop(self) -> None:
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.reader
        if self.decisions is not None:
            await bounded(self.decisions.stop(), 3.0, "closing the decision reader")
        await self.transactions.stop()

    async def _read_decisions(self) -> None:
        """Read the decision partitions for as long as the task lives; a failure is reported
        (:meth:`problems`) and reading starts again from the task's offsets, after a growing pause."""
        assert self.decisions is not None
        pause = READER_BACKOFF_S[0]
        while True:
            try:
                batch = await self.decisions.getmany(timeout_ms=500)
            except Exception as exc:
                self.reader_error = f"{type(exc).__name__}: {exc}"
                log.warning("the decision reader failed; reading again", extra={
                    "partition": self.partition, "error": self.reader_error, "retry_in_s": pause})  # fmt: skip
                await asyncio.sleep(pause)
                pause = min(READER_BACKOFF_S[1], pause * 2)
                self._seek_decisions()
                continue
            self.reader_error, pause = "", READER_BACKOFF_S[0]
            for tp, messages in batch.items():
                for m in messages:
                    if not self.covered(tp.topic, tp.partition, m.offset):
                        self.process("decisions", m.value or b"", SourcePosition(tp.topic, tp.partition, m.offset))

    def _seek_decisions(self) -> None:
        if self.decisions is None:
            return
        with contextlib.suppress(Exception):  # (a consumer that cannot even seek fails again on the next read)
            for tp in self.decisions.assignment():
                self.decisions.seek(tp, self.offsets.get((tp.topic, tp.partition), 0))

    def problems(self) -> list[str]:
        """What ``/health`` should say about this task (503 while there is anything)."""
        out = []
        if self.unresolved is not None:
            waited = time.monotonic() - self.unresolved.since
            out.append(f"partition {self.partition}: output not committed for {waited:.0f}s, retrying: {self.error}")
        if self.reader_error:
            out.append(f"partition {self.partition}: the decision reader failed, reading again: {self.reader_error}")
        if self.reader is not None and self.reader.done():
            out.append(f"partition {self.partition}: the decision reader stopped")
        return out

    def _highwater(self, topic: str, partition: int) -> int | None:
        if self.decisions is not None and (topic, partition) in self._decision_tps():
            return self.decisions.last_stable_offset(TopicPartition(topic, partition))  # type: ignore[no-any-return]
        return self.highwater(topic, partition)

    def _decision_tps(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.decisions.assignment()} if self.decisions else set()

    def covered(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the state already holds this input (a re-delivery after a restart or a rebalance)."""
        return offset < self.offsets.get((topic, partition), 0)

    def durable(self, topic: str, partition: int, offset: int) -> bool:
        """Whether a committed snapshot covers this input (it may be acknowledged now)."""
        return offset < self.committed_offsets.get((topic, partition), 0)

    def caught_up(self) -> list[str]:
        out = []
        for (topic, partition), next_offset in self.offsets.items():
            high = self._highwater(topic, partition)
            if high is not None and next_offset >= high:
                out.append(channel_of(topic, partition))
        return out

    def handle(
        self, kind: str, value: bytes, position: SourcePosition, encoding: str = "auto", now: float | None = None
    ) -> Output:
        """A message of the ``telemetry``, ``decisions`` or ``metrics`` (OTLP) topic; ``now``: the Kafka
        record's timestamp (s), the reference for samples too far in the future."""
        tp = (position.topic, position.partition)
        self.offsets[tp] = position.offset + 1
        caught_up = self.caught_up()
        if kind == "metrics":
            out = self.processor.otlp(value, position, encoding, caught_up)
        elif kind == "telemetry":
            out = self.processor.telemetry(value, position, caught_up, now)
        else:
            out = self.processor.decision(value, position, caught_up)
        self._keep(out)
        self.idle_since, self.flushed = None, False
        return out

    def process(
        self, kind: str, value: bytes, position: SourcePosition, encoding: str = "auto", now: float | None = None
    ) -> Output:
        """:meth:`handle`, where a failure (a bug) dead-letters the message as ``internal_error`` instead of
        raising: an agent that raised would make Faust skip the message, the decision reader would stop."""
        try:
            return self.handle(kind, value, position, encoding, now)
        except Exception as exc:
            log.exception("processing failed on a message; dead-lettered", extra=position.as_dict())
            out = Output()
            out.reject(value, position, [Reject("internal_error", repr(exc))])
            self._keep(out)
            return out

    def tick(self) -> Output | None:
        """Periodically: release what the watermark allows now; after ``idle_flush_s`` of every channel
        caught up, end the input (once per idle period)."""
        caught_up = set(self.caught_up())
        if not self.channels or not set(self.channels) <= caught_up or self.unresolved is not None:
            self.idle_since = None
            return None
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        last = self._last_position()
        if self.flushed or now - self.idle_since < self.idle_flush_s:
            out = self.processor.advance(caught_up)
        else:
            out, self.flushed = self.processor.flush(last), True
        self._keep(out)
        return out

    def _keep(self, out: Output) -> None:
        self.dirty = True
        if out.audit or out.dead_letters:
            self.outputs.append(out)

    def _last_position(self) -> SourcePosition:
        (topic, partition), offset = max(self.offsets.items(), default=(("", 0), 0))
        return SourcePosition(topic, partition, max(0, offset - 1))

    async def commit(self, force: bool = False) -> int:
        """Write the outputs since the last commit with a snapshot covering them, in one transaction; then
        acknowledge the input they came from. Returns the records written. Unless ``force``d, a commit waits
        at least ``SNAPSHOT_SHARE`` times as long as the last snapshot took to encode, so that a large state
        (the event-time buffer) cannot take over the worker. A failed transaction raises
        :class:`TransactionFailed` and is resolved by a later call (see the module); ``ProducerFenced``
        is raised as it is."""
        async with self.lock:
            if self.unresolved is not None and not await self._resolve():
                raise TransactionFailed(self.error)
            if not self.dirty or (not force and time.monotonic() - self.committed_at < self.encode_s / SNAPSHOT_SHARE):
                return 0
            self.seq += 1
            snapshot = Snapshot(self.seq, self.processor, dict(self.offsets))
            started = time.monotonic()
            parts = snapshot.encode()  # before any await: nothing may change the state while it is copied
            self.encode_s, self.committed_at = time.monotonic() - started, time.monotonic()
            outputs, acks, self.outputs, self.acks, self.dirty = self.outputs, self.acks, [], [], False
            try:
                await asyncio.wait_for(self.transactions.commit(parts, outputs), TRANSACTION_TIMEOUT_S)
            except ProducerFenced:
                raise
            except Exception as exc:
                self.error = _why(exc)
                self.unresolved = _Unresolved(self.seq, digest(parts), snapshot.offsets, outputs, acks,
                                              time.monotonic())  # fmt: skip
                raise TransactionFailed(self.error) from exc
            await self._committed(snapshot.offsets, acks)
            return sum(len(o.audit) for o in outputs)

    async def _resolve(self) -> bool:
        """After a failed transaction: a new producer (the broker aborts the open transaction, or completes
        one whose commit it had accepted), then ask the state topic which. Committed (the newest snapshot is
        the one it carried, byte for byte): acknowledge its input. Aborted: its records go again, before
        those produced since, with the next snapshot. A newer or different snapshot was committed by another
        instance that took the task over: :class:`TaskTakenOver`. False while the broker does not answer."""
        failed = self.unresolved
        assert failed is not None
        try:
            await self.transactions.restart(RECOVER_TIMEOUT_S)
            newest = await self.transactions.newest_committed(RECOVER_TIMEOUT_S)
        except ProducerFenced:
            raise
        except Exception as exc:
            self.error = _why(exc)
            return False
        self.unresolved, self.error = None, ""
        if newest is not None and newest[0] >= failed.seq:
            if newest != (failed.seq, failed.digest):
                raise TaskTakenOver(f"partition {self.partition}: another worker committed snapshot {newest[0]} "
                                    "while the broker was away; stopping (a restart resumes from it)")  # fmt: skip
            log.warning("a transaction whose commit failed was committed after all", extra={
                "partition": self.partition, "snapshot": failed.seq})  # fmt: skip
            await self._committed(failed.offsets, failed.acks)
        else:
            records = sum(len(o.audit) for o in failed.outputs)
            log.warning("a failed transaction was aborted; its records go with the next one", extra={
                "partition": self.partition, "snapshot": failed.seq, "records": records})  # fmt: skip
            self.outputs, self.acks, self.dirty = failed.outputs + self.outputs, failed.acks + self.acks, True
        return True

    async def _committed(self, offsets: Offsets, acks: list[tuple[Any, Any]]) -> None:
        """A snapshot covering ``offsets`` is committed: acknowledge its input (and any re-delivered input
        waiting in ``acks`` that it covers)."""
        self.committed_offsets = offsets
        waiting, self.acks = self.acks, []
        for stream, event in acks + waiting:
            m = event.message
            if self.durable(m.topic, m.partition, m.offset):
                await stream.ack(event)
            else:
                self.acks.append((stream, event))


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "the broker did not answer in time"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
