"""Producer SDK for training loops, exporters and controllers: batches samples into columnar envelopes.

    from streams.client import Producer

    with Producer("broker:9092", source="trainer-rank0") as p:
        p.step(job="llm-7b", step=41, start=t0, duration=1.02, output_units=4_194_304)
        p.op(job="llm-7b", step=41, rank=0, op="allreduce", op_class="comm", start=t1, duration=0.08,
             group="dp-0", seq=41)
        p.decision(id="cap-17", time=t2, controller="power/rack7", layer="power", action="power_cap",
                   targets=["node:n7"], parameters={"cap_w": 450})

``AsyncProducer`` has the same methods as coroutines. Samples are buffered per job and sent as one message
of up to ``max_samples`` samples (keyed by job, so a job's telemetry stays in order on one partition), at
the latest ``linger_s`` seconds after the first sample of the batch. A message is at most
``max_message_bytes`` (default 1,000,000: it fits a broker's and a producer's default limits; raise it only
with the topic's ``max.message.bytes``): a batch that would be larger, or a ready-made envelope sent with
``send_envelope``, goes as several messages, split by rows (:mod:`streams.contract.sizing`). Messages
carry ``source`` and a sequence number, so a re-sent message is recognised as a duplicate. The service
validates; an invalid sample is dead-lettered there with its reason, it never blocks the others.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import orjson
from aiokafka import AIOKafkaProducer

from streams.contract.schema import DECISION_SCHEMA, TELEMETRY_SCHEMA, sample_rules
from streams.contract.sizing import MAX_MESSAGE_BYTES, fit, fit_document
from streams.kafka.limits import TELEMETRY_COMPRESSION

T = TypeVar("T")


def default_source() -> str:
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"


class Batcher:
    """Pure batching: rows per job in, columnar envelope bytes out (constant columns sent as scalars)."""

    def __init__(self, source: str, max_samples: int = 5000, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.source = source
        self.max_samples = max_samples
        self.max_bytes = max_bytes
        self.seq = 0
        self._rows: dict[str, dict[str, list[dict[str, Any]]]] = {}  # job -> kind -> rows
        self._sizes: dict[str, int] = {}

    def add(self, kind: str, fields: dict[str, Any]) -> list[tuple[str, bytes]]:
        """Buffer one sample; returns the (key, envelope) messages of its job's batch once it is full
        (several when one would exceed ``max_bytes``), else nothing."""
        job = str(fields.get("job", ""))
        self._rows.setdefault(job, {}).setdefault(kind, []).append(fields)
        self._sizes[job] = self._sizes.get(job, 0) + 1
        return self._take(job) if self._sizes[job] >= self.max_samples else []

    def drain(self) -> list[tuple[str, bytes]]:
        """Every buffered batch, as (key, envelope) messages."""
        return [message for job in list(self._rows) for message in self._take(job)]

    def __len__(self) -> int:
        return sum(self._sizes.values())

    def _take(self, job: str) -> list[tuple[str, bytes]]:
        by_kind = self._rows.pop(job)
        del self._sizes[job]
        doc: dict[str, Any] = {"schema": TELEMETRY_SCHEMA, "source": self.source, "seq": self.seq}
        for kind, rows in by_kind.items():
            batch = _columns(kind, rows)
            if batch is None:  # row-wise, so that the service can name the missing field per sample
                doc.setdefault("samples", []).extend({"kind": kind, **r} for r in rows)
            else:
                doc.setdefault("columns", []).append(batch)
        self.seq += 1
        return [(job or self.source, value) for value in fit_document(doc, self.max_bytes)]


def _columns(kind: str, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A column batch, or None when some row lacks a required field (columns cannot say "missing")."""
    data: dict[str, Any] = {}
    for rule in sample_rules(kind):
        if rule.required and any(rule.name not in r for r in rows):
            return None
        values = [r.get(rule.name, rule.default) for r in rows]
        first = values[0]
        data[rule.name] = first if all(type(v) is type(first) and v == first for v in values) else values
    return {"kind": kind, "n": len(rows), "data": data}


def decision_message(**fields: Any) -> tuple[str, bytes]:
    doc = {"schema": DECISION_SCHEMA, **{k: v for k, v in fields.items() if v is not None}}
    key = fields.get("job") or fields.get("controller") or "decision"
    return str(key), orjson.dumps(doc, default=str)


class AsyncProducer:
    """asyncio producer; use ``async with`` or ``await start()`` / ``await stop()``."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        source: str | None = None,
        telemetry_topic: str = "driftlog.telemetry",
        decisions_topic: str = "driftlog.decisions",
        max_samples: int = 5000,
        linger_s: float = 1.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self.batcher = Batcher(source or default_source(), max_samples, max_message_bytes)
        self.telemetry_topic = telemetry_topic
        self.decisions_topic = decisions_topic
        self.linger_s = linger_s
        self._kafka = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5,
                                       max_request_size=max(8 << 20, max_message_bytes + (64 << 10)),
                                       compression_type=TELEMETRY_COMPRESSION)  # fmt: skip
        self._linger: asyncio.Task[None] | None = None
        self.lock = threading.Lock()  # the batcher is shared with Producer's calling thread

    async def start(self) -> None:
        await self._kafka.start()
        self._linger = asyncio.create_task(self._linger_loop())

    async def stop(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        await self.flush()
        await self._kafka.stop()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop()

    async def _linger_loop(self) -> None:
        while True:
            await asyncio.sleep(self.linger_s)
            await self.flush()

    async def add(self, kind: str, fields: dict[str, Any]) -> None:
        """Buffer one sample of ``kind`` (sent when its job's batch is full, or on flush/linger)."""
        with self.lock:
            full = self.batcher.add(kind, fields)
        for key, value in full:
            await self._send(self.telemetry_topic, key, value)

    async def _send(self, topic: str, key: str, value: bytes) -> None:
        await self._kafka.send_and_wait(topic, value, key=key.encode())

    async def send_envelope(self, key: str, value: bytes) -> None:
        """Send one ready-made telemetry envelope (e.g. from a format reader): as it is, or split by rows
        when it exceeds ``max_message_bytes``."""
        for part in fit(value, self.batcher.max_bytes):
            await self._send(self.telemetry_topic, key, part)

    async def flush(self) -> None:
        """Send every buffered sample now."""
        with self.lock:
            batches = self.batcher.drain()
        for key, value in batches:
            await self._send(self.telemetry_topic, key, value)

    async def op(self, **fields: Any) -> None:
        """One operation span: job, step, rank, op, op_class, start, duration (+ dp, pp, tp, microbatch,
        group, seq, peer, device). See docs/contract.md."""
        await self.add("op", fields)

    async def metric(self, **fields: Any) -> None:
        """A gauge sample: entity, name, value, time (+ job, unit)."""
        await self.add("metric", fields)

    async def step(self, **fields: Any) -> None:
        """A step/request summary: job, step, start, duration (+ output_units, attempts, status, accelerators)."""
        await self.add("step", fields)

    async def topology(self, **fields: Any) -> None:
        """A structural edge: relation, src, dst, time (+ job, capacity)."""
        await self.add("topology", fields)

    async def decision(self, **fields: Any) -> None:
        """A control decision, sent at once: id, time, controller, layer, action, targets (+ parameters,
        reason, expected_effect, job)."""
        await self._send(self.decisions_topic, *decision_message(**fields))


class Producer:
    """The same as :class:`AsyncProducer` for synchronous code (a training loop). Samples are batched in the
    calling thread; an event loop in a background thread sends. A call blocks only while a full batch is
    being sent (back-pressure)."""

    def __init__(self, bootstrap_servers: str, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="driftlog-producer", daemon=True)
        self._thread.start()
        self._async = self._call(self._make(bootstrap_servers, options))
        self._call(self._async.start())

    @staticmethod
    async def _make(bootstrap_servers: str, options: dict[str, Any]) -> AsyncProducer:
        return AsyncProducer(bootstrap_servers, **options)  # created inside the loop it will run on

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush and stop; the background thread ends."""
        self._call(self._async.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def flush(self) -> None:
        self._call(self._async.flush())

    def _add(self, kind: str, fields: dict[str, Any]) -> None:
        producer = self._async
        with producer.lock:
            full = producer.batcher.add(kind, fields)
        for key, value in full:
            self._call(producer._send(producer.telemetry_topic, key, value))

    def op(self, **fields: Any) -> None:
        self._add("op", fields)

    def metric(self, **fields: Any) -> None:
        self._add("metric", fields)

    def step(self, **fields: Any) -> None:
        self._add("step", fields)

    def topology(self, **fields: Any) -> None:
        self._add("topology", fields)

    def decision(self, **fields: Any) -> None:
        self._call(self._async.decision(**fields))
