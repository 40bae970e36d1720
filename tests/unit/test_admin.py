"""streams.kafka.admin without a broker: what it makes of the broker's answers."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from streams.kafka import admin


class _Admin:
    """An admin client whose delete answers per topic with the given error codes."""

    codes: ClassVar[dict[str, int]] = {}

    def __init__(self, **_: Any) -> None:
        self.closed = False

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        self.closed = True

    async def delete_topics(self, names: list[str]) -> SimpleNamespace:
        return SimpleNamespace(topic_error_codes=[(n, self.codes[n]) for n in names])


def test_delete_topics_returns_the_topics_the_broker_did_not_delete(monkeypatch: pytest.MonkeyPatch) -> None:
    """A topic already gone (UNKNOWN_TOPIC_OR_PARTITION, 3) counts as deleted; any other error is returned by
    name."""
    monkeypatch.setattr(admin, "AIOKafkaAdminClient", _Admin)
    monkeypatch.setattr(_Admin, "codes", {"a": 0, "gone": 3, "refused": 41, "denied": 29})
    failed = asyncio.run(admin.delete_topics("127.0.0.1:1", ["a", "gone", "refused", "denied"]))
    assert failed == {"refused": "NotControllerError", "denied": "TopicAuthorizationFailedError"}
