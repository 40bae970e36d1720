"""Small Kafka administration helpers on aiokafka: topics, a real round-trip probe, consumer lag."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, UnknownTopicOrPartitionError, for_code

from streams.errors import BrokerError
from streams.kafka.limits import TOPIC_CONFIG


async def ensure_topics(bootstrap: str, names: Iterable[str], partitions: int) -> None:
    """Create the topics that do not exist yet (the broker is expected to refuse auto-creation), each taking
    messages up to :data:`~streams.kafka.limits.TOPIC_MAX_BYTES` (dead letters of what the contract admits)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        wanted = [
            NewTopic(n, partitions, 1, topic_configs=TOPIC_CONFIG) for n in dict.fromkeys(names) if n not in existing
        ]
        if wanted:
            with contextlib.suppress(TopicAlreadyExistsError):  # created concurrently: what we wanted
                await admin.create_topics(wanted)
        await _wait_for_metadata(admin, [t.name for t in wanted])
    finally:
        await admin.close()


async def _wait_for_metadata(admin: AIOKafkaAdminClient, names: list[str], timeout: float = 15.0) -> None:
    """Wait until every topic reports leaders for its partitions (creation is asynchronous)."""
    deadline = time.monotonic() + timeout
    while names:
        described = await admin.describe_topics(names)
        ready = {
            d["topic"]
            for d in described
            if d.get("error_code") == 0
            and d.get("partitions")
            and all(p.get("leader", -1) >= 0 for p in d["partitions"])
        }
        if ready >= set(names):
            return
        if time.monotonic() > deadline:
            raise BrokerError(f"topics {sorted(set(names) - ready)} were created but have no leader yet")
        await asyncio.sleep(0.1)


async def list_topics(bootstrap: str) -> set[str]:
    """The broker's topics (its internal ones included)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, names: Iterable[str]) -> dict[str, str]:
    """Delete topics; returns those the broker did not delete, each with its error's name (a topic already
    gone counts as deleted)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.delete_topics(list(names))
    finally:
        await admin.close()
    failed = {}
    for topic, code, *_ in response.topic_error_codes:
        if code not in (0, UnknownTopicOrPartitionError.errno):
            failed[topic] = for_code(code).__name__
    return failed


async def round_trip(bootstrap: str, timeout: float = 20.0) -> None:
    """Create a scratch topic, produce one record and consume it back: proof the broker really works."""
    topic = f"__driftlog_probe_{uuid.uuid4().hex[:12]}"
    payload = uuid.uuid4().bytes
    await ensure_topics(bootstrap, [topic], 1)
    try:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait(topic, payload)
        finally:
            await producer.stop()
        # a consumer group too, so that the group coordinator (and __consumer_offsets) is ready as well
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=topic,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            got = await asyncio.wait_for(consumer.getone(), timeout)
            await consumer.commit()
        finally:
            await consumer.stop()
        if got.value != payload:
            raise BrokerError(f"round trip through {bootstrap} returned other bytes than were sent")
    finally:
        await delete_topics(bootstrap, [topic])


async def wait_until_ready(bootstrap: str, timeout: float) -> None:
    """Retry :func:`round_trip` until it succeeds or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    quiet = logging.getLogger("aiokafka")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # "connection refused" while the broker boots is expected
    try:
        while time.monotonic() < deadline:
            try:
                await asyncio.wait_for(round_trip(bootstrap), max(1.0, deadline - time.monotonic()))
                return
            except (KafkaError, OSError, TimeoutError, BrokerError) as exc:
                last = exc
                await asyncio.sleep(0.5)
    finally:
        quiet.setLevel(level)
    raise BrokerError(f"Kafka at {bootstrap} did not accept produce/consume within {timeout:.0f}s: {last!r}")


async def partitions(bootstrap: str, topics: Iterable[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` as the cluster describes them now."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics))
    finally:
        await admin.close()
    return sorted(TopicPartition(d["topic"], p["partition"]) for d in described for p in d.get("partitions", []))


async def group_lag(bootstrap: str, group: str, topics: Iterable[str]) -> dict[TopicPartition, int]:
    """Per partition: end offset minus the group's committed offset (all of it when nothing is committed)."""
    async with GroupLag(bootstrap, group, topics) as lag:
        return await lag()


class GroupLag:
    """:func:`group_lag`, asked again and again over the same connections (a poll that opens its clients every
    time takes a round trip of several connections, and CPU, for each answer)."""

    def __init__(self, bootstrap: str, group: str, topics: Iterable[str]) -> None:
        self.bootstrap, self.group, self.topics = bootstrap, group, list(topics)
        self.tps: list[TopicPartition] = []

    async def __aenter__(self) -> GroupLag:
        self.tps = await partitions(self.bootstrap, self.topics)
        # (made here, after the partitions were found: a client made and never started or stopped is reported
        # unclosed)
        self.admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            await self.admin.start()
            await self.consumer.start()
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.consumer.stop()
        await self.admin.close()

    async def __call__(self) -> dict[TopicPartition, int]:
        ends = await self.consumer.end_offsets(self.tps)
        committed = await self.admin.list_consumer_group_offsets(self.group, partitions=self.tps)
        lag: dict[TopicPartition, int] = {}
        for tp in self.tps:
            meta = committed.get(tp)
            done = meta.offset if meta is not None and meta.offset >= 0 else 0
            lag[tp] = max(0, ends[tp] - done)
        return lag
