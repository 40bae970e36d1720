"""The worker's Faust consumer asks the broker to answer a fetch of idle partitions within
``FETCH_MAX_WAIT_MS`` (Faust's own fixes 1.5 s, which stalled a busy partition behind it:
streams/kafka/fetching.py), and keeps every other setting Faust gives it."""

from __future__ import annotations

import asyncio

import faust

from streams.config import Settings
from streams.kafka.fetching import FETCH_MAX_WAIT_MS, ISOLATION_LEVEL
from streams.worker import build_app


def _consumers(settings: Settings) -> tuple[object, object]:
    """The aiokafka consumer the worker's Faust app creates, and the one plain Faust creates."""
    app, _ = build_app(settings)
    plain = faust.App("plain", broker=f"kafka://{settings.kafka_bootstrap_servers}")

    async def create() -> tuple[object, object]:
        ours = app.consumer._new_consumer_thread()._create_worker_consumer(app.transport)
        theirs = plain.consumer._new_consumer_thread()._create_worker_consumer(plain.transport)
        return ours, theirs

    return asyncio.run(create())


def test_the_worker_fetches_with_a_short_wait_and_faust_otherwise_unchanged(tmp_path: object) -> None:
    settings = Settings(kafka_bootstrap_servers="127.0.0.1:1", home=tmp_path)  # (nothing connects)
    ours, theirs = _consumers(settings)
    assert ours._fetch_max_wait_ms == FETCH_MAX_WAIT_MS < theirs._fetch_max_wait_ms  # type: ignore[attr-defined]
    assert (ours._isolation_level, theirs._isolation_level) == (ISOLATION_LEVEL, "read_uncommitted")  # type: ignore[attr-defined]
    assert ours._group_id == settings.worker_group  # type: ignore[attr-defined]
    assert not ours._enable_auto_commit  # type: ignore[attr-defined]  # (acknowledged after the snapshots)
