"""Read the checkpoints topic back (every partition, from the beginning to its end now): the copy of the
signed checkpoint history that lives outside the sink's host."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from streams.errors import StoreError
from streams.kafka.admin import partitions

READ_TIMEOUT_S = 30.0


async def _read(bootstrap: str, topic: str) -> list[bytes]:
    found = await partitions(bootstrap, [topic])
    if not found:
        raise StoreError(f"topic {topic} does not exist")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign(found)
        starts, ends = await consumer.beginning_offsets(found), await consumer.end_offsets(found)
        for tp in found:
            consumer.seek(tp, starts[tp])
        values: list[tuple[int, int, bytes]] = []
        remaining: set[TopicPartition] = {tp for tp in found if ends[tp] > starts[tp]}
        while remaining:
            for tp, msgs in (await consumer.getmany(timeout_ms=1000)).items():
                values += [(tp.partition, m.offset, m.value or b"") for m in msgs if m.offset < ends[tp]]
                if msgs and msgs[-1].offset + 1 >= ends[tp]:
                    remaining.discard(tp)
        return [v for _, _, v in sorted(values)]
    finally:
        await consumer.stop()


def read_topic(bootstrap: str, topic: str, timeout_s: float = READ_TIMEOUT_S) -> list[bytes]:
    """The topic's values; :class:`StoreError` when the cluster or the topic cannot be read."""
    if not bootstrap:
        raise StoreError("no Kafka configured (KAFKA_BOOTSTRAP_SERVERS)")
    try:
        return asyncio.run(asyncio.wait_for(_read(bootstrap, topic), timeout_s))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StoreError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc
