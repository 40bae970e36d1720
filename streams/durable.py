"""Durable worker state with an exactly-once effect: Kafka's consume-transform-produce, done by hand.

The worker's processing state (engine, admission, the timeline's channel times and frontier) is snapshotted
together with the input offsets it covers (Flink's aligned checkpoint), and written in the **same Kafka
transaction** as the audit records, dead letters and forwarded job-less samples (:mod:`streams.shared`)
produced since the previous snapshot (Kafka Streams' changelog + transactions). The event-time buffer is
left out (it is most of the state mid-run): the snapshot names, per input channel, the offset from which
the messages still buffered are re-read on restore (:meth:`Snapshot.ranges`, :func:`reread`).
The sink reads ``read_committed``, so it sees the records of a transaction exactly when the state that
produced them is durable. After a crash, the new worker fences the old one (same ``transactional_id``: its
open transaction is aborted), loads the newest committed snapshot and skips input below the snapshot's
offsets: the records it then produces are those the dead worker produced in its aborted transaction, with
the same ids and bodies, because the engine is a function of its input. Faust's own committed offsets only
trail the snapshots (messages are acknowledged after the transaction that covers them commits), so they are
monitoring, never the source of truth.

A snapshot is pickled, zstd-compressed (level 1: a 768-rank task's state in a quarter of zlib level 1's time,
and smaller: ``bench/bench_snapshot_codec.py``) and split into parts of at most ``PART_BYTES`` (under Kafka's
default message size limit), keyed ``<group>/<part>`` on a compacted topic of one partition; a part carries the
snapshot's sequence number and part count, so a reader takes the newest complete sequence.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import pickle
import struct
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import zstandard
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError

from streams.errors import DriftlogError
from streams.health import bounded
from streams.pipeline import DeadLetter, Output, Processor, parse_channel

log = logging.getLogger("driftlog.durable")

PART_BYTES = 900_000
# The shape of the pickled state. Bump it whenever a change to the engine, the timeline or the admission
# state would make an older snapshot restore into objects the new code cannot use (missing or retyped fields).
STATE_VERSION = 10  # 1: before the version was recorded (a 2-tuple); 2: the whole processor, its buffer included;
# 3: the processor without its event-time buffer (re-read on restore); 4: a job keeps its pending decompositions
# 5: a job keeps where its last analysed step ended on its actual and ideal timelines (engine/carry.py)
# 6: a job keeps its ranks' and links' evidence of systematic slowness; a pending decomposition its peers
# (engine/systematic.py); 7: the timeline knows which channels delivered decisions; 8: a job's peer groupings
# share arrays and keep int32 keys, a schedule builds its gathers on first use, an early warning's default trigger
# is the joint test of the variance's and the autocovariance's taus; zstd instead of zlib (older bodies still read);
# 9: a series-drift detector keeps the metric of each of its series (SeriesDrift._metrics, _metric_of);
# 10: a job's operator graph keeps its nodes and edges as of its last snapshot sorted too (OperatorGraph._sorted)
_HEADER = struct.Struct(">QII")  # sequence, part, parts
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first bytes (a zlib stream starts with 0x78)
Offsets = dict[tuple[str, int], int]  # (topic, partition) -> next offset to process


class StateVersionError(DriftlogError):
    """A snapshot written by a driftlog whose engine state has another shape."""


@dataclass
class Snapshot:
    """A task's state as committed: the processor without its event-time buffer (:meth:`Processor.snapshot`),
    per input channel the offset from which to re-read what was buffered (``pending``), and the offsets the
    state covers. Restoring is :meth:`decode`, then :func:`reread` of the pending ranges into
    :meth:`Processor.rebuffer`."""

    seq: int
    processor: Processor
    offsets: Offsets
    pending: dict[str, int] = field(default_factory=dict)  # channel -> first offset to re-read

    def encode(self) -> list[bytes]:
        """The parts to write: :meth:`pickled`, then :func:`compressed`."""
        return compressed(self.seq, self.pickled())

    def pickled(self) -> bytes:
        """The state as it is now, copied into bytes: what must happen before the processor changes again."""
        light = self.processor.snapshot()
        return pickle.dumps((STATE_VERSION, light.state, light.pending, self.offsets), protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def decode(seq: int, parts: dict[int, bytes]) -> Snapshot:
        state = pickle.loads(_decompress(b"".join(parts[i] for i in sorted(parts))))
        version = state[0] if isinstance(state, tuple) and len(state) >= 3 else 1
        if version != STATE_VERSION:
            raise StateVersionError(
                f"the state topic holds a worker snapshot of state version {version}, this driftlog reads version "
                f"{STATE_VERSION}: let the old worker finish its input, or start this one with a new "
                'DRIFTLOG_WORKER_GROUP (README, "Upgrading a running worker")'
            )
        _, light, pending, offsets = state
        return Snapshot(seq, Processor.resume(light), offsets, pending)

    def ranges(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per topic partition, the offsets [first, end) to re-read into the restored processor's buffer."""
        out = {}
        for name, first in self.pending.items():
            tp = parse_channel(name)
            if first < self.offsets.get(tp, 0):
                out[tp] = (first, self.offsets[tp])
        return out


def compressed(seq: int, state: bytes) -> list[bytes]:
    """Snapshot ``seq``'s :meth:`Snapshot.pickled` state as parts to write. Touches nothing else, and zstd
    releases the GIL: it may run on a thread while the event loop goes on."""
    body = zstandard.ZstdCompressor(level=1).compress(state)
    chunks = [body[i : i + PART_BYTES] for i in range(0, len(body), PART_BYTES)] or [b""]
    return [_HEADER.pack(seq, i, len(chunks)) + c for i, c in enumerate(chunks)]


def _decompress(body: bytes) -> bytes:
    """A snapshot's pickled state: zstd, or zlib as written before (so that an older worker's snapshot is
    still recognised, and refused by its version)."""
    if body.startswith(_ZSTD_MAGIC):
        return zstandard.ZstdDecompressor().decompress(body)
    return zlib.decompress(body)


async def reread(
    bootstrap: str, ranges: dict[tuple[str, int], tuple[int, int]]
) -> AsyncIterator[tuple[str, int, int, bytes]]:
    """The committed messages of each (topic, partition) in its [first, end) range: (topic, partition,
    offset, value), each partition in offset order."""
    if not ranges:
        return
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, max_partition_fetch_bytes=4 * PART_BYTES)  # fmt: skip
    await consumer.start()
    try:
        tps = {TopicPartition(*tp): span for tp, span in ranges.items()}
        consumer.assign(list(tps))
        for tp, (first, _) in tps.items():
            consumer.seek(tp, first)
        waiting = set(tps)
        while waiting:
            batch = await consumer.getmany(*waiting, timeout_ms=1000)
            for tp in list(waiting):
                end = tps[tp][1]
                for m in batch.get(tp, []):
                    if m.offset < end:
                        yield tp.topic, tp.partition, m.offset, m.value or b""
                if await consumer.position(tp) >= end:
                    waiting.discard(tp)
    finally:
        await consumer.stop()


async def ensure_state_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    await admin.start()
    try:
        if topic not in set(await admin.list_topics()):
            await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()


async def load_snapshot(bootstrap: str, topic: str, group: str) -> Snapshot | None:
    """The newest complete snapshot of ``group`` (committed transactions only), or None."""
    found, counts = await _read_parts(bootstrap, topic, group, 0)
    complete = [s for s, parts in found.items() if len(parts) == counts[s]]
    if not complete:
        return None
    seq = max(complete)
    return Snapshot.decode(seq, found[seq])


async def newest_committed(bootstrap: str, topic: str, group: str, since: int) -> tuple[int, bytes] | None:
    """The sequence number and :func:`digest` of the newest complete snapshot of ``group`` at or after offset
    ``since`` of the state topic (committed transactions only), or None: whether a transaction whose outcome
    the worker did not learn (the broker went away during its commit) was committed after all, and whether
    it was this instance's."""
    found, counts = await _read_parts(bootstrap, topic, group, since, keep_header=True)
    complete = [s for s, parts in found.items() if len(parts) == counts[s]]
    if not complete:
        return None
    seq = max(complete)
    return seq, digest([found[seq][i] for i in sorted(found[seq])])


def digest(parts: list[bytes]) -> bytes:
    """What identifies one encoded snapshot (its parts as sent, headers included)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part)
    return h.digest()


async def _read_parts(
    bootstrap: str, topic: str, group: str, since: int, keep_header: bool = False
) -> tuple[dict[int, dict[int, bytes]], dict[int, int]]:
    """Every snapshot part of ``group`` from offset ``since`` to the end: {seq: {part: body}}, {seq: parts}
    (a part with its header when ``keep_header``)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
        max_partition_fetch_bytes=4 * PART_BYTES, auto_offset_reset="earliest",
    )  # fmt: skip
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, since)
        end = (await consumer.end_offsets([tp]))[tp]
        found: dict[int, dict[int, bytes]] = {}
        counts: dict[int, int] = {}
        prefix = f"{group}/".encode()
        while await consumer.position(tp) < end:
            batch = await consumer.getmany(tp, timeout_ms=1000)
            for record in batch.get(tp, []):
                if record.key is None or not record.key.startswith(prefix) or record.value is None:
                    continue
                seq, part, parts = _HEADER.unpack_from(record.value)
                found.setdefault(seq, {})[part] = record.value if keep_header else record.value[_HEADER.size :]
                counts[seq] = parts
        return found, counts
    finally:
        await consumer.stop()


@dataclass
class Transactions:
    """The worker's transactional producer: :meth:`commit` writes what was produced since the last commit
    and the snapshot that covers it, atomically. A commit that fails or does not finish within
    ``TRANSACTION_TIMEOUT_S`` (the broker went away) leaves the producer unusable: :meth:`restart` replaces
    it, which fences the old one, so that the broker aborts the open transaction (or completes one whose
    commit it had accepted); :meth:`newest_committed` then tells which it was."""

    bootstrap: str
    group: str
    state_topic: str
    audit_topic: str
    dead_letter_topic: str
    producer: AIOKafkaProducer | None = None
    state_offset: int = 0  # where the newest committed snapshot of this group starts in the state topic
    shared_topic: str = ""  # where forwarded job-less samples and marks go (streams.shared)
    partition: int = 0  # the task's, and its partition of the shared topic

    async def start(self) -> None:
        """A producer with the task's transactional id, its producer id initialised: an earlier instance is
        fenced and its open transaction resolved by the broker before this returns."""
        self.producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, transactional_id=f"{self.group}/worker", enable_idempotence=True,
            acks="all", max_request_size=8 * 1024 * 1024, linger_ms=5,
        )  # fmt: skip
        await self.producer.start()
        await self.producer.begin_transaction()  # waits for the producer id: the fencing happens here
        await self.producer.abort_transaction()  # (an empty transaction: nothing is sent)

    async def stop(self) -> None:
        """Close the producer; with the broker away its undelivered sends are given up after a moment."""
        if self.producer is not None:
            await bounded(asyncio.shield(_close(self.producer)), 3.0, "closing the transactional producer")

    async def restart(self, timeout_s: float) -> None:
        """Replace a producer that failed a commit (see the class); raises while the broker is away."""
        old, self.producer = self.producer, None
        if old is not None:  # it may hold sends it cannot deliver: it closes in the background
            await bounded(asyncio.shield(_close(old)), min(2.0, timeout_s), "closing a failed transactional producer")
        try:
            await asyncio.wait_for(self.start(), timeout_s)
        except BaseException:
            failed, self.producer = self.producer, None
            if failed is not None:
                _close(failed)
            raise

    async def newest_committed(self, timeout_s: float) -> tuple[int, bytes] | None:
        """The newest snapshot of this task the state topic holds as committed (see :func:`newest_committed`)."""
        return await asyncio.wait_for(
            newest_committed(self.bootstrap, self.state_topic, self.group, self.state_offset), timeout_s
        )

    async def commit(self, parts: list[bytes], outputs: list[Output], mark: bytes | None = None) -> None:
        """The outputs, then ``mark`` (:class:`streams.shared.Mark`), and the encoded snapshot
        (:meth:`Snapshot.encode`) that covers them, atomically. On failure nothing is aborted here (the broker
        may be away): :meth:`restart` does that."""
        producer = self.producer
        if producer is None:
            raise KafkaConnectionError("the transactional producer is not started (the broker was away)")
        await producer.begin_transaction()
        for out in outputs:
            for record in out.audit:
                await producer.send(self.audit_topic, record.encode(), key=record.key.encode())
            for dl in out.dead_letters:
                await _send_dead_letter(producer, self.dead_letter_topic, dl)
            for samples in out.forward:
                await producer.send(self.shared_topic, samples, partition=self.partition)
        if mark is not None and self.shared_topic:
            await producer.send(self.shared_topic, mark, partition=self.partition)
        first = None
        for i, part in enumerate(parts):
            sent = await producer.send(self.state_topic, part, key=f"{self.group}/{i}".encode(), partition=0)
            first = first or sent
        await producer.commit_transaction()
        if first is not None:
            self.state_offset = (await first).offset


_closing: set[asyncio.Future[None]] = set()  # producers closing in the background (referenced until closed)


def _close(producer: AIOKafkaProducer) -> asyncio.Future[None]:
    closing: asyncio.Future[None] = asyncio.ensure_future(producer.stop())
    _closing.add(closing)
    closing.add_done_callback(_closing.discard)
    return closing


async def _send_dead_letter(producer: AIOKafkaProducer, topic: str, dl: DeadLetter) -> Any:
    return await producer.send(topic, dl.original, key=dl.source.topic.encode(), headers=dl.headers())
