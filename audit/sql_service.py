"""SQL over HTTP (``POST /sql``), served beside the sink without touching the store it writes.

Queries run on the latest snapshot the sink published (audit/snapshot.py): an in-memory DuckDB over
immutable Parquet files that has no handle on the DuckDB file, with file access confined to the snapshot
and the configuration locked; each query is also checked by audit/sql_guard.py. They run on this
service's own small pool of low-priority threads (never the pool the sink commits on). At most
``concurrency`` run and ``queue`` wait; beyond that a request gets 429 at once. Results are capped in
rows, bytes and time and streamed: a result that fits in :data:`STREAM_AFTER` bytes is one response (a
limit hit is a 400); a larger one is sent as it is produced, and a limit hit mid-way ends the body with
an error (JSON: an ``"error"`` member after ``"rows"``; Arrow: a last, empty batch whose custom metadata
has ``driftlog-error``). A request body must arrive within ``read_timeout_s`` (408).

Only ``/sql`` needs the bearer token; ``/health`` and ``/metrics`` (ops.py) answer without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import os
import threading
import time
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
from aiohttp import web

from audit.snapshot import Snapshot
from audit.sql_run import ERROR_KEY, Limits, batches, too_many_bytes
from streams.errors import ConfigError, QueryError

ARROW_STREAM = "application/vnd.apache.arrow.stream"
STREAM_AFTER = 1024 * 1024  # bytes buffered before the response starts streaming
CHANNEL_DEPTH = 4  # encoded chunks a query may run ahead of a slow client
QUERY_NICE = 10  # query threads: ~1/10 the CPU share of the sink's threads when both want a core
TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_token_off_loopback(host: str, token: str) -> None:
    """Refuse to start with a token a client cannot send (RFC 6750 token characters only), or with none
    when SQL is served beyond loopback."""
    if token and not set(token) <= TOKEN_CHARS:
        raise ConfigError(
            "DRIFTLOG_SQL_TOKEN has characters an Authorization header cannot carry: use letters, digits and -._~+/="
        )
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"DRIFTLOG_HTTP_HOST={host} serves SQL beyond loopback: set DRIFTLOG_SQL_TOKEN to require a bearer token"
        )


def authorized(header: str | None, token: str) -> bool:
    """Constant-time comparison on bytes: any header (missing, malformed, non-ASCII) that is not exactly
    ``Bearer <token>`` is simply refused."""
    if not token:
        return True
    given = (header or "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {token}".encode())


@dataclass(frozen=True)
class ServiceLimits:
    query: Limits
    concurrency: int = 2
    queue: int = 8
    read_timeout_s: float = 5.0


def _low_priority() -> None:
    """Query threads yield the CPU to the sink's commits (Linux: nice applies per thread)."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), QUERY_NICE)


class _Channel:
    """Chunks from a query thread to the event loop, at most ``CHANNEL_DEPTH`` ahead of the client."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue[tuple[str, Any]]()
        self.slots = threading.Semaphore(CHANNEL_DEPTH)
        self.gone = threading.Event()

    def put(self, kind: str, item: Any, timeout: float) -> bool:
        if self.gone.is_set() or not self.slots.acquire(timeout=max(timeout, 0.0)):
            return False
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (kind, item))
        return True

    async def get(self) -> tuple[str, Any]:
        item = await self.queue.get()
        self.slots.release()
        return item


class _Bytes:
    """A file-like sink for the Arrow IPC writer whose bytes are handed out as they are written."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.position = 0
        self.closed = False

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.parts.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def flush(self) -> None:
        pass

    def tell(self) -> int:
        return self.position

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data, self.parts = b"".join(self.parts), []
        return data


class _Encoder:
    """A result as JSON ``{"columns": [...], "rows": [[...], ...]}`` or an Arrow IPC stream."""

    def __init__(self, arrow: bool, schema: pa.Schema) -> None:
        self.arrow, self.schema = arrow, schema
        self.out = _Bytes()
        self.writer = pa.ipc.new_stream(self.out, schema) if arrow else None

    def head(self) -> bytes:
        if self.writer is not None:
            return self.out.take()
        return b'{"columns":' + orjson.dumps(self.schema.names) + b',"rows":['

    def batch(self, batch: pa.RecordBatch, first: bool) -> bytes:
        if self.writer is not None:
            self.writer.write_batch(batch)
            return self.out.take()
        rows = list(zip(*(c.to_pylist() for c in batch.columns), strict=True))
        if not rows:
            return b""
        body = orjson.dumps(rows, default=str)[1:-1]
        return body if first else b"," + body

    def end(self, error: str | None = None) -> bytes:
        if self.writer is not None:
            if error is not None:
                empty = pa.RecordBatch.from_pylist([], schema=self.schema)
                self.writer.write_batch(empty, custom_metadata={ERROR_KEY: error.encode()})
            self.writer.close()
            return self.out.take()
        return b"]}" if error is None else b'],"error":' + orjson.dumps(error) + b"}"


class SqlService:
    """``POST /sql`` with JSON ``{"sql", "params", "max_rows", "format": "json"|"arrow"}``."""

    def __init__(self, snapshot: Callable[[], Snapshot | None], token: str, limits: ServiceLimits) -> None:
        self.snapshot, self.token, self.limits = snapshot, token, limits
        self.executor = ThreadPoolExecutor(limits.concurrency, "driftlog-query", initializer=_low_priority)
        self.admitted = 0

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/sql", self.handle)]

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not authorized(request.headers.get("Authorization"), self.token):
            return _error(401, "missing or wrong bearer token")
        if self.admitted >= self.limits.concurrency + self.limits.queue:
            response = _error(429, f"{self.admitted} queries are running or waiting; retry later")
            response.headers["Retry-After"] = "1"
            return response
        self.admitted += 1
        try:
            return await self._admitted(request)
        finally:
            self.admitted -= 1

    async def _admitted(self, request: web.Request) -> web.StreamResponse:
        try:
            raw = await asyncio.wait_for(request.read(), self.limits.read_timeout_s)
        except TimeoutError:
            return _error(408, f"the request body did not arrive within {self.limits.read_timeout_s:g}s")
        try:
            body = orjson.loads(raw)
            sql = body["sql"]
            if not isinstance(sql, str):
                raise TypeError("sql must be a string")
            limits = self.limits.query.narrowed(body.get("max_rows"))
            arrow = body.get("format") == "arrow"
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            return _error(400, f"expected JSON {{'sql': ...}}: {exc}")
        if self.snapshot() is None:
            return _error(503, "no current snapshot of the audit store (starting, or publishing failed: see the log)")
        channel = _Channel(asyncio.get_running_loop())
        job = asyncio.get_running_loop().run_in_executor(
            self.executor, _produce, channel, self.snapshot, sql, body.get("params"), limits, arrow
        )
        try:
            return await _respond(request, channel, arrow)
        finally:
            channel.gone.set()
            await asyncio.shield(job)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _produce(
    channel: _Channel, snapshot: Callable[[], Snapshot | None], sql: str, params: Any, limits: Limits, arrow: bool
) -> None:
    """In a query thread: take the newest snapshot (when the query starts, not when it was admitted: a
    replaced snapshot's files are kept only for as long as a query may run), run, encode and hand over
    chunks; the first item says how to answer."""
    snap = snapshot()
    if snap is None:
        channel.put("error", "no current snapshot of the audit store", limits.timeout_s)
        return
    deadline = time.monotonic() + limits.timeout_s
    it: Generator[pa.RecordBatch] = batches(snap.con.cursor(), sql, params, limits)
    try:
        schema = next(it).schema
    except QueryError as exc:
        channel.put("error", str(exc), limits.timeout_s)
        return
    encoder = _Encoder(arrow, schema)
    buffered, sent, first, streaming = [encoder.head()], 0, True, False
    try:
        for batch in it:
            chunk = encoder.batch(batch, first)
            first = first and not chunk
            sent += len(chunk)
            if sent > limits.max_bytes:
                raise too_many_bytes(limits)
            buffered.append(chunk)
            if streaming or sum(map(len, buffered)) > STREAM_AFTER:
                if not streaming:
                    channel.put("stream", None, deadline - time.monotonic())
                    streaming = True
                if not channel.put("data", b"".join(buffered), deadline - time.monotonic()):
                    return  # the client went away or stopped reading: give the thread back
                buffered = []
    except QueryError as exc:
        if not streaming:
            channel.put("error", str(exc), limits.timeout_s)
            return
        buffered.append(encoder.end(str(exc)))
    else:
        buffered.append(encoder.end())
    finally:
        it.close()
    if not streaming:
        channel.put("whole", b"".join(buffered), limits.timeout_s)
    else:
        channel.put("data", b"".join(buffered), deadline - time.monotonic() + 1)
        channel.put("end", None, 1)


async def _respond(request: web.Request, channel: _Channel, arrow: bool) -> web.StreamResponse:
    content_type = ARROW_STREAM if arrow else "application/json"
    kind, item = await channel.get()
    if kind == "error":
        return _error(400, item)
    if kind == "whole":
        return web.Response(body=item, content_type=content_type)
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    while True:
        kind, item = await channel.get()
        if kind == "end":
            break
        await response.write(item)
    await response.write_eof()
    return response
