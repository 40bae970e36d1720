"""What the live worker keeps between Kafka and the processor: the offsets its state covers, the outputs and
acknowledgements waiting for the next transaction, and when to commit one (:mod:`durable`).

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
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from audit.records import SourcePosition
from streams.durable import Offsets, Snapshot, Transactions, ensure_state_topic, load_snapshot
from streams.kafka.admin import partitions
from streams.pipeline import Output, Processor

Highwater = Callable[[str, int], int | None]
SNAPSHOT_SHARE = 0.2  # at most this share of the time goes to encoding snapshots


@dataclass
class WorkerState:
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

    async def start(self, bootstrap: str, state_topic: str, group: str, topics: list[str]) -> None:
        """Fence an earlier instance (its open transaction is aborted), restore the newest committed
        snapshot, and declare every partition of ``topics`` as an input channel."""
        await ensure_state_topic(bootstrap, state_topic)
        await self.transactions.start()
        snapshot = await load_snapshot(bootstrap, state_topic, group)
        if snapshot is not None:
            self.processor, self.offsets, self.seq = snapshot.processor, dict(snapshot.offsets), snapshot.seq
        inputs = await partitions(bootstrap, topics)
        for tp in inputs:
            self.channels.append(f"{tp.topic}/{tp.partition}")
            self.offsets.setdefault((tp.topic, tp.partition), 0)
        self.processor.declare(SourcePosition(tp.topic, tp.partition, 0) for tp in inputs)

    def covered(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the state already holds this input (a re-delivery after a restart)."""
        return offset < self.offsets.get((topic, partition), 0)

    def caught_up(self) -> list[str]:
        out = []
        for (topic, partition), next_offset in self.offsets.items():
            high = self.highwater(topic, partition)
            if high is not None and next_offset >= high:
                out.append(f"{topic}/{partition}")
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
