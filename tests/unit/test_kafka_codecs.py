"""A worker reads telemetry whatever codec its exporters' producers compress with (Kafka's lz4, zstd, snappy,
gzip; aiokafka needs cramjam for all but gzip), and driftlog's own producers of telemetry compress."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from streams.client import AsyncProducer
from streams.contract.envelope import decode_telemetry
from streams.kafka.limits import TELEMETRY_COMPRESSION
from streams.sim.scenarios import SCENARIOS

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}  # Kafka's record batch attribute codes


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_a_compressed_record_batch_reads_back_as_the_telemetry_it_holds(codec: str) -> None:
    """The consumer's path (aiokafka's record batch, C or Python) over a batch compressed as a producer
    with ``compression_type=codec`` writes it."""
    values = [v for k, _, v in SCENARIOS["training-fabric"](1, 16, 3).run() if k == "telemetry"]
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], 0, -1, -1, -1, batch_size=64 << 20)
    for offset, value in enumerate(values):
        assert builder.append(offset, timestamp=None, key=b"job", value=value, headers=[]) is not None
    built = bytes(builder.build())
    batch = MemoryRecords(built).next_batch()
    assert batch is not None and batch.validate_crc()
    read = [record.value for record in batch]
    assert read == values
    assert len(built) < sum(map(len, values)) / 3  # (compressed, not stored as it came)
    assert all(decode_telemetry(v).total > 0 for v in read)


def test_the_sdk_compresses_what_it_sends() -> None:
    async def made() -> AsyncProducer:
        return AsyncProducer("127.0.0.1:1")  # (not started: nothing connects)

    producer = asyncio.run(made())
    assert TELEMETRY_COMPRESSION in CODECS
    assert producer._kafka._compression_type == TELEMETRY_COMPRESSION
