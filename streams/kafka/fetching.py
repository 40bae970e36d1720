"""Faust's Kafka consumer, fetching without long stalls and reading only committed input.

aiokafka keeps one fetch request in flight per broker, and leaves out of it every partition whose fetched
records are not yet consumed. While the worker processes a busy partition, the request in flight holds only
its idle partitions, which the broker keeps open for ``fetch_max_wait_ms`` waiting for data: the busy
partition's next records cannot be asked for before it returns. Faust fixes that wait at 1.5 s, so a worker
draining one busy partition of four stood idle up to 1.5 s per fetch of ``consumer_max_fetch_size`` bytes
(py-spy: its event loop idle three quarters of the time while a backlog waited), and a finding could wait as
long for its input. :class:`App` is Faust's app with that wait set to ``FETCH_MAX_WAIT_MS``.

It also reads ``read_committed`` (Faust reads ``read_uncommitted`` unless its own exactly-once is on), as
``driftlog replay`` and the worker's decision reader do: a message of an aborted (or still open) producer
transaction is never input, so live and replay see the same messages, and a bench can hold a whole workload
back in one open transaction and release it at once.
"""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.drivers import aiokafka as driver
from faust.types import TransportT

from streams.kafka.batching import BatchingConsumer

FETCH_MAX_WAIT_MS = 100  # the broker answers a fetch of idle partitions after at most this long
ISOLATION_LEVEL = "read_committed"


class _ConsumerThread(driver.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS  # (both read when the consumer starts its fetcher)
        consumer._isolation_level = ISOLATION_LEVEL
        return consumer


class _Consumer(BatchingConsumer, driver.Consumer):
    def _new_consumer_thread(self) -> driver.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class _Transport(driver.Transport):
    Consumer = _Consumer


class App(faust.App):
    """Faust's app whose consumer fetches with ``FETCH_MAX_WAIT_MS``, ``read_committed`` (the broker URL must be
    ``kafka://``)."""

    def _new_transport(self) -> TransportT:
        return _Transport(self.conf.broker_consumer, self)
