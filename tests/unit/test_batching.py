"""A partition's records of one fetch reach the worker's agent as one :class:`Batch` (streams/kafka/batching.py):
acknowledging the batch acknowledges each of its messages to Faust's consumer, whose committed offset then
moves past the batch as it did when each message was an event of its own."""

from __future__ import annotations

import asyncio

from faust.types import TP, ConsumerMessage

from streams.config import Settings
from streams.kafka.batching import Batch
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


def test_a_batch_is_its_last_message_for_faust() -> None:
    tp = TP("telemetry", 2)
    batch = Batch(tp, [_message(tp, o) for o in (10, 11, 12)])
    assert (batch.tp, batch.offset, batch.acked, batch.refcount) == (tp, 12, False, 0)
    assert [m.offset for m in batch.messages] == [10, 11, 12]
