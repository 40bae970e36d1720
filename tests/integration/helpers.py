"""Helpers for integration tests: free ports, HTTP GETs, topic reads."""

from __future__ import annotations

import urllib.request
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer


def http_get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def http_json(port: int, path: str) -> tuple[int, Any]:
    status, body = http_get(port, path)
    return status, orjson.loads(body)


async def read_all(bootstrap: str, topic: str, expected: int, timeout_ms: int = 10_000) -> list[Any]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", isolation_level="read_committed"
    )
    await consumer.start()
    got: list[Any] = []
    try:
        while len(got) < expected:
            batch = await consumer.getmany(timeout_ms=timeout_ms)
            if not batch:
                break
            for msgs in batch.values():
                got.extend(msgs)
    finally:
        await consumer.stop()
    return got
