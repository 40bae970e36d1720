"""A partition's records of one fetch reach the worker's agent as one :class:`Batch` (streams/kafka/batching.py):
acknowledging the batch acknowledges each of its messages to Faust's consumer, whose committed offset then
moves past the batch as it did when each message was an event of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.transport.consumer import Consumer as FaustConsumer
from faust.types import TP, ConsumerMessage

from streams.config import Settings
from streams.kafka.batching import Batch, BatchingConsumer, forget
from streams.worker import build_app


def _message(tp: TP, offset: int) -> ConsumerMessage:
    return ConsumerMessage(tp.topic, tp.partition, offset, 0.0, 0, None, None, b"x", None, tp=tp)


def test_acknowledging_a_batch_acknowledges_each_of_its_messages(tmp_path: object) -> None:
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", home=tmp_path)  # (nothing connects)
    app, _ = build_app(settings)
    tp = TP(settings.telemetry_topic, 0)

    async def ack() -> tuple[bool, list[bool], int | None, int]:
        consumer = app.consumer
        app.topics._acking_topics.add(tp.topic)  # (as when the agent's stream subscribes)
        batch = Batch(tp, [_message(tp, o) for o in (3, 4, 5, 6)])
        batch.incref()  # (the conductor's reference: one channel)
        consumer._unacked_messages.add(batch)  # (the stream tracks it as it does any message)
        done = batch.ack(consumer)
        return done, [m.acked for m in batch.messages], consumer._new_offset(tp), len(consumer._unacked_messages)

    assert asyncio.run(ack()) == (True, [True] * 4, 7, 0)


def test_a_batch_forgotten_is_waited_for_no_longer_and_acknowledges_nothing(tmp_path: object) -> None:
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", home=tmp_path)  # (nothing connects)
    app, _ = build_app(settings)
    tp = TP(settings.telemetry_topic, 0)
    consumer = app.consumer
    app.topics._acking_topics.add(tp.topic)
    batch = Batch(tp, [_message(tp, o) for o in (3, 4)])
    consumer._unacked_messages.add(batch)
    forget(consumer, batch)
    assert (len(consumer._unacked_messages), consumer._new_offset(tp)) == (0, None)
    assert [m.acked for m in [batch, *batch.messages]] == [False] * 3


def test_a_batch_is_its_last_message_for_faust() -> None:
    tp = TP("telemetry", 2)
    batch = Batch(tp, [_message(tp, o) for o in (10, 11, 12)])
    assert (batch.tp, batch.offset, batch.acked, batch.refcount) == (tp, 12, False, 0)
    assert [m.offset for m in batch.messages] == [10, 11, 12]


TP0, TP1 = TP("telemetry", 0), TP("telemetry", 1)
ONE_FETCH = [(TP0, 5), (TP1, 3), (TP0, 6)]  # (Faust's getmany goes round the partitions)


class Fetches:
    """Stands in for Faust's ``getmany``: each call yields one fetch's ``(tp, offset)``s as Faust's does (a
    message carries the generation of the group at the time), after ``before`` (the consumer) ran; once the
    fetches are spent, the fetcher stops (the drain loop ends)."""

    def __init__(self, consumer: Any, fetches: list[tuple[Callable[[Any], None], list[tuple[TP, int]]]]) -> None:
        self.consumer, self.fetches = consumer, list(fetches)
        self.fetcher = SimpleNamespace(_stopped=asyncio.Event())

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, ConsumerMessage]]:
        before, fetch = self.fetches.pop(0)
        before(self.consumer)
        for tp, offset in fetch:
            message = _message(tp, offset)
            message.generation_id = self.consumer.app.consumer_generation_id
            yield tp, message
        if not self.fetches:
            self.fetcher._stopped.set()


def _nothing(*_: Any) -> None:
    return None


def _drained(
    tmp_path: object,
    fetches: list[tuple[Callable[[Any], None], list[tuple[TP, int]]]],
    delivered: Callable[[Any, Any], None] = _nothing,
    faust_own: bool = False,
) -> tuple[Any, list[tuple[int, list[int]]], list[int]]:
    """Run the worker's consumer's drain loop (or ``faust_own``: Faust's, a callback per message) over
    ``fetches``; ``delivered(consumer, event)`` runs as the conductor takes each event. Returns the consumer,
    the partition and offsets of each event delivered and, per commit of the acknowledged offsets, the events delivered
    before it."""
    events: list[tuple[int, list[int]]] = []
    commits: list[int] = []

    async def drain() -> Any:
        settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", home=tmp_path)  # (nothing connects)
        consumer = build_app(settings)[0].consumer  # (in the running loop: its waits are scheduled there)
        consumer.app.topics._acking_topics.add(TP0.topic)  # (gaps are kept for the topics acknowledged)

        async def callback(event: ConsumerMessage) -> None:
            offsets = [m.offset for m in event.messages] if isinstance(event, Batch) else [event.offset]
            events.append((event.partition, offsets))
            delivered(consumer, event)

        async def commit() -> bool:
            commits.append(len(events))
            return True

        script = Fetches(consumer, fetches)
        consumer.getmany, consumer.callback, consumer.commit = script.getmany, callback, commit
        loop = FaustConsumer._drain_messages if faust_own else BatchingConsumer._drain_messages
        await loop(consumer, script.fetcher)
        return consumer

    return asyncio.run(drain()), events, commits


def _stop_flow(consumer: Any, event: Any) -> None:
    consumer.stop_flow()  # (a rebalance begins: Faust's on_partitions_revoked)


def _new_generation(consumer: Any, event: Any = None) -> None:
    consumer.app.consumer_generation_id += 1  # (the group rebalanced)


@pytest.mark.parametrize("rebalance", [_stop_flow, _new_generation], ids=["flow-stopped", "new-generation"])
def test_a_fetch_is_delivered_no_further_once_a_rebalance_begins(
    rebalance: Callable[[Any, Any], None], tmp_path: object
) -> None:
    """As Faust's getmany stops at a stopped flow or a new generation, so does the delivery of a fetch's
    partitions; the read offset of a partition not delivered stays (a rebalance seeks it to the committed
    offset: the batch is fetched again)."""
    consumer, events, _ = _drained(tmp_path, [(_nothing, ONE_FETCH)], rebalance)
    assert events == [(0, [5, 6])]
    assert (consumer._read_offset[TP0], consumer._read_offset[TP1]) == (6, None)


def test_a_fetch_made_after_a_rebalance_is_delivered(tmp_path: object) -> None:
    """getmany takes the generation once it has its records (it waits for a stopped flow to resume, after the
    rebalance's seek): a fetch made then, in the new generation, is delivered; dropped, its records would be
    skipped, since the consumer's position is past them."""
    _, events, _ = _drained(tmp_path, [(_new_generation, ONE_FETCH)])
    assert events == [(0, [5, 6]), (1, [3])]


def _seek_to_5(consumer: Any) -> None:
    consumer._read_offset[TP0] = 5  # (as a rebalance's seek to the committed offsets sets it)


TWO_FETCHES = [(_nothing, [(TP0, 5), (TP1, 3), (TP0, 6), (TP0, 9)]), (_seek_to_5, [(TP0, 4), (TP1, 7), (TP0, 5)])]


def test_the_copied_drain_loop_is_faust_0_15_3s() -> None:
    """streams/kafka/batching.py copies Faust's private drain loop and uses its private attributes: another
    Faust must be compared with it (and this test's figures) before it is used."""
    assert faust.__version__ == "0.15.3"


def test_a_fetch_is_delivered_per_partition_with_fausts_bookkeeping(tmp_path: object) -> None:
    """Each partition's records of a fetch are one event, in offset order; a record below the read offset
    (fetched again after a seek) is dropped; the holes between records (of read_committed input) are gaps;
    the read offsets end at each partition's last record: as Faust's own loop, an event per record, leaves
    them."""
    consumer, events, _ = _drained(tmp_path, TWO_FETCHES)
    assert events == [(0, [5, 6, 9]), (1, [3]), (1, [7]), (0, [5])]
    faust_own, per_message, _ = _drained(tmp_path, TWO_FETCHES, faust_own=True)
    for p in (0, 1):
        assert [o for q, e in events if q == p for o in e] == [o for q, e in per_message if q == p for o in e]
    gaps = {tp: sorted((i.begin, i.end) for i in consumer._gap[tp]) for tp in (TP0, TP1)}
    assert gaps == {TP0: [(7, 10)], TP1: [(4, 8)]}  # (Faust's intervals: 7 up to 9 included, 4 up to 7)
    assert gaps == {tp: sorted((i.begin, i.end) for i in faust_own._gap[tp]) for tp in (TP0, TP1)}
    assert dict(consumer._read_offset) == dict(faust_own._read_offset) == {TP0: 5, TP1: 7}


def test_the_acknowledged_offsets_are_committed_every_commit_every_before_a_fetchs_next_partition(
    tmp_path: object,
) -> None:
    """Faust's ``broker_commit_every``: once that many messages were acknowledged, the offsets are committed
    before the next event (checked per partition of a fetch, not per message)."""

    def ack(consumer: Any, event: Batch) -> None:
        consumer._commit_every = 2
        consumer._n_acked += len(event.messages)  # (the agent acknowledged the event at once)

    consumer, events, commits = _drained(tmp_path, TWO_FETCHES, ack)
    assert [len(offsets) for _, offsets in events] == [3, 1, 1, 1]
    assert commits == [1, 3] and consumer._n_acked == 1
