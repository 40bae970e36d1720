"""A time range of the input topics through the engine again (``driftlog replay``), for post-mortems.

The range is found with Kafka's offsets-for-times on every partition of the telemetry and decisions topics
(the first record at or after ``--from``; the first after ``--to``, else the end); each partition is an input
channel of the processor, read ``read_committed`` from its start offset to its end offset. ``--job`` keeps
the telemetry messages keyed by that job (the SDK and the simulator key messages by job) and every decision.
Same processor as the live worker, so a replay of a job from its start gives the live records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition

from audit.records import SourcePosition
from streams.errors import ConfigError
from streams.kafka.admin import partitions
from streams.pipeline import Output, Processor, channel_of

Progress = Callable[[float, float, str], None]


@dataclass(frozen=True)
class Range:
    start_ms: int
    end_ms: int | None  # None: up to the end of each partition as the replay starts


async def offsets_in(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], window: Range
) -> dict[TopicPartition, tuple[int, int]]:
    """Per partition: [first offset, end offset) of the records whose timestamps fall in the window."""
    ends = await consumer.end_offsets(tps)
    firsts = await consumer.offsets_for_times(dict.fromkeys(tps, window.start_ms))
    lasts = await consumer.offsets_for_times(dict.fromkeys(tps, window.end_ms + 1)) if window.end_ms is not None else {}
    out = {}
    for tp in tps:
        first = firsts[tp].offset if firsts.get(tp) is not None else ends[tp]
        last = lasts[tp].offset if lasts.get(tp) is not None else ends[tp]
        out[tp] = (first, max(first, last))
    return out


async def replay(
    bootstrap: str, topics: dict[str, str], window: Range, processor: Processor, job: str | None = None,
    progress: Progress | None = None,
) -> tuple[Output, dict[str, list[int]]]:  # fmt: skip
    """Run the range through ``processor``; returns its output and the offsets read per partition."""
    tps = await partitions(bootstrap, list(topics.values()))
    if not tps:
        raise ConfigError(f"no partitions found for {sorted(topics.values())}: is this the right cluster?")
    kind_of = {name: kind for kind, name in topics.items()}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )  # fmt: skip
    await consumer.start()
    out = Output()
    try:
        ranges = await offsets_in(consumer, tps, window)
        todo = {tp: r for tp, r in ranges.items() if r[1] > r[0]}
        consumer.assign(list(todo))
        for tp, (first, _) in todo.items():
            consumer.seek(tp, first)
        processor.declare(SourcePosition(tp.topic, tp.partition, 0) for tp in todo)
        total = sum(end - first for first, end in todo.values()) or 1
        done = 0
        last = SourcePosition(tps[0].topic, tps[0].partition, 0)
        while todo:
            batch = await consumer.getmany(*todo, timeout_ms=1000)
            for tp, messages in batch.items():
                end = todo.get(tp, (0, 0))[1]
                for m in messages:
                    if m.offset >= end:
                        break
                    done += 1
                    kind = kind_of[tp.topic]
                    if job is not None and kind == "telemetry" and m.key is not None and m.key.decode() != job:
                        continue
                    last = SourcePosition(tp.topic, tp.partition, m.offset)
                    if kind == "telemetry":  # the record's timestamp: the reference for future samples, as live
                        out.extend(processor.telemetry(m.value or b"", last, (), m.timestamp / 1000))
                    else:
                        out.extend(processor.decision(m.value or b"", last))
                if await consumer.position(tp) >= end:
                    todo.pop(tp, None)
                    consumer.pause(tp)
                    processor.timeline.forget(channel_of(tp.topic, tp.partition))
            if progress is not None:
                progress(done, total, " msg")
        out.extend(processor.flush(last))
        return out, {channel_of(tp.topic, tp.partition): list(r) for tp, r in sorted(ranges.items())}
    finally:
        await consumer.stop()
