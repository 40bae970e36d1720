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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from audit.records import SourcePosition
from streams.durable import Offsets, Snapshot, Transactions, ensure_state_topic, load_snapshot
from streams.kafka.admin import partitions
from streams.pipeline import Output, Processor, channel_of

Highwater = Callable[[str, int], int | None]
SNAPSHOT_SHARE = 0.2  # at most this share of the time goes to encoding snapshots


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
            with contextlib.suppress(Exception):
                await self.decisions.stop()
        await self.transactions.stop()

    async def _read_decisions(self) -> None:
        assert self.decisions is not None
        while True:
            batch = await self.decisions.getmany(timeout_ms=500)
            for tp, messages in batch.items():
                for m in messages:
                    if not self.covered(tp.topic, tp.partition, m.offset):
                        self.handle("decisions", m.value or b"", SourcePosition(tp.topic, tp.partition, m.offset))

    def _highwater(self, topic: str, partition: int) -> int | None:
        if self.decisions is not None and (topic, partition) in self._decision_tps():
            return self.decisions.last_stable_offset(TopicPartition(topic, partition))  # type: ignore[no-any-return]
        return self.highwater(topic, partition)

    def _decision_tps(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.decisions.assignment()} if self.decisions else set()

    def covered(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the state already holds this input (a re-delivery after a restart)."""
        return offset < self.offsets.get((topic, partition), 0)

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

    def tick(self) -> Output | None:
        """Periodically: release what the watermark allows now; after ``idle_flush_s`` of every channel
        caught up, end the input (once per idle period)."""
        caught_up = set(self.caught_up())
        if not self.channels or not set(self.channels) <= caught_up:
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
        (the event-time buffer) cannot take over the worker."""
        async with self.lock:
            if not self.dirty or (not force and time.monotonic() - self.committed_at < self.encode_s / SNAPSHOT_SHARE):
                return 0
            self.seq += 1
            snapshot = Snapshot(self.seq, self.processor, dict(self.offsets))
            started = time.monotonic()
            parts = snapshot.encode()  # before any await: nothing may change the state while it is copied
            self.encode_s, self.committed_at = time.monotonic() - started, time.monotonic()
            outputs, acks, self.outputs, self.acks, self.dirty = self.outputs, self.acks, [], [], False
            await self.transactions.commit(parts, outputs)
            for stream, event in acks:
                await stream.ack(event)
            return sum(len(o.audit) for o in outputs)

