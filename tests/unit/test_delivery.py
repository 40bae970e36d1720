"""Pieces the worker uses so that every dead letter is delivered: sizes, shrinking as a last resort, and
retrying a failed send instead of skipping the message."""

from __future__ import annotations

import asyncio
import hashlib

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError

from streams.contract.envelope import MAX_MESSAGE_BYTES
from streams.health import Health
from streams.kafka.delivery import Stopped, send_until_delivered
from streams.kafka.limits import PRODUCER_MAX_REQUEST_BYTES, TOPIC_MAX_BYTES, fit_dead_letter

HEADERS = [("driftlog.reason", b"oversized"), ("driftlog.source", b"t/0/1")]


def test_the_limits_admit_what_the_contract_admits() -> None:
    assert PRODUCER_MAX_REQUEST_BYTES > MAX_MESSAGE_BYTES + 64 * 1024
    assert TOPIC_MAX_BYTES >= PRODUCER_MAX_REQUEST_BYTES


def test_a_dead_letter_that_fits_is_left_alone() -> None:
    original = b"x" * MAX_MESSAGE_BYTES
    assert fit_dead_letter(original, HEADERS, PRODUCER_MAX_REQUEST_BYTES) == (original, HEADERS)


def test_a_dead_letter_too_large_for_the_cluster_keeps_its_size_and_hash() -> None:
    original = bytes(range(256)) * 8192  # 2 MiB
    value, headers = fit_dead_letter(original, HEADERS, 1_000_000)
    assert len(value) + sum(len(k) + len(v) for k, v in headers) < 1_000_000
    assert original.startswith(value) and len(value) > 900_000
    extra = dict(headers[len(HEADERS) :])
    assert extra == {"driftlog.truncated": b"2097152", "driftlog.sha256": hashlib.sha256(original).hexdigest().encode()}


def test_a_failed_send_is_retried_until_delivered_and_reported() -> None:
    attempts: list[int] = []
    health = Health("worker", broker_timeout_s=0.0)
    health.ready = True

    async def send() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise KafkaConnectionError("broker away")
        return "delivered"

    seen: list[bool] = []

    async def main() -> str:
        async def watch() -> None:
            while len(attempts) < 3:
                seen.append(health.verdict()[0])
                await asyncio.sleep(0.001)

        watcher = asyncio.ensure_future(watch())
        result = await send_until_delivered(send, health=health, first_backoff_s=0.01)
        await watcher
        return result

    assert asyncio.run(main()) == "delivered" and len(attempts) == 3
    assert False in seen  # unhealthy while it could not deliver
    assert health.verdict()[0]  # and healthy again once it did


def test_stopping_gives_up_without_delivering_and_too_large_is_not_retried() -> None:
    async def away() -> None:
        raise KafkaConnectionError("broker away")

    async def too_large() -> None:
        raise MessageSizeTooLargeError()

    stopping = asyncio.Event()
    stopping.set()
    with pytest.raises(Stopped):
        asyncio.run(send_until_delivered(away, stopping=stopping, first_backoff_s=0.01))
    with pytest.raises(MessageSizeTooLargeError):
        asyncio.run(send_until_delivered(too_large))
