"""What the live worker keeps per telemetry partition (a *task*, as Kafka Streams calls it) between Kafka
and its processor: the offsets its state covers, the outputs and acknowledgements waiting for the next
transaction, and when to commit one (:mod:`durable`). A task's input is its telemetry partition (and the
metrics partition of the same number) plus **every** partition of the decisions topic, which the task reads
itself from the offsets its snapshot covers: so each job sees every decision whichever worker holds it, and
a task's records do not depend on how many workers share the partitions. Samples of no job reach every task
the same way: through the other tasks' partitions of the shared topic (:mod:`streams.shared`), which a
task counts caught up only when their newest mark says so.
- A restored snapshot holds no event-time buffer: the messages it names (from the first one still
  buffered per channel up to the offsets it covers) are re-read into the processor before the task starts.

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ProducerFenced

from audit.records import SourcePosition
from streams import ops
from streams.contract.envelope import Reject
from streams.durable import (
    Offsets,
    Snapshot,
    Transactions,
    compressed,
    digest,
    ensure_state_topic,
    load_snapshot,
    reread,
)
from streams.errors import ConfigError
from streams.health import bounded
from streams.kafka.admin import partitions
from streams.pipeline import Output, Processor, channel_of
from streams.shared import Mark

Highwater = Callable[[str, int], int | None]
SNAPSHOT_SHARE = 0.2  # at most this share of the event loop's time goes to copying snapshots
TRANSACTION_TIMEOUT_S = 30.0  # a commit that takes longer failed (the broker is away)
RECOVER_TIMEOUT_S = 10.0  # for each step of getting a new producer after a failed commit
READER_BACKOFF_S = (0.5, 10.0)  # the decision reader's wait after a failure: first, at most
# a task whose own input was at least this many messages behind commits as soon as it has caught up: the end of
# a backlog, however short, is acknowledged at once, not on the next timer. That commit takes the place of the
# timer's next one (WorkerState.early): a steady input read in large fetches (a step's messages, one per rank,
# in one or more fetches, each step a "backlog" drained in ms) is not committed per step but, as without this,
# once a timer period; a backlog that ends after such a commit is left to the timer's next round
BACKLOG_MESSAGES = 100
READ_IN_FULL = ("decisions", "shared")  # kinds of input every task reads all partitions of (by its own reader)
OWN_INPUT = ("telemetry", "metrics")  # kinds of input a task reads one partition of (through Faust)
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
    encoding: str = "auto"  # of the metrics topic
    seq: int = 0
    offsets: Offsets = field(default_factory=dict)
    outputs: list[Output] = field(default_factory=list)
    acks: list[tuple[Any, Any]] = field(default_factory=list)  # (stream, event) to ack after the commit
    pending: int = 0  # messages processed since the last commit (a batch is one entry of acks)
    dirty: bool = False
    behind: bool = False  # its own input was BACKLOG_MESSAGES behind since it last caught up (commits in between too)
    # a commit at a backlog's end took the timer's next round's place (see BACKLOG_MESSAGES); ``left_to_round``: a
    # backlog ended after it, whose commit that round makes
    early: bool = False
    left_to_round: bool = False
    idle_since: float | None = None
    flushed: bool = False
    # monotonic time the task last processed an input message (any channel's: decisions and marks too), and the
    # work it did since ((monotonic start, seconds) of each tick that released or emitted, each commit): the rest
    # of the time to an idle flush is a wait (ops.INPUT_END_WAIT)
    input_at: float = 0.0
    worked: list[tuple[float, float]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    encode_s: float = 0.0  # how long the last snapshot held the event loop (copied; compressed on a thread)
    committed_at: float = 0.0  # monotonic time of the last commit
    committed_offsets: Offsets = field(default_factory=dict)  # what the newest committed snapshot covers
    unresolved: _Unresolved | None = None  # a failed transaction, until the broker says what became of it
    error: str = ""  # why the last commit or recovery failed
    after_failures: int = 0  # failures after a message was processed (its metrics, a commit's timing)
    reader_error: str = ""  # why the decision reader last failed (cleared when it reads again)

    kinds: dict[str, str] = field(default_factory=dict)  # input topic -> telemetry|metrics|decisions|shared
    marked: Mark | None = None  # the mark the last committed transaction carried
    channels: list[str] = field(default_factory=list)
    decisions: AIOKafkaConsumer | None = None
    reader: asyncio.Task[None] | None = None
    # where the reader's consumer stands (past the commit markers of a transactional topic, which no message
    # shows: the shared topic's end is reached only there)
    read_to: Offsets = field(default_factory=dict)
    reads: set[tuple[str, int]] = field(default_factory=set)  # the partitions the reader is assigned (fixed)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    deferred: asyncio.Task[None] | None = None  # a backlog's end commit, waiting until it is allowed
    # the channels caught up as of the message just handled, for the driver's commit decision to take
    # (caught_up() asks for every channel's high watermark: once a message, not three times)
    caught: list[str] | None = None
    named: dict[tuple[str, int], tuple[str, bool, TopicPartition]] = field(default_factory=dict)  # (_channel)
    # the high watermark of each channel as caught_up() last read it (asked once per message, not three times);
    # a shared channel whose mark is down is not read, so its entry may be old: only own input is looked up here
    highs: dict[tuple[str, int], int | None] = field(default_factory=dict)
    stopped: bool = False  # (a handler that waited on the lock while the task was stopped defers nothing)

    async def start(self, bootstrap: str, state_topic: str, inputs: dict[str, str]) -> None:
        """Fence an earlier owner of the task (its open transaction is aborted), restore the task's newest
        committed snapshot (its buffer re-read, :meth:`_rebuffer`), declare its input channels and start
        reading those read in full. ``inputs``: topic -> kind; the task reads partition ``partition`` of the
        ``telemetry`` and ``metrics`` topics, every partition of ``decisions`` and every other one of
        ``shared`` (its own carries what it forwards)."""
        await ensure_state_topic(bootstrap, state_topic)
        await self.transactions.start()
        snapshot = await load_snapshot(bootstrap, state_topic, self.transactions.group)
        self.kinds = dict(inputs)
        if snapshot is not None:
            self.processor, self.offsets, self.seq = snapshot.processor, dict(snapshot.offsets), snapshot.seq
            self.committed_offsets = dict(snapshot.offsets)
            await self._rebuffer(bootstrap, snapshot)
        everything = [(tp.topic, tp.partition) for tp in await partitions(bootstrap, list(inputs))]
        mine = [TopicPartition(t, p) for t, p in self.configure(inputs, everything)]
        self.decisions = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                          isolation_level="read_committed")  # fmt: skip
        await self.decisions.start()
        self.decisions.assign(mine)
        self.reads = {(tp.topic, tp.partition) for tp in mine}
        for tp in mine:
            self.decisions.seek(tp, self.offsets[(tp.topic, tp.partition)])
        self.reader = asyncio.ensure_future(self._read_decisions())
        self.ready.set()

    def configure(self, inputs: dict[str, str], everything: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """The task's input channels among ``everything`` (the partitions of the ``inputs`` topics), declared
        to its processor; which part of the output is its to write (decision records by ``decision_share``,
        the control plane's findings by the task of the lowest telemetry partition). Returns the channels
        its own reader reads (decisions and shared)."""
        self.kinds, self.named = dict(inputs), {}
        shared = [t for t, p in everything if inputs.get(t) == "shared" and p == self.partition]
        if "shared" in inputs.values() and not shared:
            topic = next(t for t, k in inputs.items() if k == "shared")
            raise ConfigError(f"the shared topic {topic} has no partition {self.partition} (the telemetry topic has "
                              "more partitions): give it as many partitions as the telemetry topic")  # fmt: skip
        channels = [(t, p) for t, p in everything if self._reads(t, p)]
        telemetry = sorted(p for t, p in everything if inputs.get(t) == "telemetry")
        self.processor.decision_share = (self.partition % max(1, len(telemetry)), max(1, len(telemetry)))
        self.processor.engine.owns_control = self.partition == min(telemetry, default=self.partition)
        self.processor.forwards = "shared" in inputs.values() and len(telemetry) > 1  # (alone: nobody to tell)
        for t, p in channels:
            self.channels.append(channel_of(t, p))
            self.offsets.setdefault((t, p), 0)
        self.processor.declare(SourcePosition(t, p, 0) for t, p in channels)
        return [(t, p) for t, p in channels if self.kinds[t] in READ_IN_FULL]

    def _reads(self, topic: str, partition: int) -> bool:
        kind = self.kinds.get(topic)
        if kind == "decisions":
            return True
        if kind == "shared":
            return partition != self.partition
        return partition == self.partition

    async def _rebuffer(self, bootstrap: str, snapshot: Snapshot) -> None:
        """Re-read what the restored processor still had buffered (the snapshot leaves the buffer out)."""
        async for topic, partition, offset, value in reread(bootstrap, snapshot.ranges()):
            self.processor.rebuffer(value, SourcePosition(topic, partition, offset), self.kinds[topic], self.encoding)

    async def stop(self) -> None:
        self.stopped = True
        if self.deferred is not None:
            self.deferred.cancel()
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
                kind = self.kinds[tp.topic]
                for m in messages:
                    if not self.covered(tp.topic, tp.partition, m.offset):
                        self.process(kind, m.value or b"", SourcePosition(tp.topic, tp.partition, m.offset))
            with contextlib.suppress(Exception):  # (the next read tries again)
                for tp in self.decisions.assignment():
                    self.read_to[(tp.topic, tp.partition)] = await self.decisions.position(tp)

    def _seek_decisions(self) -> None:
        if self.decisions is None:
            return
        self.read_to.clear()
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
        if self.decisions is not None and (topic, partition) in self.reads:
            return self.decisions.last_stable_offset(TopicPartition(topic, partition))  # type: ignore[no-any-return]
        return self.highwater(topic, partition)

    def covered(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the state already holds this input (a re-delivery after a restart or a rebalance)."""
        return offset < self.offsets.get((topic, partition), 0)

    def durable(self, topic: str, partition: int, offset: int) -> bool:
        """Whether a committed snapshot covers this input (it may be acknowledged now)."""
        return offset < self.committed_offsets.get((topic, partition), 0)

    def caught_up(self) -> list[str]:
        """The input channels read to their end; a shared one only once its newest mark says that the task
        forwarding to it is caught up too (:mod:`streams.shared`)."""
        out = []
        marks, read_to, reader = self.processor.marks, self.read_to, self.decisions
        for tp, processed in self.offsets.items():
            name, shared, topic_partition = self._channel(tp)
            if shared and not marks.get(name, False):
                continue
            if reader is not None and tp in self.reads:
                high = reader.last_stable_offset(topic_partition)
            else:
                high = self.highwater(*tp)
            self.highs[tp] = high
            if high is not None and max(processed, read_to.get(tp, 0)) >= high:
                out.append(name)
        return out

    def _channel(self, tp: tuple[str, int]) -> tuple[str, bool, TopicPartition]:
        """A channel's name, whether it is a shared one, its ``TopicPartition``: made once, not for every
        channel on every message (:meth:`caught_up`)."""
        known = self.named.get(tp)
        if known is None:
            known = self.named[tp] = (channel_of(*tp), self.kinds.get(tp[0]) == "shared", TopicPartition(*tp))
        return known

    def backlog_ended(self, caught_up: Iterable[str] | None = None) -> bool:
        """Whether the task has just caught up with its own input after a backlog (:data:`BACKLOG_MESSAGES`
        behind) and its commit is due now: unless such a commit already took the timer's next round's place
        (:attr:`early`; that round commits it instead, :meth:`timer_due`). The decision and shared channels,
        read in full by its own reader, do not count: their marks move only with the other tasks' commits.
        ``caught_up``: :meth:`caught_up` already asked (e.g. :attr:`caught`)."""
        if not self.behind or not self.own_caught_up(caught_up):
            return False
        self.behind = False
        self.left_to_round = self.early
        return not self.early

    def timer_due(self, out: Output | None) -> bool:
        """The state timer's round, after :meth:`tick` gave ``out``: whether it should commit the task. Not if
        a commit at a backlog's end took this round's place, unless a backlog ended after that one (this round
        commits it, and takes the next round's place in turn: one commit a round at most), the tick has
        records (they wait no longer than without it) or a failed transaction waits for a retry."""
        due = not self.early or self.left_to_round or self.unresolved is not None or bool(out is not None and out.audit)
        self.early, self.left_to_round = self.left_to_round, False  # (a round that commits takes the next one's place)
        return due

    def _behind(self, tp: tuple[str, int], offset: int) -> int:
        """Messages after ``offset`` in partition ``tp`` as of the last fetch (0: not known), by the high
        watermark :meth:`caught_up` has just read."""
        high = self.highs.get(tp)
        return 0 if high is None else high - offset - 1

    def own_caught_up(self, caught_up: Iterable[str] | None = None) -> bool:
        """Whether the task's own input (its telemetry and metrics partitions) is read to its end."""
        caught = set(self.caught_up() if caught_up is None else caught_up)
        return all(channel_of(t, p) in caught for t, p in self.offsets if self.kinds.get(t) in OWN_INPUT)

    def live(self, caught_up: Iterable[str] | None = None) -> bool:
        """Whether every input channel is caught up (the task keeps up with its input in real time)."""
        caught = set(self.caught_up() if caught_up is None else caught_up)
        return bool(self.channels) and set(self.channels) <= caught

    def mark(self) -> Mark:
        """How far the task's own input (its telemetry and metrics partitions) has come, for the other tasks:
        the oldest newest event time of those not caught up (all caught up: the newest)."""
        caught_up = set(self.caught_up())
        own = [channel_of(t, p) for t, p in self.offsets if self.kinds.get(t) in OWN_INPUT]
        behind = [c for c in own if c not in caught_up]
        times = [self.processor.timeline.newest(c) for c in behind or own]
        if not times:
            return Mark(float("-inf"), True)
        return Mark(min(times) if behind else max(times), not behind)

    def handle(
        self, kind: str, value: bytes, position: SourcePosition, encoding: str = "auto", now: float | None = None
    ) -> Output:
        """A message of the ``telemetry``, ``decisions`` or ``metrics`` (OTLP) topic; ``now``: the Kafka
        record's timestamp (s), the reference for samples too far in the future."""
        self.caught = None  # (until asked below: a message that fails before has the driver ask again)
        tp = (position.topic, position.partition)
        self.offsets[tp] = position.offset + 1
        caught_up = self.caught = self.caught_up()  # (its high watermarks answer _behind and the lag gauge too)
        if not self.behind and kind in OWN_INPUT and self._behind(tp, position.offset) >= BACKLOG_MESSAGES:
            self.behind = True
        if kind == "metrics":
            out = self.processor.otlp(value, position, encoding, caught_up)
        elif kind == "telemetry":
            out = self.processor.telemetry(value, position, caught_up, now)
        elif kind == "shared":
            out = self.processor.shared(value, position, caught_up)
        else:
            out = self.processor.decision(value, position, caught_up)
        self._keep(out)
        self.idle_since, self.flushed = None, False
        self.input_at = time.monotonic()
        self.worked.clear()
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
        if not self.live() or self.unresolved is not None:
            self.idle_since = None
            return None
        caught_up = set(self.caught_up())
        now = time.monotonic()
        self.idle_since = self.idle_since or now
        last, frontier = self._last_position(), self.processor.timeline.frontier
        if self.flushed or now - self.idle_since < self.idle_flush_s:
            out = self.processor.advance(caught_up)
        else:
            out, self.flushed = self.processor.flush(last), True
        self._released(out, frontier, now)
        return out

    def _released(self, out: Output, frontier: float, began: float) -> None:
        """Keep what a tick (begun at ``began``) gave (the input offsets did not move); work was done if the
        timeline's frontier moved past ``frontier`` (its value before) or anything was emitted."""
        self._keep(out, moved=False)
        if self.processor.timeline.frontier != frontier or out.audit or out.dead_letters or out.forward:
            self.worked.append((began, time.monotonic() - began))

    def _keep(self, out: Output, moved: bool = True) -> None:
        """Keep ``out`` for the next transaction; ``moved``: the input offsets advanced (a snapshot is due
        even without output). An idle task's ticks that emit nothing leave it clean: no snapshot every
        interval (what they changed is rebuilt from the last snapshot's input alone)."""
        produced = bool(out.audit or out.dead_letters or out.forward)
        self.dirty = self.dirty or moved or produced
        if produced:
            self.outputs.append(out)

    def _last_position(self) -> SourcePosition:
        (topic, partition), offset = max(self.offsets.items(), default=(("", 0), 0))
        return SourcePosition(topic, partition, max(0, offset - 1))

    async def commit(self, force: bool = False) -> int:
        """Write the outputs since the last commit with a snapshot covering them, in one transaction; then
        acknowledge the input they came from. Returns the records written. Unless ``force``d, a commit waits
        at least 1 / ``SNAPSHOT_SHARE`` times as long as the last snapshot held the event loop (copying the
        state; its compression runs on a thread meanwhile), so that a large state cannot take over the worker.
        A failed transaction raises :class:`TransactionFailed` and is resolved by a later call (see the
        module); ``ProducerFenced`` is raised as it is."""
        async with self.lock:
            if self.stopped:  # moved away meanwhile: its next owner resumes from the last snapshot
                return 0
            if self.unresolved is not None and not await self._resolve():
                raise TransactionFailed(self.error)
            mark = self.mark()
            too_soon = not force and self.allowed_in() > 0
            if (not self.dirty and mark == self.marked) or too_soon:
                return 0
            self.seq += 1
            snapshot = Snapshot(self.seq, self.processor, dict(self.offsets))
            started = time.monotonic()
            state = snapshot.pickled()  # before any await: nothing may change the state while it is copied
            outputs, acks, self.outputs, self.acks, self.dirty = self.outputs, self.acks, [], [], False
            self.pending = 0
            self.committed_at = time.monotonic()
            self.encode_s = self.committed_at - started  # what the event loop spent (input waited meanwhile)
            try:
                parts = await asyncio.to_thread(compressed, self.seq, state)  # input is processed meanwhile
            except BaseException:  # (cancelled, out of memory) the next snapshot covers these outputs too
                self.outputs, self.acks, self.dirty = outputs + self.outputs, acks + self.acks, True
                raise
            ops.SNAPSHOT_SECONDS.observe(time.monotonic() - started)
            ops.SNAPSHOT_BYTES.observe(sum(map(len, parts)))
            try:
                marking = mark.encode() if mark != self.marked else None  # (a mark only when it changed)
                await asyncio.wait_for(self.transactions.commit(parts, outputs, marking), TRANSACTION_TIMEOUT_S)
            except ProducerFenced:
                raise
            except Exception as exc:
                self.error = _why(exc)
                self.unresolved = _Unresolved(self.seq, digest(parts), snapshot.offsets, outputs, acks,
                                              time.monotonic())  # fmt: skip
                raise TransactionFailed(self.error) from exc
            self.marked = mark
            await self._committed(snapshot.offsets, acks)
            self.worked.append((started, time.monotonic() - started))  # (the broker's answer waited for too: work)
            return sum(len(o.audit) for o in outputs)

    def allowed_in(self) -> float:
        """Seconds until a commit that is not forced may copy the state again (``SNAPSHOT_SHARE``)."""
        return self.committed_at + self.encode_s / SNAPSHOT_SHARE - time.monotonic()

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
