"""Send until delivered: a failed send is retried (the broker may be away) and never skipped.

A Faust agent that raises acks its message, so it is silently skipped; a send must therefore not raise
for a transient failure. :func:`send_until_delivered` retries with backoff while the error is retriable,
reports the outage to a :class:`~streams.health.Health`, and gives up only when the process stops (the
input message is then not acknowledged and is consumed again after the restart). A message the cluster
refuses as too large is not retried: the caller shrinks it (:func:`streams.kafka.limits.fit_dead_letter`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from streams.health import Health

_T = TypeVar("_T")


class Stopped(Exception):
    """The process stopped before the message could be delivered (it was not acknowledged)."""


async def send_until_delivered(
    send: Callable[[], Awaitable[_T]],
    *,
    health: Health | None = None,
    stopping: asyncio.Event | None = None,
    first_backoff_s: float = 0.2,
    max_backoff_s: float = 5.0,
) -> _T:
    """``await send()`` until it succeeds. ``send`` makes a fresh attempt each call (e.g. ``lambda:
    producer.send_and_wait(topic, value)``)."""
    backoff = first_backoff_s
    while True:
        try:
            result = await send()
        except MessageSizeTooLargeError:
            raise
        except (KafkaError, OSError, TimeoutError) as exc:
            if health is not None:
                health.broker_failed(exc)
            if stopping is not None and stopping.is_set():
                raise Stopped(f"stopped before delivery: {exc}") from exc
            await asyncio.sleep(backoff)
            backoff = min(max_backoff_s, backoff * 2)
            continue
        if health is not None:
            health.broker_ok()
        return result
