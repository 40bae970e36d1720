"""A task's transactions through a broker outage (an in-memory twin of :class:`streams.durable.Transactions`):
a failed commit keeps what it carried, is resolved once the broker answers (committed after all, or aborted
and sent again), every record reaches the committed output once and input is acknowledged only after the
snapshot that covers it; a fenced producer stops the task; the decision reader reports a failure and reads
on. (tests/integration/test_worker_outage.py does the same against a real broker that is stopped.)"""

from __future__ import annotations

import asyncio
import pickle
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, ProducerFenced

from streams.config import Settings
from streams.durable import _HEADER, STATE_VERSION, Snapshot, StateVersionError, digest
from streams.pipeline import Output, Processor, build_processor
from streams.worker_state import BACKLOG_MESSAGES, TaskTakenOver, TransactionFailed, WorkerState


@dataclass
class Broker:
    """What the broker holds as committed: records, and the newest snapshot's sequence."""

    records: list[str] = field(default_factory=list)
    seq: int | None = None
    up: bool = True
    commit_lands: bool = False  # the broker commits the transaction, but the answer is lost
    fenced: bool = False
    digest: bytes = b""  # of the newest committed snapshot


@dataclass
class FakeTransactions:
    broker: Broker
    restarts: int = 0

    async def commit(self, parts: list[bytes], outputs: list[Output], mark: bytes | None = None) -> None:
        if self.broker.fenced:
            raise ProducerFenced()
        seq = int(parts[0].decode())
        if self.broker.up:
            self._land(seq, outputs)
            return
        if self.broker.commit_lands:
            self._land(seq, outputs)
        raise KafkaConnectionError("broker away")

    def _land(self, seq: int, outputs: list[Output]) -> None:
        self.broker.records += [r for o in outputs for r in o.audit]  # type: ignore[misc]
        self.broker.seq, self.broker.digest = seq, digest([str(seq).encode()])

    async def restart(self, timeout_s: float) -> None:
        if not self.broker.up:
            raise KafkaConnectionError("broker away")
        self.restarts += 1

    async def newest_committed(self, timeout_s: float) -> tuple[int, bytes] | None:
        if self.broker.seq is None:
            return None
        return self.broker.seq, self.broker.digest


class Snap:
    """Stands in for :class:`streams.durable.Snapshot` so that the parts carry just the sequence."""

    def __init__(self, seq: int, processor: Any, offsets: Any) -> None:
        self.seq, self.offsets = seq, offsets

    def pickled(self) -> bytes:
        return str(self.seq).encode()


@dataclass
class Event:
    message: Any


@dataclass
class Message:
    topic: str
    partition: int
    offset: int


@dataclass
class Stream:
    acked: list[int] = field(default_factory=list)

    async def ack(self, event: Event) -> None:
        self.acked.append(event.message.offset)


def fetched(*offsets: int) -> Event:
    """A partition's messages of one fetch, as Faust gives them to the agent (:class:`streams.kafka.batching.Batch`)."""
    from types import SimpleNamespace

    messages = [SimpleNamespace(topic="telemetry", partition=0, offset=o, value=b"", timestamp=None) for o in offsets]
    return Event(SimpleNamespace(topic="telemetry", partition=0, offset=offsets[-1], messages=messages))


def task(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> WorkerState:
    monkeypatch.setattr("streams.worker_state.Snapshot", Snap)
    monkeypatch.setattr("streams.worker_state.compressed", lambda seq, state: [state])
    return WorkerState(0, Processor(), FakeTransactions(broker), lambda t, p: None, 2.0)  # type: ignore[arg-type]


def take(state: WorkerState, stream: Stream, offset: int, record: str) -> None:
    """As the agent does: the state moves past ``offset`` and holds ``record`` until a commit."""
    state.offsets[("telemetry", 0)] = offset + 1
    out = Output()
    out.audit.append(record)  # type: ignore[arg-type]
    state.outputs.append(out)
    state.acks.append((stream, Event(Message("telemetry", 0, offset))))
    state.dirty = True


@pytest.mark.parametrize("commit_lands", [False, True], ids=["aborted", "committed-after-all"])
def test_a_failed_transaction_is_kept_and_resolved_once_the_broker_is_back(
    commit_lands: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, stream = Broker(commit_lands=commit_lands), Stream()
    state = task(broker, monkeypatch)

    async def main() -> None:
        take(state, stream, 0, "r0")
        assert await state.commit(force=True) == 1
        assert stream.acked == [0]
        broker.up = False
        take(state, stream, 1, "r1")
        with pytest.raises(TransactionFailed):
            await state.commit(force=True)
        assert stream.acked == [0]  # nothing acknowledged while the outcome is unknown
        assert state.problems() and "not committed" in state.problems()[0]
        take(state, stream, 2, "r2")  # input goes on while the broker is away
        with pytest.raises(TransactionFailed):  # still away: still unresolved
            await state.commit(force=True)
        assert state.tick() is None  # the idle clock does not run while a transaction is unresolved
        broker.up = True
        await state.commit(force=True)
        assert state.problems() == []

    asyncio.run(main())
    assert broker.records == ["r0", "r1", "r2"]  # each once, whichever way the failed commit went
    assert sorted(stream.acked) == [0, 1, 2]
    assert state.committed_offsets == {("telemetry", 0): 3}
    assert state.transactions.restarts == 1  # type: ignore[attr-defined]


def test_a_redelivery_beyond_the_committed_snapshot_is_acknowledged_only_with_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    take(state, stream, 0, "r0")
    asyncio.run(state.commit(force=True))
    take(state, stream, 1, "r1")
    assert state.covered("telemetry", 0, 1) and not state.durable("telemetry", 0, 1)
    assert state.durable("telemetry", 0, 0)


def test_input_taken_while_a_snapshot_is_compressed_goes_with_the_next_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    compressing, taken = threading.Event(), threading.Event()
    during: list[bool] = []

    def slow(seq: int, state: bytes) -> list[bytes]:  # on a thread, as zstd releases the GIL
        compressing.set()
        during.append(taken.wait(2.0))  # the event loop goes on during the compression
        return [state]

    monkeypatch.setattr("streams.worker_state.compressed", slow)

    async def meanwhile() -> None:
        while not compressing.is_set():
            await asyncio.sleep(0.01)
        take(state, stream, 1, "r1")
        taken.set()

    async def main() -> None:
        take(state, stream, 0, "r0")
        await asyncio.gather(state.commit(force=True), meanwhile())
        assert during == [True] and broker.records == ["r0"]  # r1 came after the state was copied
        assert state.committed_offsets == {("telemetry", 0): 1} and stream.acked == [0] and state.dirty
        await state.commit(force=True)

    asyncio.run(main())
    assert broker.records == ["r0", "r1"] and broker.seq == 2 and sorted(stream.acked) == [0, 1]


def test_outputs_of_a_snapshot_whose_compression_failed_go_with_the_next_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)

    def failing(seq: int, state: bytes) -> list[bytes]:
        raise MemoryError

    async def main() -> None:
        take(state, stream, 0, "r0")
        monkeypatch.setattr("streams.worker_state.compressed", failing)
        with pytest.raises(MemoryError):
            await state.commit(force=True)
        assert broker.records == [] and stream.acked == [] and state.dirty
        take(state, stream, 1, "r1")
        monkeypatch.setattr("streams.worker_state.compressed", lambda seq, state: [state])
        await state.commit(force=True)

    asyncio.run(main())
    assert broker.records == ["r0", "r1"] and sorted(stream.acked) == [0, 1]


def test_a_fenced_producer_stops_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    broker, stream = Broker(fenced=True), Stream()
    state = task(broker, monkeypatch)
    take(state, stream, 0, "r0")
    with pytest.raises(ProducerFenced):
        asyncio.run(state.commit(force=True))
    assert stream.acked == [] and state.unresolved is None


class FlakyDecisions:
    """A decisions consumer whose first read fails."""

    def __init__(self) -> None:
        self.reads = 0
        self.seeks: list[int] = []

    async def getmany(self, timeout_ms: int) -> dict[Any, list[Any]]:
        self.reads += 1
        if self.reads == 1:
            raise KafkaConnectionError("connection lost")
        await asyncio.sleep(0.01)
        return {}

    def assignment(self) -> set[Any]:
        from aiokafka import TopicPartition

        return {TopicPartition("decisions", 0)}

    def seek(self, tp: Any, offset: int) -> None:
        self.seeks.append(offset)


def test_the_decision_reader_reports_a_failure_and_reads_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streams.worker_state.READER_BACKOFF_S", (0.2, 0.2))
    state = task(Broker(), monkeypatch)
    state.offsets[("decisions", 0)] = 7
    consumer = FlakyDecisions()
    state.decisions = consumer  # type: ignore[assignment]
    seen: list[list[str]] = []

    async def main() -> None:
        state.reader = asyncio.ensure_future(state._read_decisions())
        await asyncio.sleep(0.1)
        seen.append(state.problems())
        await asyncio.sleep(0.4)
        seen.append(state.problems())
        state.reader.cancel()

    asyncio.run(main())
    assert "decision reader failed" in seen[0][0] and "connection lost" in seen[0][0]
    assert seen[1] == [] and consumer.reads > 2  # reading again, from the task's offsets
    assert consumer.seeks == [7]


def test_a_task_taken_over_while_the_broker_was_away_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another instance committed the task's state meanwhile (a snapshot of the same sequence, not this
    one's): the task must not count it as its own."""
    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)

    async def main() -> None:
        take(state, stream, 0, "r0")
        await state.commit(force=True)
        broker.up = False
        take(state, stream, 1, "r1")
        with pytest.raises(TransactionFailed):
            await state.commit(force=True)
        broker.up, broker.seq, broker.digest = True, 2, b"another instance's snapshot"
        await state.commit(force=True)

    with pytest.raises(TaskTakenOver):
        asyncio.run(main())
    assert stream.acked == [0]  # nothing of the unresolved transaction acknowledged


def test_a_message_whose_processing_fails_is_dead_lettered_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from audit.records import SourcePosition

    state = task(Broker(), monkeypatch)

    def bug(*_: Any) -> Output:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(state, "handle", bug)
    out = state.process("decisions", b"{}", SourcePosition("decisions", 0, 3))
    assert [r.reason for dl in out.dead_letters for r in dl.rejects] == ["internal_error"]
    assert state.outputs == [out] and state.dirty


def test_a_snapshot_of_another_state_version_is_refused_in_one_line() -> None:
    """An upgraded worker must not restore an older engine's pickled state into objects it cannot use."""
    processor = build_processor(Settings())
    parts = Snapshot(3, processor, {("t", 0): 5}).encode()
    back = Snapshot.decode(3, {i: p[_HEADER.size :] for i, p in enumerate(parts)})
    assert back.offsets == {("t", 0): 5} and type(back.processor) is type(processor)
    old = zlib.compress(pickle.dumps((processor, {("t", 0): 5})))  # what a worker before STATE_VERSION wrote
    with pytest.raises(StateVersionError, match=f"state version 1, this driftlog reads version {STATE_VERSION}"):
        Snapshot.decode(3, {0: old})
    whole = zlib.compress(pickle.dumps((2, processor, {("t", 0): 5})))  # version 2: the processor, buffer and all
    with pytest.raises(StateVersionError, match=f"state version 2, this driftlog reads version {STATE_VERSION}"):
        Snapshot.decode(3, {0: whole})


def test_an_idle_task_writes_no_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Input caught up, nothing to emit: one transaction (its mark), then none however often the timer ticks."""
    broker = Broker()
    state = WorkerState(0, Processor(), FakeTransactions(broker), lambda t, p: 0, 0.0)  # type: ignore[arg-type]
    monkeypatch.setattr("streams.worker_state.Snapshot", Snap)
    monkeypatch.setattr("streams.worker_state.compressed", lambda seq, state: [state])
    state.configure({"t": "telemetry"}, [("t", 0)])

    async def ticks() -> list[int]:
        seqs = []
        for _ in range(5):
            state.tick()
            await state.commit(force=True)
            seqs.append(state.seq)
        return seqs

    assert asyncio.run(ticks()) == [1, 1, 1, 1, 1]


def test_a_snapshot_names_what_to_re_read_and_leaves_the_buffer_out() -> None:
    from audit.records import SourcePosition
    from streams.sim.scenarios import SCENARIOS

    items = [v for k, _, v in SCENARIOS["training-fabric"](1, 16, 30).run() if k == "telemetry"]
    processor = build_processor(Settings(allowed_lateness_s=2.0))
    processor.declare([SourcePosition("t", 0, 0)])
    half = len(items) // 2
    for offset, raw in enumerate(items[:half]):
        processor.telemetry(raw, SourcePosition("t", 0, offset))
    parts = Snapshot(1, processor, {("t", 0): half}).encode()
    back = Snapshot.decode(1, {i: p[_HEADER.size :] for i, p in enumerate(parts)})
    ((tp, (first, end)),) = back.ranges().items()
    assert tp == ("t", 0) and 0 < first < end == half
    assert not back.processor.timeline.pending(), "the buffer is re-read, not restored"
    for offset in range(first, end):
        back.processor.rebuffer(items[offset], SourcePosition("t", 0, offset))
    assert back.processor.timeline.pending() == processor.timeline.pending()


@pytest.mark.parametrize("behind", [False, True], ids=["keeping-up", "backlog"])
def test_records_of_a_task_that_keeps_up_are_committed_at_once_a_backlogs_with_the_timer(
    behind: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finding of a worker that keeps up with its input waits for no timer; a backlog is not committed
    (and snapshotted) per message that has records."""
    from types import SimpleNamespace

    from audit.records import AuditRecord, SourcePosition
    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.highwater = lambda t, p: 5 if behind else 1  # the telemetry partition's end: offset 0 is its last
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    finding = AuditRecord("finding", "f0", SourcePosition("telemetry", 0, 0), {"kind": "k"}, key="k")

    def process(*_: Any) -> Output:
        state.offsets[("telemetry", 0)] = 1
        state.dirty = True
        state.outputs.append(out := Output(audit=[finding]))
        return out

    monkeypatch.setattr(state, "process", process)
    lags: list[int | None] = []
    observe = lambda topic, partition, offset, high: lags.append(None if high is None else high - offset - 1)  # noqa: E731
    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=observe)
    event = fetched(0)
    asyncio.run(handle_event(state, ops, stream, event, "telemetry", "auto"))  # type: ignore[arg-type]
    assert broker.records == ([] if behind else [finding])
    assert stream.acked == ([] if behind else [0])


@pytest.mark.parametrize(("backlog", "too_soon"), [(BACKLOG_MESSAGES + 20, False), (BACKLOG_MESSAGES // 2, False),
                                                 (BACKLOG_MESSAGES + 1, False), (BACKLOG_MESSAGES, False),
                                                 (BACKLOG_MESSAGES + 20, True)],
                         ids=["backlog", "a-few-behind", "at-the-threshold", "one-short-of-it",
                              "backlog-ending-too-soon-after-a-snapshot"])  # fmt: skip
def test_a_task_commits_and_acknowledges_at_once_when_a_backlog_ends(
    backlog: int, too_soon: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task that drained a backlog of its own input (its first message ``BACKLOG_MESSAGES`` or more before
    the partition's end) commits as soon as it has caught up, though the drain took only ms (its input
    acknowledged and the offsets committed: the group's lag is 0 then, not after the next timers), or, too
    soon after its last snapshot (``SNAPSHOT_SHARE``), as soon as that allows; one that was only a few
    messages behind leaves its commit to the timer; nothing is committed while the backlog lasts (below
    ``COMMIT_EVERY_MESSAGES``)."""
    import time
    from types import SimpleNamespace

    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.highwater = lambda t, p: backlog  # the telemetry partition's end: the whole backlog is there
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())  # (no records: no commit for them)
    offsets_commits: list[int] = []

    async def commit() -> None:
        offsets_commits.append(len(stream.acked))

    app = SimpleNamespace(consumer=SimpleNamespace(commit=commit))
    ops = SimpleNamespace(app=app, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)

    async def drain() -> list[int]:
        seqs = []
        for offset in range(backlog):
            event = fetched(offset)
            await handle_event(state, ops, stream, event, "telemetry", "auto")  # type: ignore[arg-type]
            seqs.append(state.seq)
        return seqs

    async def drain_and_wait() -> list[int]:
        if too_soon:  # a snapshot just now held the loop 0.2 s: the next one not before 1 s after it
            state.committed_at, state.encode_s = time.monotonic(), 0.2
        seqs = await drain()
        if too_soon:
            assert state.seq == 0 and state.deferred is not None, "not yet: too soon"
            await asyncio.sleep(max(0.0, state.allowed_in()) + 0.3)
            seqs[-1] = state.seq
        return seqs

    seqs = asyncio.run(drain_and_wait())
    if backlog - 1 >= BACKLOG_MESSAGES:  # (messages after the first one)
        assert seqs == [0] * (backlog - 1) + [1], "one commit, when the last message of the backlog is in"
        assert stream.acked == list(range(backlog)) and offsets_commits == [backlog]
        assert state.early, "the timer's next round leaves the task out"
    else:
        assert seqs == [0] * backlog and stream.acked == [] and offsets_commits == []
        assert not state.early


@pytest.mark.parametrize("fetch", [BACKLOG_MESSAGES // 2, BACKLOG_MESSAGES + 50, 10 * BACKLOG_MESSAGES])
@pytest.mark.parametrize("steps_a_round", [1, 2, 5])
@pytest.mark.parametrize("mid_step", [False, True], ids=["rounds-between-steps", "rounds-mid-step"])
def test_a_task_keeping_up_with_large_fetches_commits_no_more_often_than_the_timer(
    fetch: int, steps_a_round: int, mid_step: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A steady input of steps of many messages (one per rank), each step there at once (the high watermark
    at its end) and read in several fetches, puts a task ``BACKLOG_MESSAGES`` behind at a step's first
    message, and each step is drained in ms. Its end commits at once only in place of the timer's next round:
    no more snapshots or offset commits than the timer's rounds (and ``COMMIT_EVERY_MESSAGES``) make, but for
    the first step's, before the first round; at a step a round or several, the round between two steps or
    in the middle of one (they would take the share of the loop snapshots may have, back to back)."""
    from types import SimpleNamespace

    from streams import worker_state
    from streams.worker import COMMIT_EVERY_MESSAGES, commit_round, handle_event

    clock = [0.0]  # the task's clock: each message takes 10 µs, however loaded the machine running the test
    monkeypatch.setattr(worker_state, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    end = [0]
    state.highwater = lambda t, p: end[0]
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    state.ready.set()
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    offsets_commits: list[int] = []

    async def commit() -> None:
        offsets_commits.append(len(stream.acked))

    app = SimpleNamespace(consumer=SimpleNamespace(commit=commit))
    ops = SimpleNamespace(app=app, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)
    steps, rounds = 10 * steps_a_round, 10
    at_ends: list[int] = []  # the commits made by each step's last fetch

    async def steady() -> None:
        offset = 0
        for step in range(1, steps + 1):
            end[0] += fetch
            while offset < end[0]:
                seq = state.seq
                event = fetched(*range(offset, min(offset + 40, end[0])))  # (fetches of 40 messages)
                await handle_event(state, ops, stream, event, "telemetry", "auto")  # type: ignore[arg-type]
                offset = event.message.offset + 1
                clock[0] += 1e-5 * len(event.message.messages)
                if offset == end[0]:
                    at_ends.append(state.seq - seq)
                elif mid_step and step % steps_a_round == 0 and offset == end[0] - fetch + 40:
                    await commit_round(app, ops, [state], 2.0)  # type: ignore[arg-type]
            clock[0] += 0.01
            await asyncio.sleep(0)
            if not mid_step and step % steps_a_round == 0:
                await commit_round(app, ops, [state], 2.0)  # type: ignore[arg-type]

    asyncio.run(steady())
    forced = steps * fetch // COMMIT_EVERY_MESSAGES
    assert state.seq <= 1 + rounds + forced and len(offsets_commits) <= 1 + rounds
    assert state.deferred is None
    # (the first step's end commits as the timer's round would, but at once: the group's lag is 0 then)
    assert at_ends[0] == (1 if fetch > BACKLOG_MESSAGES else 0)


def test_a_stopped_task_commits_and_defers_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message handler that waited on a task's lock while the task was stopped (its partition moved away)
    neither commits through the stopped producer nor leaves a deferred commit behind: the next owner resumes
    from the last snapshot."""
    import time
    from types import SimpleNamespace

    from streams.worker import end_of_backlog

    broker = Broker()
    state = task(broker, monkeypatch)
    ops = SimpleNamespace(app=SimpleNamespace(), status=SimpleNamespace(committed=lambda: None))

    async def run() -> tuple[int, bool]:
        async def nothing() -> None:
            return None

        state.transactions.stop = nothing  # type: ignore[method-assign]
        await state.stop()
        state.outputs.append(Output(audit=[b"x"]))  # type: ignore[list-item]
        state.dirty = True
        state.committed_at, state.encode_s = time.monotonic(), 0.1  # too soon: would be deferred
        await end_of_backlog(ops, state)  # type: ignore[arg-type]
        return await state.commit(force=True), state.deferred is not None

    assert asyncio.run(run()) == (0, False)
    assert broker.records == []


def test_a_backlog_lasts_across_the_commits_made_while_it_is_drained(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commits made during a backlog (every ``COMMIT_EVERY_MESSAGES``, the timer's) do not end it: the task
    is in a backlog from its first message that far behind until it has caught up."""
    from audit.records import SourcePosition

    broker = Broker()
    state = task(broker, monkeypatch)
    state.highwater = lambda t, p: 10 * BACKLOG_MESSAGES
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    state.handle("telemetry", b"", SourcePosition("telemetry", 0, 0))
    assert state.behind
    asyncio.run(state.commit(force=True))
    state.highwater = lambda t, p: 3  # (no longer that far behind, but not caught up)
    state.handle("telemetry", b"", SourcePosition("telemetry", 0, 1))
    assert state.behind and not state.backlog_ended()


def test_a_message_asks_each_channels_high_watermark_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each message asks every channel's high watermark once, the first one too: that one answer says which
    channels are caught up (for its processor), whether the task is behind (a backlog) and the lag gauge's
    value (the message's partition's high watermark minus the next offset)."""
    from collections import Counter
    from types import SimpleNamespace

    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    asked: Counter[tuple[str, int]] = Counter()

    def highwater(topic: str, partition: int) -> int:
        asked[(topic, partition)] += 1
        return 10 * BACKLOG_MESSAGES if topic == "telemetry" else 0

    state.highwater = highwater
    inputs = {"telemetry": "telemetry", "decisions": "decisions"}
    state.configure(inputs, [("telemetry", 0)] + [("decisions", p) for p in range(4)])
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    lags: list[int | None] = []
    observe = lambda topic, partition, offset, high: lags.append(None if high is None else high - offset - 1)  # noqa: E731
    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=observe)

    async def drain(offsets: range) -> None:
        for offset in offsets:
            event = fetched(offset)
            await handle_event(state, ops, stream, event, "telemetry", "auto")  # type: ignore[arg-type]

    asyncio.run(drain(range(1)))  # (the first message also asks whether the task is behind: the backlog starts)
    assert state.behind
    assert asked == dict.fromkeys([("telemetry", 0)] + [("decisions", p) for p in range(4)], 1)
    asyncio.run(drain(range(1, 4)))
    assert asked == dict.fromkeys([("telemetry", 0)] + [("decisions", p) for p in range(4)], 4)
    assert lags == [10 * BACKLOG_MESSAGES - offset - 1 for offset in range(4)]


def test_a_fetch_is_acknowledged_after_the_transaction_covering_its_last_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A commit made in the middle of a fetch's messages (a finding of a task that keeps up) covers only those
    before it: the fetch, one event for Faust, is acknowledged by the next commit, which covers its last."""
    from types import SimpleNamespace

    from audit.records import AuditRecord, SourcePosition
    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.highwater = lambda t, p: state.offsets.get((t, p), 0)  # each message the last one yet: keeping up
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    finding = AuditRecord("finding", "f1", SourcePosition("telemetry", 0, 1), {"kind": "k"}, key="k")

    def process(kind: str, value: bytes, position: SourcePosition, *_: Any) -> Output:
        state.offsets[("telemetry", 0)] = position.offset + 1
        state.dirty = True
        state.outputs.append(out := Output(audit=[finding] if position.offset == 1 else []))
        return out

    monkeypatch.setattr(state, "process", process)
    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)

    async def run() -> tuple[list[int], list[int]]:
        await handle_event(state, ops, stream, fetched(0, 1, 2), "telemetry", "auto")  # type: ignore[arg-type]
        before = list(stream.acked)
        await state.commit(force=True)
        return before, stream.acked

    assert asyncio.run(run()) == ([], [2])
    assert broker.records == [finding] and state.seq == 2


@pytest.mark.parametrize("durable", [False, True], ids=["not-covered", "covered-by-a-snapshot"])
def test_a_fetch_whose_task_stops_is_acknowledged_only_if_a_snapshot_covers_it(
    durable: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task stopped (its partition moved away) in the middle of a fetch processes none of the rest; the
    fetch is acknowledged if a committed snapshot covers its last message, else Faust is told to wait for it
    no longer (its offsets stay uncommitted: the next owner resumes from the snapshot)."""
    from types import SimpleNamespace

    from audit.records import SourcePosition
    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    state.committed_offsets = {("telemetry", 0): 3 if durable else 0}
    processed: list[int] = []

    def process(kind: str, value: bytes, position: SourcePosition, *_: Any) -> Output:
        processed.append(position.offset)
        state.stopped = True  # (the rebalance stops the task while this message is handled)
        return Output()

    monkeypatch.setattr(state, "process", process)
    forgotten: list[int] = []
    consumer = SimpleNamespace(_unacked_messages=SimpleNamespace(discard=lambda m: forgotten.append(m.offset)))
    ops = SimpleNamespace(app=SimpleNamespace(consumer=consumer), observe=lambda *_: None)
    asyncio.run(handle_event(state, ops, stream, fetched(0, 1, 2), "telemetry", "auto"))  # type: ignore[arg-type]
    assert processed == [0]
    assert (stream.acked, forgotten) == (([2], []) if durable else ([], [2]))


def test_a_failure_after_a_message_is_processed_leaves_the_rest_of_its_fetch_processed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """What follows a message's processing (metrics, the commit decision) failing on messages of a fetch
    costs nothing of the fetch: every message is processed, and the fetch acknowledged with the transaction
    covering its last; the failure is logged once (a lasting bug would log each message) and counted."""
    from types import SimpleNamespace

    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    processed = processing(state, monkeypatch)

    def observe(topic: str, partition: int, offset: int, high: int | None) -> None:
        if offset >= 1:
            raise RuntimeError("a bug in the metrics")

    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=observe)

    async def run() -> list[int]:
        await handle_event(state, ops, stream, fetched(0, 1, 2), "telemetry", "auto")  # type: ignore[arg-type]
        before = list(stream.acked)
        await state.commit(force=True)
        return before

    assert asyncio.run(run()) == []
    assert processed == [0, 1, 2] and stream.acked == [2] and not state.stopped
    logged = [r for r in caplog.records if r.exc_info is not None]
    assert state.after_failures == 2 and len(logged) == 1


def test_a_message_that_cannot_be_handled_stops_the_worker_and_its_task_commits_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A failure before a message is processed (a bug outside the processor, which dead-letters): the rest
    of its fetch is not skipped silently, as an agent that raised would have it; its task commits no
    snapshot past the message (it stops), its fetch is not acknowledged, and the worker stops (a restart
    resumes from the last snapshot)."""
    from types import SimpleNamespace

    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    processed = processing(state, monkeypatch)

    def covered(topic: str, partition: int, offset: int) -> bool:
        if offset == 1:
            raise RuntimeError("a bug before processing")
        return False

    monkeypatch.setattr(state, "covered", covered)
    crashed: list[str] = []
    failed: list[str] = []
    forgotten: list[int] = []

    async def crash(exc: BaseException) -> None:
        crashed.append(str(exc))

    consumer = SimpleNamespace(_unacked_messages=SimpleNamespace(discard=lambda m: forgotten.append(m.offset)))
    status = SimpleNamespace(committed=lambda: None, fail=lambda exc: failed.append(str(exc)))
    ops = SimpleNamespace(app=SimpleNamespace(consumer=consumer, crash=crash), status=status, observe=lambda *_: None)

    async def run() -> int:
        await handle_event(state, ops, stream, fetched(0, 1, 2), "telemetry", "auto")  # type: ignore[arg-type]
        await handle_event(state, ops, stream, fetched(3, 4), "telemetry", "auto")  # type: ignore[arg-type]
        return await state.commit(force=True)

    # (the task's next fetch, before the crash lands: not processed, not acknowledged)
    assert asyncio.run(run()) == 0 and broker.seq is None
    assert processed == [0] and stream.acked == [] and forgotten == [2, 4]
    assert crashed == failed == ["a bug before processing"]


def test_a_backlog_that_ends_in_the_middle_of_a_fetch_is_committed_with_the_fetchs_acknowledgement(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A backlog's end is committed, and the input offsets with it (the group's lag 0 at once), once the
    fetch's last message is in: a commit at an earlier message could not acknowledge the fetch, and the
    offsets committed then would stay behind until the next timer."""
    from types import SimpleNamespace

    from streams.worker import handle_event

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.highwater = lambda t, p: state.offsets.get((t, p), 0)  # each message the last one yet: caught up
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    state.behind = True  # (a backlog was being drained)
    offsets_commits: list[list[int]] = []

    async def commit() -> None:
        offsets_commits.append(list(stream.acked))

    app = SimpleNamespace(consumer=SimpleNamespace(commit=commit))
    ops = SimpleNamespace(app=app, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)
    asyncio.run(handle_event(state, ops, stream, fetched(0, 1, 2), "telemetry", "auto"))  # type: ignore[arg-type]
    assert (state.seq, stream.acked, offsets_commits) == (1, [2], [[2]])


def processing(state: WorkerState, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The task reads its telemetry partition; its processor only moves past each message, whose offset goes
    to the list returned."""
    from audit.records import SourcePosition

    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    processed: list[int] = []

    def process(kind: str, value: bytes, position: SourcePosition, *_: Any) -> Output:
        processed.append(position.offset)
        state.offsets[("telemetry", 0)] = position.offset + 1
        state.dirty = True
        return Output()

    monkeypatch.setattr(state, "process", process)
    return processed


def test_a_fetch_whose_acknowledgement_fails_stops_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A re-delivered fetch that a snapshot covers is acknowledged at once: if that fails (a bug), the worker
    stops all the same (the acknowledgement is not tried again in a way that would hide why)."""
    from types import SimpleNamespace

    from streams.worker import handle_event

    class Failing(Stream):
        async def ack(self, event: Event) -> None:
            raise RuntimeError("a bug in acknowledging")

    state = task(Broker(), monkeypatch)
    processed = processing(state, monkeypatch)
    state.offsets[("telemetry", 0)] = state.committed_offsets[("telemetry", 0)] = 1  # (offset 0 covered, durable)
    crashed: list[str] = []

    async def crash(exc: BaseException) -> None:
        crashed.append(str(exc))

    status = SimpleNamespace(fail=lambda exc: None)
    ops = SimpleNamespace(app=SimpleNamespace(crash=crash), status=status)
    asyncio.run(handle_event(state, ops, Failing(), fetched(0), "telemetry", "auto"))  # type: ignore[arg-type]
    assert processed == [] and crashed == ["a bug in acknowledging"] and state.stopped


def test_only_the_tasks_own_input_starts_a_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decision partition far behind (read in full by the task's own reader, moved by the other tasks'
    commits) is no backlog of the task; its telemetry partition as far behind is."""
    from audit.records import SourcePosition

    state = task(Broker(), monkeypatch)
    state.highwater = lambda t, p: 10 * BACKLOG_MESSAGES
    state.configure({"telemetry": "telemetry", "decisions": "decisions"}, [("telemetry", 0), ("decisions", 0)])
    monkeypatch.setattr(state.processor, "decision", lambda *_: Output())
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    state.handle("decisions", b"", SourcePosition("decisions", 0, 0))
    assert not state.behind
    state.handle("telemetry", b"", SourcePosition("telemetry", 0, 0))
    assert state.behind


def test_a_commit_at_a_backlogs_end_takes_the_place_of_the_timers_next_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a commit at a backlog's end, the timer's next round leaves the task out, and only that one. A
    backlog that ends before that round is committed by it (not one round later), and that commit takes the
    next round's place in turn. The round commits anyway if its tick has records (they wait no longer than
    without the early commit) or a failed transaction waits to be retried."""
    from audit.records import AuditRecord, SourcePosition

    state = task(Broker(), monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    state.offsets[("telemetry", 0)] = 5
    state.highwater = lambda t, p: 5  # (caught up)

    def backlog_ends() -> bool:
        state.behind = True
        return state.backlog_ended()

    def commit_at_once() -> None:  # (as the driver does when backlog_ended() says so)
        state.early = True

    assert backlog_ends()
    commit_at_once()
    assert [state.timer_due(None), state.timer_due(None)] == [False, True]
    assert backlog_ends()
    commit_at_once()
    assert not backlog_ends() and not backlog_ends(), "left to the round"
    assert [state.timer_due(None), state.timer_due(None), state.timer_due(None)] == [True, False, True]
    record = AuditRecord("finding", "f0", SourcePosition("telemetry", 0, 0), {"kind": "k"}, key="k")
    state.early = True
    assert state.timer_due(Output(audit=[record])) and not state.early
    state.early = True
    state.unresolved = object()  # type: ignore[assignment]
    assert state.timer_due(Output()) and not state.early


def test_a_round_that_could_not_commit_leaves_the_next_round_its_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round that commits a backlog ended after an early commit takes the next round's place; but if its
    commit was refused (too soon after the last snapshot, ``SNAPSHOT_SHARE``), the next round commits."""
    import time
    from types import SimpleNamespace

    from streams.worker import commit_round

    broker, stream = Broker(), Stream()
    state = task(broker, monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    state.ready.set()
    monkeypatch.setattr(state, "tick", lambda: None)
    take(state, stream, 0, "r0")
    state.dirty = True
    state.early, state.left_to_round = True, True  # (an early commit, then a backlog that ended before the round)
    state.committed_at, state.encode_s = time.monotonic(), 60.0  # (a snapshot held the loop: the next one waits)
    ops = SimpleNamespace(status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)

    async def round_() -> None:
        await commit_round(SimpleNamespace(), ops, [state], 2.0)  # type: ignore[arg-type]

    asyncio.run(round_())
    assert state.seq == 0 and not state.early, "refused: the next round is the task's"
    state.encode_s = 0.0
    asyncio.run(round_())
    assert state.seq == 1 and broker.records == ["r0"]


def test_a_processed_message_sets_the_workers_last_message_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """``driftlog_last_message_timestamp_seconds``: when the worker last processed a message of its own input
    (a benchmark reads it to tell when a drain's work ended, without polling a worker that may answer late)."""
    import time
    from types import SimpleNamespace

    from audit.records import SourcePosition
    from streams import ops as metrics
    from streams.worker import handle_event

    state = task(Broker(), monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])

    processed_at: list[float] = []

    def process(kind: str, value: bytes, position: SourcePosition, *_: Any) -> Output:
        state.offsets[("telemetry", 0)] = position.offset + 1
        processed_at.append(time.time())
        return Output()

    monkeypatch.setattr(state, "process", process)
    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)
    metrics.LAST_MESSAGE.set(0)
    asyncio.run(handle_event(state, ops, Stream(), fetched(0, 1), "telemetry", "auto"))  # type: ignore[arg-type]
    assert processed_at and processed_at[-1] <= metrics.LAST_MESSAGE._value.get() <= time.time()  # (after it)


def test_a_redelivered_message_a_snapshot_covers_leaves_the_last_message_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A message read again after a restart that the restored state already covers is skipped, not processed:
    the gauge stays as it was."""
    from types import SimpleNamespace

    from streams import ops as metrics
    from streams.worker import handle_event

    state = task(Broker(), monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    monkeypatch.setattr(state, "covered", lambda *_: True)
    monkeypatch.setattr(state, "process", lambda *_: pytest.fail("a covered message was processed"))
    ops = SimpleNamespace(app=None, status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)
    metrics.LAST_MESSAGE.set(0)
    asyncio.run(handle_event(state, ops, Stream(), fetched(0, 1), "telemetry", "auto"))  # type: ignore[arg-type]
    assert metrics.LAST_MESSAGE._value.get() == 0


def test_a_round_that_ends_the_input_tells_how_long_the_worker_waited_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``driftlog_input_end_wait_seconds``: from the worker's last input message (here 3 s before the round) to
    the round whose idle flush ended its input, less what the rounds in between worked (1 s here), and
    ``driftlog_input_end_timestamp_seconds`` when that round began (a benchmark leaves the wait out of an
    end-to-end time)."""
    import time
    from types import SimpleNamespace

    from streams import ops as metrics
    from streams.worker import commit_round

    state = task(Broker(), monkeypatch)
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    state.ready.set()
    state.input_at = time.monotonic() - 3.0

    def flush() -> Output:
        state.flushed = True
        time.sleep(0.05)  # (the flush's work: driftlog_input_end_round_seconds)
        return Output()

    monkeypatch.setattr(state, "tick", flush)
    state.worked = [(state.input_at + 0.5, 1.0)]  # a tick or a commit since that input worked 1 s
    ops = SimpleNamespace(status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)
    before = time.time()
    asyncio.run(commit_round(SimpleNamespace(), ops, [state], 0.5))  # type: ignore[arg-type]
    assert 2.0 <= metrics.INPUT_END_WAIT._value.get() < 2.5
    assert 0.05 <= metrics.INPUT_END_ROUND._value.get() < 0.5
    other = task(Broker(), monkeypatch)  # another task, whose commit worked before the worker's last input
    other.input_at, other.worked = state.input_at - 10.0, [(state.input_at - 5.0, 5.0)]
    state.flushed, state.worked = False, []
    asyncio.run(commit_round(SimpleNamespace(), ops, [state, other], 0.5))  # type: ignore[arg-type]
    assert 3.0 <= metrics.INPUT_END_WAIT._value.get() < 3.5
    assert before <= metrics.INPUT_END._value.get() <= time.time()


def test_the_commit_at_a_backlogs_end_is_work_not_part_of_the_idle_flushs_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After the last input message the backlog's end is committed at once (outside the timer's rounds): its
    snapshot's copy (0.5 s here) is work the wait leaves out (review of session 20: it was counted as wait)."""
    import time
    from types import SimpleNamespace

    from streams import ops as metrics
    from streams.worker import commit_round, handle_event
    from streams.worker_state import BACKLOG_MESSAGES

    class SlowSnap(Snap):
        def pickled(self) -> bytes:
            time.sleep(0.5)
            return super().pickled()

    monkeypatch.setattr("streams.worker_state.Snapshot", SlowSnap)
    monkeypatch.setattr("streams.worker_state.compressed", lambda seq, state: [state])
    backlog = BACKLOG_MESSAGES + 10
    state = WorkerState(0, Processor(), FakeTransactions(Broker()), lambda t, p: backlog, 0.2)  # type: ignore[arg-type]
    state.configure({"telemetry": "telemetry"}, [("telemetry", 0)])
    monkeypatch.setattr(state.processor, "telemetry", lambda *_: Output())
    state.ready.set()

    async def nothing() -> None:
        pass

    ops = SimpleNamespace(app=SimpleNamespace(consumer=SimpleNamespace(commit=nothing)),
                          status=SimpleNamespace(committed=lambda: None), observe=lambda *_: None)  # fmt: skip

    async def run() -> None:
        for offset in range(backlog):
            await handle_event(state, ops, Stream(), fetched(offset), "telemetry", "auto")  # type: ignore[arg-type]
        assert state.seq == 1  # (the backlog's end committed at once)
        while not state.flushed:
            await asyncio.sleep(0.05)
            await commit_round(ops.app, ops, [state], 0.05)  # type: ignore[arg-type]

    asyncio.run(run())
    assert 0.2 <= metrics.INPUT_END_WAIT._value.get() < 0.45
